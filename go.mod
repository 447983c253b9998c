module github.com/idemkit/idemkit

go 1.26.0

require github.com/idemkit/idemkit/spancontract v0.0.0

require github.com/gowebpki/jcs v1.0.2

replace github.com/idemkit/idemkit/spancontract => ./spancontract
