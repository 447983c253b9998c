package state // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"

import (
	"encoding/binary"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/arena"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/tagindex"
)

// Group is the set of tool calls with one duplicate key seen within the
// window: its key and members (104 bytes), in an arena addressed by index.
// Its bookkeeping lives apart, in a GroupMeta at the same index. Neither
// holds a pointer, so the garbage collector never scans them. A group
// leaves the index when it expires or is evicted; its slot is reused only
// once no held span refers to it any more.
type Group struct {
	Key      Key
	LastSeen int64  // processing time of the last arrival, ns
	blk      uint32 // members block once the group has more than one; 0 before
	n        uint8  // members
	inline   [1]Member
}

// GroupMeta is the part of a group that eviction, expiry and the release of
// a first call read (12 bytes). It is kept apart from the key and members,
// in an array a tenth of the size, because those paths visit groups last
// touched seconds or minutes ago: in the small array they mostly hit the
// cache instead of missing it.
type GroupMeta struct {
	Gen   uint32 // incremented each time the slot is freed
	Held  uint32 // held spans of the group still to decide
	Flags uint8
}

// GroupMeta flags.
const (
	MetaHit     uint8 = 1 << iota // a span arrived since the group was (re)queued
	MetaRemoved                   // no longer in the index (evicted or expired)
	MetaMulti                     // more than one member
)

// MaxMembers bounds the members kept per group; past it the oldest are
// dropped (a hot key keeps its recent history).
const MaxMembers = 32

// smallMembers is the size of the first members block: most duplicate
// groups have two or three calls.
const smallMembers = 4

// Groups holds the tracked groups.
//
// A group's first member lives inline; a group of up to smallMembers keeps
// them in a block of small, a larger one in a block of big. Blocks are
// pointer-free arena slots like the groups, so no per-group allocation or
// map entry is needed, and nothing here is scanned by the garbage
// collector.
type Groups struct {
	meta   arena.Arena[GroupMeta] // hands out the indexes (and recycles them)
	data   arena.Arena[Group]     // same indexes, grown in step with meta
	index  tagindex.Index         // tag of the key -> index
	small  arena.Arena[[smallMembers]Member]
	big    arena.Arena[[MaxMembers]Member]
	queue  arena.FIFO // groups in the order they were (re)queued, for eviction and expiry
	s0, s1 uint64     // hash keys of Tag
}

// NewGroups returns an empty store whose tags are keyed by s0 and s1
// (random per process, so that senders cannot make keys collide).
func NewGroups(s0, s1 uint64) Groups {
	return Groups{index: tagindex.New(), s0: s0, s1: s1}
}

// Tag returns the index tag of a group key, under the store's hash keys.
func (s *Groups) Tag(k *Key) uint32 {
	return tagindex.TagOf(tagindex.Mix(binary.LittleEndian.Uint64(k[:8])^s.s0, binary.LittleEndian.Uint64(k[8:])^s.s1))
}

// Len returns the number of groups in the index.
func (s *Groups) Len() int { return s.index.Len() }

// Get returns the key and members of the group at index i.
func (s *Groups) Get(i uint32) *Group { return s.data.At(i) }

// Meta returns the bookkeeping of the group at index i.
func (s *Groups) Meta(i uint32) *GroupMeta { return s.meta.At(i) }

// Queue returns the eviction and expiry queue.
func (s *Groups) Queue() *arena.FIFO { return &s.queue }

// Touch loads the index slot of tag ahead of a lookup (see tagindex.Index.Touch).
func (s *Groups) Touch(tag uint32) uint32 { return s.index.Touch(tag) }

// TouchDel loads the index slots that removing the entry of tag reads.
func (s *Groups) TouchDel(tag uint32) uint32 { return s.index.TouchDel(tag) }

// Live returns the bookkeeping of the group a queue entry names, nil when
// the entry is stale (the group was removed, or its slot reused, since it
// was queued).
func (s *Groups) Live(r arena.Ref) *GroupMeta {
	if mt := s.meta.At(r.Idx); mt.Gen == r.Gen && mt.Flags&MetaRemoved == 0 {
		return mt
	}
	return nil
}

// Find returns the index of the group of key, whose tag is tag; 0 if it is
// not tracked.
func (s *Groups) Find(key *Key, tag uint32) uint32 {
	t := &s.index
	for i := t.Home(tag); ; i = t.Next(i) {
		sl := t.Slot(i)
		if sl.Tag == 0 {
			return 0
		}
		if sl.Tag == tag && s.data.At(sl.Idx).Key == *key {
			return sl.Idx
		}
	}
}

// Create starts a group for key (absent from the index), queues it and
// returns its index.
func (s *Groups) Create(key *Key, tag uint32) uint32 {
	i := s.meta.Alloc()
	s.data.Ensure(i)
	*s.data.At(i) = Group{Key: *key}
	mt := s.meta.At(i)
	*mt = GroupMeta{Gen: mt.Gen}
	s.index.Insert(tag, i)
	s.queue.Push(arena.Ref{Idx: i, Gen: mt.Gen, Tag: tag})
	return i
}

// CreateWith starts a group for key (absent from the index) whose first
// member is m, a held span still to decide (Held is 1), last seen at now;
// it queues the group and returns its index. It leaves the group as
// Create, AddMember, setting LastSeen and incrementing Held would, in one
// write of the slot: the processor's path for a new key, the common case.
func (s *Groups) CreateWith(key *Key, tag uint32, m *Member, now int64) uint32 {
	i := s.meta.Alloc()
	s.data.Ensure(i)
	g := s.data.At(i)
	g.Key = *key
	g.LastSeen = now
	g.blk, g.n = 0, 1
	g.inline[0] = *m
	mt := s.meta.At(i)
	*mt = GroupMeta{Gen: mt.Gen, Held: 1}
	s.index.Insert(tag, i)
	s.queue.Push(arena.Ref{Idx: i, Gen: mt.Gen, Tag: tag})
	return i
}

// Remove takes the group at i, whose index tag is tag, out of the index,
// freeing its slot unless held spans still refer to it.
func (s *Groups) Remove(i, tag uint32) {
	s.index.Del(tag, i)
	mt := s.meta.At(i)
	mt.Flags |= MetaRemoved
	if mt.Held == 0 {
		s.Free(i)
	}
}

// Free returns the slot of a removed group without held spans. The group's
// data is left as it is: Create overwrites it.
func (s *Groups) Free(i uint32) {
	mt := s.meta.At(i)
	if mt.Flags&MetaMulti != 0 {
		if g := s.data.At(i); g.n > smallMembers {
			s.big.Release(g.blk)
		} else {
			s.small.Release(g.blk)
		}
	}
	*mt = GroupMeta{Gen: mt.Gen + 1}
	s.meta.Release(i)
}

// Members returns the members of the group at i. The slice points into an
// arena: do not keep it across AddMember.
func (s *Groups) Members(i uint32) []Member {
	g := s.data.At(i)
	switch {
	case g.n <= 1:
		return g.inline[:g.n]
	case g.n <= smallMembers:
		return s.small.At(g.blk)[:g.n]
	}
	return s.big.At(g.blk)[:g.n]
}

// AddMember appends m to the group at i, moving the members to a larger
// block when they outgrow theirs and dropping the oldest member when the
// group is full.
func (s *Groups) AddMember(i uint32, m Member) {
	g := s.data.At(i)
	switch g.n {
	case 0:
		g.inline[0] = m
		g.n = 1
		return
	case 1:
		b := s.small.Alloc()
		blk := s.small.At(b)
		blk[0], blk[1] = g.inline[0], m
		g.blk, g.n = b, 2
		s.meta.At(i).Flags |= MetaMulti
		return
	case smallMembers:
		b := s.big.Alloc()
		blk := s.big.At(b)
		copy(blk[:], s.small.At(g.blk)[:])
		s.small.Release(g.blk)
		blk[smallMembers] = m
		g.blk, g.n = b, smallMembers+1
		return
	case MaxMembers:
		ms := s.big.At(g.blk)[:]
		oldest := 0
		for j := range ms {
			if ms[j].Before(&ms[oldest]) {
				oldest = j
			}
		}
		copy(ms[oldest:], ms[oldest+1:])
		ms[MaxMembers-1] = m
		return
	}
	if g.n < smallMembers {
		s.small.At(g.blk)[g.n] = m
	} else {
		s.big.At(g.blk)[g.n] = m
	}
	g.n++
}
