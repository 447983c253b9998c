package dupprocessor

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTable_MatchesMap checks the table against a Go map under random
// inserts, overwrites and deletes, including colliding keys.
func TestTable_MatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := newTable[*int](rng.Uint64())
	ref := map[uint64]*int{}
	keys := make([]uint64, 0, 5000)
	for i := 0; i < 200_000; i++ {
		switch op := rng.IntN(10); {
		case op < 5 || len(keys) == 0:
			k := rng.Uint64()%20_000 + 1 // small key space: collisions and overwrites
			v := new(int)
			*v = i
			tb.put(k, v)
			if _, ok := ref[k]; !ok {
				keys = append(keys, k)
			}
			ref[k] = v
		case op < 8:
			j := rng.IntN(len(keys))
			k := keys[j]
			tb.del(k)
			delete(ref, k)
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		default:
			k := rng.Uint64()%20_000 + 1
			require.Equal(t, ref[k], tb.get(k))
		}
		require.Equal(t, len(ref), tb.len())
	}
	for k, v := range ref {
		require.Same(t, v, tb.get(k))
	}
}
