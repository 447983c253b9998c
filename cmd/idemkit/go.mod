module github.com/idemkit/idemkit/cmd/idemkit

go 1.26.0

require github.com/idemkit/idemkit v0.1.0

require (
	github.com/gowebpki/jcs v1.0.2 // indirect
	github.com/idemkit/idemkit/spancontract v0.1.0 // indirect
)
