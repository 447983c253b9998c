module github.com/idemkit/idemkit/spancontract

go 1.26.0
