package tagindex

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndex_MatchesMap checks the index, with full keys confirmed in a side
// array as the stores do, against a Go map under random inserts and deletes.
// Tags come from a small space, so that many keys share a tag and long
// probe runs wrap around the table.
func TestIndex_MatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ix := New()
	keys := []uint64{0} // arena index -> key; 0 unused
	ref := map[uint64]uint32{}
	tag := func(k uint64) uint32 { return uint32(k%997) + 1 }
	find := func(k uint64) uint32 {
		for i := ix.Home(tag(k)); ; i = ix.Next(i) {
			s := ix.Slot(i)
			if s.Tag == 0 {
				return 0
			}
			if s.Tag == tag(k) && keys[s.Idx] == k {
				return s.Idx
			}
		}
	}
	var live []uint64
	for i := 0; i < 200_000; i++ {
		switch op := rng.IntN(10); {
		case op < 5 || len(live) == 0:
			k := rng.Uint64()%20_000 + 1
			if _, ok := ref[k]; ok {
				require.Equal(t, ref[k], find(k))
				continue
			}
			keys = append(keys, k)
			idx := uint32(len(keys) - 1)
			ix.Insert(tag(k), idx)
			ref[k] = idx
			live = append(live, k)
		case op < 8:
			j := rng.IntN(len(live))
			k := live[j]
			ix.Del(tag(k), ref[k])
			delete(ref, k)
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			k := rng.Uint64()%20_000 + 1
			require.Equal(t, ref[k], find(k))
		}
		require.Equal(t, len(ref), ix.Len())
	}
	for k, idx := range ref {
		require.Equal(t, idx, find(k))
	}
}
