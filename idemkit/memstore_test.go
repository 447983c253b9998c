package idemkit_test

import (
	"testing"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemkit/storetest"
)

func TestMemoryStore_Conformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewStore: func(*testing.T) idemkit.Store { return &idemkit.MemoryStore{} },
	})
}
