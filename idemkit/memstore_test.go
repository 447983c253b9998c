package idemkit_test

import (
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
)

func TestMemoryStore_Conformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewStore: func(*testing.T) idemstore.Store { return &idemkit.MemoryStore{} },
	})
}
