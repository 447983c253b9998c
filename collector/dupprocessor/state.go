package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import (
	"bytes"
	"sort"

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

// group is the set of tool calls with one duplicate key seen within the
// window. Groups live in the processor's arena, addressed by index, and hold
// no pointer, so the garbage collector never scans them. A group leaves the
// table when it expires or is evicted; its slot is reused only once no held
// span refers to it any more.
type group struct {
	key      gkey
	lastSeen int64  // processing time of the last arrival, ns
	gen      uint32 // incremented each time the slot is reused
	held     uint32 // held spans of the group still to decide
	hit      bool   // a span arrived since the group was (re)queued
	removed  bool   // no longer in the table (evicted, expired or replaced)
	n        uint8  // members in inline; more live in dupProcessor.extra
	inline   [1]member
}

// groupRef is a queue entry: an arena index and the generation it had.
type groupRef struct{ idx, gen uint32 }

// maxMembers bounds the members kept per group; past it the oldest are
// dropped (a hot key keeps its recent history).
const maxMembers = 32

// members returns the members of the group at idx. The slice may point
// into the arena: do not keep it across an allocation of a group.
func (p *dupProcessor) members(idx uint32) []member {
	g := &p.arena[idx]
	if g.n <= 1 {
		return g.inline[:g.n]
	}
	return p.extra[idx]
}

// addMember appends m to the group at idx, dropping the oldest member when
// the group is full.
func (p *dupProcessor) addMember(idx uint32, m member) {
	g := &p.arena[idx]
	switch g.n {
	case 0:
		g.inline[0] = m
		g.n = 1
		return
	case 1:
		p.extra[idx] = append(make([]member, 0, 4), g.inline[0], m)
		g.n = 2
		return
	}
	ms := p.extra[idx]
	if len(ms) >= maxMembers {
		oldest := 0
		for i := range ms {
			if ms[i].before(&ms[oldest]) {
				oldest = i
			}
		}
		ms = append(ms[:oldest], ms[oldest+1:]...)
	}
	p.extra[idx] = append(ms, m)
}

// newGroup takes a free arena slot (or a new one) for key.
func (p *dupProcessor) newGroup(key gkey) uint32 {
	var idx uint32
	if n := len(p.free); n > 0 {
		idx = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		if len(p.arena) == 0 {
			p.arena = append(p.arena, group{}) // index 0 means "none"
		}
		p.arena = append(p.arena, group{})
		idx = uint32(len(p.arena) - 1)
	}
	g := &p.arena[idx]
	gen := g.gen + 1
	*g = group{key: key, gen: gen}
	return idx
}

// freeGroup returns the slot of a removed group without held spans.
func (p *dupProcessor) freeGroup(idx uint32) {
	g := &p.arena[idx]
	if g.n > 1 {
		delete(p.extra, idx)
	}
	gen := g.gen
	*g = group{gen: gen}
	p.free = append(p.free, idx)
}

// removeGroup takes the group out of the table, freeing its slot unless
// held spans still refer to it.
func (p *dupProcessor) removeGroup(idx uint32) {
	g := &p.arena[idx]
	p.groups.del(nonZero(g.key.short()))
	g.removed = true
	if g.held == 0 {
		p.freeGroup(idx)
	}
}

// evidence is what the processor remembers of one context (a trace, a
// conversation or a reliable session): the start times of its chat spans
// and of its tool calls, both sorted and bounded.
type evidence struct {
	key      uint64
	lastSeen int64
	hit      bool // touched since it was (re)queued
	removed  bool // no longer in the table
	chats    []int64
	tools    []toolMark
	gaps     []gapMark
	// Inline storage for the first chats and tool marks: one allocation
	// per context in the common case.
	chatsInline [4]int64
	toolsInline [2]toolMark
}

func newEvidence(key uint64) *evidence {
	e := &evidence{key: key}
	e.chats = e.chatsInline[:0]
	e.tools = e.toolsInline[:0]
	return e
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

// addChat inserts a chat start, keeping the most recent maxEvidence.
func (e *evidence) addChat(start int64) {
	i := sort.Search(len(e.chats), func(i int) bool { return e.chats[i] >= start })
	if len(e.chats) >= maxEvidence {
		if i == 0 {
			return // older than everything kept
		}
		copy(e.chats[:i-1], e.chats[1:i])
		e.chats[i-1] = start
		return
	}
	e.chats = append(e.chats, 0)
	copy(e.chats[i+1:], e.chats[i:])
	e.chats[i] = start
}

// chatBetween reports whether a chat started strictly between from and to.
func (e *evidence) chatBetween(from, to int64) bool {
	i := sort.Search(len(e.chats), func(i int) bool { return e.chats[i] > from })
	return i < len(e.chats) && e.chats[i] < to
}

// addTool inserts a tool mark, keeping the most recent maxEvidence.
func (e *evidence) addTool(t toolMark) {
	i := sort.Search(len(e.tools), func(i int) bool { return e.tools[i].start > t.start })
	if len(e.tools) >= maxEvidence {
		if i == 0 {
			return
		}
		copy(e.tools[:i-1], e.tools[1:i])
		e.tools[i-1] = t
		return
	}
	e.tools = append(e.tools, toolMark{})
	copy(e.tools[i+1:], e.tools[i:])
	e.tools[i] = t
}

// otherToolBetween reports whether a tool call of another group started
// strictly between from and to.
func (e *evidence) otherToolBetween(key uint64, from, to int64) bool {
	i := sort.Search(len(e.tools), func(i int) bool { return e.tools[i].start > from })
	for ; i < len(e.tools) && e.tools[i].start < to; i++ {
		if e.tools[i].key != key {
			return true
		}
	}
	return false
}

// addGap remembers a decided interval, keeping the last maxGaps.
func (e *evidence) addGap(g gapMark) {
	if len(e.gaps) >= maxGaps {
		copy(e.gaps, e.gaps[1:])
		e.gaps[len(e.gaps)-1] = g
		return
	}
	e.gaps = append(e.gaps, g)
}

// maxGaps bounds the decided intervals kept per context.
const maxGaps = 8

// lateChat reports whether a chat starting at c falls inside an interval
// already decided without it: evidence that came too late.
func (e *evidence) lateChat(c int64) bool {
	for _, g := range e.gaps {
		if g.from < c && c < g.to {
			return true
		}
	}
	return false
}

// fifo is a queue of pointers in the order they were pushed: the groups
// or contexts that evictions and expiry take from the front.
type fifo[T any] struct {
	buf  []T
	head int
}

func (q *fifo[T]) len() int { return len(q.buf) - q.head }

func (q *fifo[T]) push(v T) { q.buf = append(q.buf, v) }

func (q *fifo[T]) peek() T { return q.buf[q.head] }

// pop removes and returns the front element; the zero T when empty.
func (q *fifo[T]) pop() T {
	var zero T
	if q.head == len(q.buf) {
		return zero
	}
	v := q.buf[q.head]
	q.buf[q.head] = zero
	q.head++
	if q.head >= 1024 && 2*q.head >= len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	return v
}
