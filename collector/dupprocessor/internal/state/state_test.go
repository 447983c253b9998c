package state

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStores_TagCollisions checks that two group keys or two contexts whose
// tags collide stay apart: the tag only selects candidates.
func TestStores_TagCollisions(t *testing.T) {
	gs := NewGroups(1, 2)
	a, b := Key{1}, Key{2}
	ia := gs.Create(&a, 42)
	require.Zero(t, gs.Find(&b, 42))
	ib := gs.Create(&b, 42)
	require.NotEqual(t, ia, ib)
	require.Equal(t, ia, gs.Find(&a, 42))
	require.Equal(t, ib, gs.Find(&b, 42))
	gs.Remove(ia, 42)
	require.Zero(t, gs.Find(&a, 42))
	require.Equal(t, ib, gs.Find(&b, 42))

	es := NewContexts(1, 2)
	ea := es.Create(7, 9)
	require.Nil(t, es.Find(8, 9))
	eb := es.Create(8, 9)
	require.Same(t, ea, es.Find(7, 9))
	require.Same(t, eb, es.Find(8, 9))
}

// TestEvidence_Blocks checks that chats and tool marks keep the most recent
// MaxEvidence, sorted, across the move from inline storage to a block, and
// that a freed context's blocks are reused.
func TestEvidence_Blocks(t *testing.T) {
	es := NewContexts(3, 4)
	e := es.Create(5, es.Tag(5))
	rng := rand.New(rand.NewPCG(1, 1))
	var chats []int64
	for i := 0; i < 100; i++ {
		c := rng.Int64N(1000)
		es.AddChat(e, c)
		chats = append(chats, c)
		es.AddTool(e, ToolMark{Start: c, Key: uint64(i)})
	}
	got := es.Chats(e)
	require.Len(t, got, MaxEvidence)
	require.IsNonDecreasing(t, got)
	slices.Sort(chats)            // the most recent: the latest start times, whatever their arrival order
	chats = slices.Compact(chats) // a start already kept is not added twice
	require.Equal(t, chats[len(chats)-MaxEvidence:], got)
	require.Len(t, es.Tools(e), MaxEvidence)
	for i := 1; i < MaxEvidence; i++ {
		require.LessOrEqual(t, es.Tools(e)[i-1].Start, es.Tools(e)[i].Start)
	}
	for i := 0; i < 20; i++ {
		es.AddGap(e, GapMark{int64(i), int64(i + 10)})
	}
	require.Len(t, es.Gaps(e), MaxGaps)
	require.Equal(t, GapMark{19, 29}, es.Gaps(e)[MaxGaps-1])
	blk := e.chatBlk
	es.Remove(es.index.Slot(es.index.Home(e.Tag)).Idx)
	require.Zero(t, es.Len())
	e2 := es.Create(6, es.Tag(6))
	for i := 0; i < 5; i++ {
		es.AddChat(e2, int64(i))
	}
	require.Equal(t, blk, e2.chatBlk, "a freed block is reused")
	require.Equal(t, []int64{0, 1, 2, 3, 4}, es.Chats(e2))
}

// TestGroups_CreateWith checks that CreateWith leaves a group (its slot,
// bookkeeping, index entry and queue entry) exactly as Create, AddMember,
// LastSeen and Held++ do, also in a slot freed by an eviction, and that the
// group grows from there like any other.
func TestGroups_CreateWith(t *testing.T) {
	a, b := NewGroups(5, 6), NewGroups(5, 6)
	m := Member{Start: 10, DecideAt: 20, Trace: 3, Conv: 4, Session: 5, User: 6, ReqID: 7, WriteID: 8, Outcome: OutcomeExecuted, Flags: FlagWeakKey}
	m.SpanID[0] = 9
	for round := 0; round < 2; round++ { // the second round reuses freed slots
		for k := byte(1); k <= 3; k++ {
			key := Key{k, byte(round)}
			ia := a.Create(&key, a.Tag(&key))
			a.AddMember(ia, m)
			a.Get(ia).LastSeen = 100
			a.Meta(ia).Held++
			ib := b.CreateWith(&key, b.Tag(&key), &m, 100)
			require.Equal(t, ia, ib)
			require.Equal(t, *a.Get(ia), *b.Get(ib))
			require.Equal(t, *a.Meta(ia), *b.Meta(ib))
			require.Equal(t, ib, b.Find(&key, b.Tag(&key)))
			require.Equal(t, a.Queue().At(a.Queue().Len()-1), b.Queue().At(b.Queue().Len()-1))
			m2 := m
			m2.Start++
			a.AddMember(ia, m2)
			b.AddMember(ib, m2)
			require.Equal(t, a.Members(ia), b.Members(ib))
			require.Equal(t, *a.Meta(ia), *b.Meta(ib))
		}
		for k := byte(1); k <= 3; k++ {
			key := Key{k, byte(round)}
			for _, s := range []*Groups{&a, &b} {
				i := s.Find(&key, s.Tag(&key))
				s.Meta(i).Held = 0
				s.Remove(i, s.Tag(&key))
			}
		}
	}
}

// TestMember_Evidence checks the caller and request rules on pairs of
// calls: different users are never linked, whatever they share; a user on
// one call only breaks a link that rests on shared context; different
// client parents prove a new request.
func TestMember_Evidence(t *testing.T) {
	weak := Member{Trace: 1, Session: 2, Flags: FlagWeakKey}
	strong := Member{Trace: 1, Session: 2}
	with := func(m Member, user uint64, parent uint32) *Member {
		m.User, m.Parent = user, parent
		return &m
	}
	for _, tc := range []struct {
		name          string
		a, b          *Member
		linked, other bool
	}{
		{"weak, same session and trace, no users", with(weak, 0, 0), with(weak, 0, 0), true, false},
		{"weak, same session and trace, users differ", with(weak, 10, 0), with(weak, 11, 0), false, true},
		{"weak, a user on one only", with(weak, 10, 0), with(weak, 0, 0), false, true},
		{"weak, same user, nothing else shared", &Member{User: 10, Trace: 1, Flags: FlagWeakKey}, &Member{User: 10, Trace: 3, Flags: FlagWeakKey}, true, false},
		{"strong, users differ", with(strong, 10, 0), with(strong, 11, 0), false, true},
		{"strong, a user on one only", with(strong, 10, 0), with(strong, 0, 0), true, false},
		{"strong and weak, a user on one only", with(strong, 10, 0), with(weak, 0, 0), false, true},
	} {
		require.Equal(t, tc.linked, tc.a.Linked(tc.b), "%s: Linked", tc.name)
		require.Equal(t, tc.linked, tc.b.Linked(tc.a), "%s: Linked, reversed", tc.name)
		require.Equal(t, tc.other, tc.a.OtherUser(tc.b), "%s: OtherUser", tc.name)
	}

	require.True(t, with(strong, 0, 5).NewRequest(with(strong, 0, 6)), "different parents")
	require.False(t, with(strong, 0, 5).NewRequest(with(strong, 0, 5)), "the same parent proves nothing")
	require.False(t, with(strong, 0, 5).NewRequest(with(strong, 0, 0)), "a parent on one only proves nothing")
	other := with(strong, 0, 5)
	other.Trace = 9
	require.True(t, with(strong, 0, 5).NewRequest(other), "the same parent in another trace")

	// A user narrows the call's context; without one it is the plain one.
	require.Equal(t, uint64(2), with(weak, 0, 0).CallCtx())
	require.Equal(t, WithUser(2, 10), with(weak, 10, 0).CallCtx())
	require.NotEqual(t, WithUser(2, 10), WithUser(2, 11))
	require.NotEqual(t, WithUser(2, 10), WithUser(2, AnyUser))
}
