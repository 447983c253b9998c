package dupprocessor

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndex_MatchesMap checks the index, with full keys confirmed in a side
// array as the stores do, against a Go map under random inserts and deletes.
// Tags come from a small space, so that many keys share a tag and long
// probe runs wrap around the table.
func TestIndex_MatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ix := newIndex()
	keys := []uint64{0} // arena index -> key; 0 unused
	ref := map[uint64]uint32{}
	tag := func(k uint64) uint32 { return uint32(k%997) + 1 }
	find := func(k uint64) uint32 {
		for i := ix.home(tag(k)); ; i = (i + 1) & ix.mask {
			s := ix.slots[i]
			if s.tag == 0 {
				return 0
			}
			if s.tag == tag(k) && keys[s.idx] == k {
				return s.idx
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
			ix.insert(tag(k), idx)
			ref[k] = idx
			live = append(live, k)
		case op < 8:
			j := rng.IntN(len(live))
			k := live[j]
			ix.del(tag(k), ref[k])
			delete(ref, k)
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			k := rng.Uint64()%20_000 + 1
			require.Equal(t, ref[k], find(k))
		}
		require.Equal(t, len(ref), ix.len())
	}
	for k, idx := range ref {
		require.Equal(t, idx, find(k))
	}
}

// TestStores_TagCollisions checks that two group keys or two contexts whose
// tags collide stay apart: the tag only selects candidates.
func TestStores_TagCollisions(t *testing.T) {
	gs := newGroupStore(1, 2)
	a, b := gkey{1}, gkey{2}
	ia := gs.create(&a, 42)
	require.Zero(t, gs.find(&b, 42))
	ib := gs.create(&b, 42)
	require.NotEqual(t, ia, ib)
	require.Equal(t, ia, gs.find(&a, 42))
	require.Equal(t, ib, gs.find(&b, 42))
	gs.remove(ia, 42)
	require.Zero(t, gs.find(&a, 42))
	require.Equal(t, ib, gs.find(&b, 42))

	es := newEvidenceStore(1, 2)
	ea := es.create(7, 9)
	require.Nil(t, es.find(8, 9))
	eb := es.create(8, 9)
	require.Same(t, ea, es.find(7, 9))
	require.Same(t, eb, es.find(8, 9))
}

// TestEvidence_Blocks checks that chats and tool marks keep the most recent
// maxEvidence, sorted, across the move from inline storage to a block, and
// that a freed context's blocks are reused.
func TestEvidence_Blocks(t *testing.T) {
	es := newEvidenceStore(3, 4)
	e := es.create(5, es.tag(5))
	rng := rand.New(rand.NewPCG(1, 1))
	var chats []int64
	for i := 0; i < 100; i++ {
		c := rng.Int64N(1000)
		es.addChat(e, c)
		chats = append(chats, c)
		es.addTool(e, toolMark{start: c, key: uint64(i)})
	}
	got := es.chatsOf(e)
	require.Len(t, got, maxEvidence)
	require.IsNonDecreasing(t, got)
	slices.Sort(chats) // the most recent: the latest start times, whatever their arrival order
	require.Equal(t, chats[len(chats)-maxEvidence:], got)
	require.Len(t, es.toolsOf(e), maxEvidence)
	for i := 1; i < maxEvidence; i++ {
		require.LessOrEqual(t, es.toolsOf(e)[i-1].start, es.toolsOf(e)[i].start)
	}
	for i := 0; i < 20; i++ {
		es.addGap(e, gapMark{int64(i), int64(i + 10)})
	}
	require.Len(t, es.gapsOf(e), maxGaps)
	require.Equal(t, gapMark{19, 29}, es.gapsOf(e)[maxGaps-1])
	blk := e.chatBlk
	es.remove(es.index.slots[es.index.home(e.tag)].idx)
	require.Zero(t, es.len())
	e2 := es.create(6, es.tag(6))
	for i := 0; i < 5; i++ {
		es.addChat(e2, int64(i))
	}
	require.Equal(t, blk, e2.chatBlk, "a freed block is reused")
	require.Equal(t, []int64{0, 1, 2, 3, 4}, es.chatsOf(e2))
}
