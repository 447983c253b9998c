package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// member is one tool call of a group: what the classification needs of its
// span, hashed down to fixed-size fields (72 bytes) so that a tracked group
// holds no reference into a batch.
type member struct {
	start    int64 // span start, ns since the epoch (event time)
	decideAt int64 // processing time of its decision (arrival + decision_wait), ns
	outcome  outcome
	flags    uint8
	traceCtx uint64 // context key of the trace; 0 when the trace ID is empty
	convCtx  uint64 // context key of gen_ai.conversation.id; 0 when absent
	session  uint64 // context key of a reliable mcp.session.id; 0 when absent or unreliable
	reqID    uint64 // hash of jsonrpc.request.id; 0 when absent
	writeID  uint64 // hash of idemkit.write.id; 0 when absent
	spanID   pcommon.SpanID
}

const (
	// flagProvenDup: the span's own outcome (replayed, in_progress,
	// takeover) or attempt (> 1) proves that an earlier call exists.
	flagProvenDup uint8 = 1 << iota
	// flagAnnotated: the span arrived with idemkit.duplicate* attributes,
	// which the decision must remove.
	flagAnnotated
)

// callCtx is the context of the call for the deliberate-repeat rule: its
// reliable session, else its conversation, else its trace; 0 for none.
func (a *member) callCtx() uint64 {
	switch {
	case a.session != 0:
		return a.session
	case a.convCtx != 0:
		return a.convCtx
	}
	return a.traceCtx
}

// same reports whether a and b are the same span.
func (a *member) same(b *member) bool {
	return a.spanID == b.spanID && a.traceCtx == b.traceCtx
}

// before reports whether a started before b; arrival, then the span ID,
// break ties.
func (a *member) before(b *member) bool {
	if a.start != b.start {
		return a.start < b.start
	}
	if a.decideAt != b.decideAt {
		return a.decideAt < b.decideAt
	}
	return bytes.Compare(a.spanID[:], b.spanID[:]) < 0
}

// mix is a keyed 64-bit mixer (the 128-bit product folded, as in wyhash).
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// group is the set of tool calls with one duplicate key seen within the
// window: its key and members (104 bytes), in an arena addressed by index.
// Its bookkeeping lives apart, in a groupMeta at the same index. Neither
// holds a pointer, so the garbage collector never scans them. A group
// leaves the index when it expires or is evicted; its slot is reused only
// once no held span refers to it any more.
type group struct {
	key      gkey
	lastSeen int64  // processing time of the last arrival, ns
	blk      uint32 // members block once the group has more than one; 0 before
	n        uint8  // members
	inline   [1]member
}

// groupMeta is the part of a group that eviction, expiry and the release of
// a first call read (12 bytes). It is kept apart from the key and members,
// in an array a ninth of the size, because those paths visit groups last
// touched seconds or minutes ago: in the small array they mostly hit the
// cache instead of missing it.
type groupMeta struct {
	gen   uint32 // incremented each time the slot is freed
	held  uint32 // held spans of the group still to decide
	flags uint8
}

const (
	metaHit     uint8 = 1 << iota // a span arrived since the group was (re)queued
	metaRemoved                   // no longer in the index (evicted or expired)
	metaMulti                     // more than one member
)

// maxMembers bounds the members kept per group; past it the oldest are
// dropped (a hot key keeps its recent history).
const maxMembers = 32

// smallMembers is the size of the first members block: most duplicate
// groups have two or three calls.
const smallMembers = 4

// groupStore holds the tracked groups. It is not safe for concurrent use:
// the processor's mutex protects it.
//
// A group's first member lives inline; a group of up to smallMembers keeps
// them in a block of small, a larger one in a block of big. Blocks are
// pointer-free arena slots like the groups, so no per-group allocation or
// map entry is needed, and nothing here is scanned by the garbage
// collector.
type groupStore struct {
	meta   arena[groupMeta] // hands out the indexes (and recycles them)
	data   arena[group]     // same indexes, grown in step with meta
	index  index            // tag of the key -> index
	small  arena[[smallMembers]member]
	big    arena[[maxMembers]member]
	queue  fifo   // groups in the order they were (re)queued, for eviction and expiry
	s0, s1 uint64 // hash keys of tag
}

func newGroupStore(s0, s1 uint64) groupStore {
	return groupStore{index: newIndex(), s0: s0, s1: s1}
}

// tag returns the index tag of a group key, under the store's hash keys.
func (s *groupStore) tag(k *gkey) uint32 {
	return tagOf(mix(binary.LittleEndian.Uint64(k[:8])^s.s0, binary.LittleEndian.Uint64(k[8:])^s.s1))
}

// len returns the number of groups in the index.
func (s *groupStore) len() int { return s.index.len() }

// get returns the key and members of the group at index i.
func (s *groupStore) get(i uint32) *group { return s.data.at(i) }

// metaOf returns the bookkeeping of the group at index i.
func (s *groupStore) metaOf(i uint32) *groupMeta { return s.meta.at(i) }

// find returns the index of the group of key, 0 if it is not tracked.
func (s *groupStore) find(key *gkey, tag uint32) uint32 {
	t := &s.index
	for i := t.home(tag); ; i = (i + 1) & t.mask {
		sl := t.slots[i]
		if sl.tag == 0 {
			return 0
		}
		if sl.tag == tag && s.data.at(sl.idx).key == *key {
			return sl.idx
		}
	}
}

// create starts a group for key (absent from the index), queues it and
// returns its index.
func (s *groupStore) create(key *gkey, tag uint32) uint32 {
	i := s.meta.alloc()
	s.data.ensure(i)
	*s.data.at(i) = group{key: *key}
	mt := s.meta.at(i)
	*mt = groupMeta{gen: mt.gen}
	s.index.insert(tag, i)
	s.queue.push(ref{i, mt.gen, tag})
	return i
}

// remove takes the group at i, whose index tag is tag, out of the index,
// freeing its slot unless held spans still refer to it.
func (s *groupStore) remove(i, tag uint32) {
	s.index.del(tag, i)
	mt := s.meta.at(i)
	mt.flags |= metaRemoved
	if mt.held == 0 {
		s.free(i)
	}
}

// free returns the slot of a removed group without held spans. The group's
// data is left as it is: create overwrites it.
func (s *groupStore) free(i uint32) {
	mt := s.meta.at(i)
	if mt.flags&metaMulti != 0 {
		if g := s.data.at(i); g.n > smallMembers {
			s.big.release(g.blk)
		} else {
			s.small.release(g.blk)
		}
	}
	*mt = groupMeta{gen: mt.gen + 1}
	s.meta.release(i)
}

// members returns the members of the group at i. The slice points into an
// arena: do not keep it across addMember.
func (s *groupStore) members(i uint32) []member {
	g := s.data.at(i)
	switch {
	case g.n <= 1:
		return g.inline[:g.n]
	case g.n <= smallMembers:
		return s.small.at(g.blk)[:g.n]
	}
	return s.big.at(g.blk)[:g.n]
}

// addMember appends m to the group at i, moving the members to a larger
// block when they outgrow theirs and dropping the oldest member when the
// group is full.
func (s *groupStore) addMember(i uint32, m member) {
	g := s.data.at(i)
	switch g.n {
	case 0:
		g.inline[0] = m
		g.n = 1
		return
	case 1:
		b := s.small.alloc()
		blk := s.small.at(b)
		blk[0], blk[1] = g.inline[0], m
		g.blk, g.n = b, 2
		s.meta.at(i).flags |= metaMulti
		return
	case smallMembers:
		b := s.big.alloc()
		blk := s.big.at(b)
		copy(blk[:], s.small.at(g.blk)[:])
		s.small.release(g.blk)
		blk[smallMembers] = m
		g.blk, g.n = b, smallMembers+1
		return
	case maxMembers:
		ms := s.big.at(g.blk)[:]
		oldest := 0
		for j := range ms {
			if ms[j].before(&ms[oldest]) {
				oldest = j
			}
		}
		copy(ms[oldest:], ms[oldest+1:])
		ms[maxMembers-1] = m
		return
	}
	if g.n < smallMembers {
		s.small.at(g.blk)[g.n] = m
	} else {
		s.big.at(g.blk)[g.n] = m
	}
	g.n++
}

// evidence is what the processor remembers of one context (a trace, a
// conversation or a reliable session): the start times of its chat spans
// and of its tool calls, both sorted and bounded, and the intervals decided
// without a chat (104 bytes). It holds no pointer: the first chats and tool
// marks live inline, more in fixed-size blocks of pointer-free arenas
// addressed by index.
type evidence struct {
	key      uint64
	lastSeen int64
	gen      uint32 // incremented each time the slot is freed
	tag      uint32 // its tag in evidenceStore.index
	chatBlk  uint32 // block of evidenceStore.chats once the chats outgrow chatsIn; 0 before
	toolBlk  uint32 // block of evidenceStore.tools once the marks outgrow toolsIn; 0 before
	gapBlk   uint32 // block of evidenceStore.gaps; 0 until the first gap
	nChats   uint8
	nTools   uint8
	nGaps    uint8
	hit      bool // touched since it was (re)queued
	chatsIn  [4]int64
	toolsIn  [2]toolMark
}

// toolMark is a tool call seen in a context.
type toolMark struct {
	start int64
	key   uint64 // gkey.short()
}

// gapMark is the interval between a decided duplicate and the call before
// it, whose cause a chat span in between would have changed.
type gapMark struct{ from, to int64 }

// maxEvidence bounds the chats and the tool calls kept per context.
const maxEvidence = 32

// maxGaps bounds the decided intervals kept per context.
const maxGaps = 8

// evidenceStore holds the contexts. It is not safe for concurrent use: the
// processor's mutex protects it.
type evidenceStore struct {
	arena  arena[evidence]
	index  index // tag of the context key -> arena index
	queue  fifo  // contexts in the order they were (re)queued
	chats  arena[[maxEvidence]int64]
	tools  arena[[maxEvidence]toolMark]
	gaps   arena[[maxGaps]gapMark]
	s0, s1 uint64 // hash keys of tagOf
}

func newEvidenceStore(s0, s1 uint64) evidenceStore {
	return evidenceStore{index: newIndex(), s0: s0, s1: s1 | 1}
}

// tag returns the index tag of context key c.
func (s *evidenceStore) tag(c uint64) uint32 { return tagOf(mix(c^s.s0, s.s1)) }

// len returns the number of contexts.
func (s *evidenceStore) len() int { return s.index.len() }

// find returns the evidence of context c, nil when there is none.
func (s *evidenceStore) find(c uint64, tag uint32) *evidence {
	t := &s.index
	for i := t.home(tag); ; i = (i + 1) & t.mask {
		sl := t.slots[i]
		if sl.tag == 0 {
			return nil
		}
		if sl.tag == tag {
			if e := s.arena.at(sl.idx); e.key == c {
				return e
			}
		}
	}
}

// create starts the evidence of context c (absent from the index) and
// queues it.
func (s *evidenceStore) create(c uint64, tag uint32) *evidence {
	i := s.arena.alloc()
	e := s.arena.at(i)
	*e = evidence{key: c, tag: tag, gen: e.gen}
	s.index.insert(tag, i)
	s.queue.push(ref{i, e.gen, tag})
	return e
}

// live returns the evidence a queue entry names, nil when it is stale.
func (s *evidenceStore) live(r ref) *evidence {
	if e := s.arena.at(r.idx); e.gen == r.gen && e.key != 0 {
		return e
	}
	return nil
}

// remove forgets the context at arena index i.
func (s *evidenceStore) remove(i uint32) {
	e := s.arena.at(i)
	s.index.del(e.tag, i)
	if e.chatBlk != 0 {
		s.chats.release(e.chatBlk)
	}
	if e.toolBlk != 0 {
		s.tools.release(e.toolBlk)
	}
	if e.gapBlk != 0 {
		s.gaps.release(e.gapBlk)
	}
	*e = evidence{gen: e.gen + 1}
	s.arena.release(i)
}

// chatsOf returns the chat starts of e, sorted.
func (s *evidenceStore) chatsOf(e *evidence) []int64 {
	if e.chatBlk == 0 {
		return e.chatsIn[:e.nChats]
	}
	return s.chats.at(e.chatBlk)[:e.nChats]
}

// toolsOf returns the tool marks of e, sorted by start.
func (s *evidenceStore) toolsOf(e *evidence) []toolMark {
	if e.toolBlk == 0 {
		return e.toolsIn[:e.nTools]
	}
	return s.tools.at(e.toolBlk)[:e.nTools]
}

// gapsOf returns the decided intervals of e, oldest first.
func (s *evidenceStore) gapsOf(e *evidence) []gapMark {
	if e.gapBlk == 0 {
		return nil
	}
	return s.gaps.at(e.gapBlk)[:e.nGaps]
}

// addChat inserts a chat start, keeping the most recent maxEvidence.
func (s *evidenceStore) addChat(e *evidence, start int64) {
	if e.chatBlk == 0 && int(e.nChats) == len(e.chatsIn) {
		b := s.chats.alloc()
		copy(s.chats.at(b)[:], e.chatsIn[:])
		e.chatBlk = b
	}
	var buf []int64 // full capacity; the first nChats are in use
	if e.chatBlk == 0 {
		buf = e.chatsIn[:]
	} else {
		buf = s.chats.at(e.chatBlk)[:]
	}
	n := int(e.nChats)
	i := 0
	for i < n && buf[i] < start {
		i++
	}
	if n == maxEvidence {
		if i == 0 {
			return // older than everything kept
		}
		copy(buf[:i-1], buf[1:i])
		buf[i-1] = start
		return
	}
	copy(buf[i+1:n+1], buf[i:n])
	buf[i] = start
	e.nChats++
}

// chatBetween reports whether a chat of e started strictly between from
// and to.
func (s *evidenceStore) chatBetween(e *evidence, from, to int64) bool {
	for _, c := range s.chatsOf(e) {
		if c > from {
			return c < to
		}
	}
	return false
}

// addTool inserts a tool mark, keeping the most recent maxEvidence.
func (s *evidenceStore) addTool(e *evidence, t toolMark) {
	if e.toolBlk == 0 && int(e.nTools) == len(e.toolsIn) {
		b := s.tools.alloc()
		copy(s.tools.at(b)[:], e.toolsIn[:])
		e.toolBlk = b
	}
	var buf []toolMark
	if e.toolBlk == 0 {
		buf = e.toolsIn[:]
	} else {
		buf = s.tools.at(e.toolBlk)[:]
	}
	// Marks mostly arrive in start order: search from the end.
	n := int(e.nTools)
	i := n
	for i > 0 && buf[i-1].start > t.start {
		i--
	}
	if n == maxEvidence {
		if i == 0 {
			return
		}
		copy(buf[:i-1], buf[1:i])
		buf[i-1] = t
		return
	}
	copy(buf[i+1:n+1], buf[i:n])
	buf[i] = t
	e.nTools++
}

// otherToolBetween reports whether a tool call of another group started
// strictly between from and to in e.
func (s *evidenceStore) otherToolBetween(e *evidence, key uint64, from, to int64) bool {
	for _, t := range s.toolsOf(e) {
		if t.start <= from {
			continue
		}
		if t.start >= to {
			return false
		}
		if t.key != key {
			return true
		}
	}
	return false
}

// addGap remembers a decided interval, keeping the last maxGaps.
func (s *evidenceStore) addGap(e *evidence, g gapMark) {
	if e.gapBlk == 0 {
		e.gapBlk = s.gaps.alloc()
	}
	buf := s.gaps.at(e.gapBlk)
	if int(e.nGaps) == maxGaps {
		copy(buf[:], buf[1:])
		buf[maxGaps-1] = g
		return
	}
	buf[e.nGaps] = g
	e.nGaps++
}

// lateChat reports whether a chat starting at c falls inside an interval
// already decided without it: evidence that came too late.
func (s *evidenceStore) lateChat(e *evidence, c int64) bool {
	for _, g := range s.gapsOf(e) {
		if g.from < c && c < g.to {
			return true
		}
	}
	return false
}
