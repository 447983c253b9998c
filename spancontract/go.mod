module github.com/idemkit-mcp/idemkit/spancontract

go 1.26.0
