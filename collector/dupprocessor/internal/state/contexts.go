package state // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"

import (
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/arena"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/tagindex"
)

// Context is what the processor remembers of one context (a trace, a
// conversation or a reliable session): the start times of its inference
// spans and of its tool calls, both sorted and bounded, and the intervals
// decided without an inference span (104 bytes). It holds no pointer: the
// first chats and tool marks live inline, more in fixed-size blocks of
// pointer-free arenas addressed by index.
type Context struct {
	Key      uint64
	LastSeen int64
	Gen      uint32 // incremented each time the slot is freed
	Tag      uint32 // its tag in the index
	chatBlk  uint32 // block of Contexts.chats once the chats outgrow chatsIn; 0 before
	toolBlk  uint32 // block of Contexts.tools once the marks outgrow toolsIn; 0 before
	gapBlk   uint32 // block of Contexts.gaps; 0 until the first gap
	nChats   uint8
	nTools   uint8
	nGaps    uint8
	Hit      bool // touched since it was (re)queued
	chatsIn  [4]int64
	toolsIn  [2]ToolMark
}

// ToolMark is a tool call seen in a context.
type ToolMark struct {
	Start int64
	Key   uint64 // Key.Short() of its group
}

// GapMark is the interval between a decided duplicate and the call before
// it, whose cause an inference span in between would have changed.
type GapMark struct{ From, To int64 }

// MaxEvidence bounds the chats and the tool calls kept per context.
const MaxEvidence = 32

// MaxGaps bounds the decided intervals kept per context.
const MaxGaps = 8

// Contexts holds the evidence contexts.
type Contexts struct {
	arena  arena.Arena[Context]
	index  tagindex.Index // tag of the context key -> arena index
	queue  arena.FIFO     // contexts in the order they were (re)queued
	chats  arena.Arena[[MaxEvidence]int64]
	tools  arena.Arena[[MaxEvidence]ToolMark]
	gaps   arena.Arena[[MaxGaps]GapMark]
	s0, s1 uint64 // hash keys of Tag
}

// NewContexts returns an empty store whose tags are keyed by s0 and s1.
func NewContexts(s0, s1 uint64) Contexts {
	return Contexts{index: tagindex.New(), s0: s0, s1: s1 | 1}
}

// Tag returns the index tag of context key c.
func (s *Contexts) Tag(c uint64) uint32 { return tagindex.TagOf(tagindex.Mix(c^s.s0, s.s1)) }

// Len returns the number of contexts.
func (s *Contexts) Len() int { return s.index.Len() }

// Queue returns the eviction and expiry queue.
func (s *Contexts) Queue() *arena.FIFO { return &s.queue }

// Touch loads the index slot of tag ahead of a lookup (see tagindex.Index.Touch).
func (s *Contexts) Touch(tag uint32) uint32 { return s.index.Touch(tag) }

// TouchDel loads the index slots that removing the entry of tag reads.
func (s *Contexts) TouchDel(tag uint32) uint32 { return s.index.TouchDel(tag) }

// At returns the context at arena index i.
func (s *Contexts) At(i uint32) *Context { return s.arena.At(i) }

// Find returns the context c, whose tag is tag; nil when there is none.
func (s *Contexts) Find(c uint64, tag uint32) *Context {
	t := &s.index
	for i := t.Home(tag); ; i = t.Next(i) {
		sl := t.Slot(i)
		if sl.Tag == 0 {
			return nil
		}
		if sl.Tag == tag {
			if e := s.arena.At(sl.Idx); e.Key == c {
				return e
			}
		}
	}
}

// Create starts the context c (absent from the index) and queues it. The
// pointer is valid until the next Create.
func (s *Contexts) Create(c uint64, tag uint32) *Context {
	i := s.arena.Alloc()
	e := s.arena.At(i)
	gen := e.Gen
	*e = Context{} // then the fields: a literal that reads e.Gen is built on the stack and copied
	e.Key, e.Tag, e.Gen = c, tag, gen
	s.index.Insert(tag, i)
	s.queue.Push(arena.Ref{Idx: i, Gen: e.Gen, Tag: tag})
	return e
}

// Live returns the context a queue entry names, nil when it is stale.
func (s *Contexts) Live(r arena.Ref) *Context {
	if e := s.arena.At(r.Idx); e.Gen == r.Gen && e.Key != 0 {
		return e
	}
	return nil
}

// Remove forgets the context at arena index i.
func (s *Contexts) Remove(i uint32) {
	e := s.arena.At(i)
	s.index.Del(e.Tag, i)
	if e.chatBlk != 0 {
		s.chats.Release(e.chatBlk)
	}
	if e.toolBlk != 0 {
		s.tools.Release(e.toolBlk)
	}
	if e.gapBlk != 0 {
		s.gaps.Release(e.gapBlk)
	}
	gen := e.Gen + 1
	*e = Context{}
	e.Gen = gen
	s.arena.Release(i)
}

// Chats returns the inference span starts of e, sorted.
func (s *Contexts) Chats(e *Context) []int64 {
	if e.chatBlk == 0 {
		return e.chatsIn[:e.nChats]
	}
	return s.chats.At(e.chatBlk)[:e.nChats]
}

// Tools returns the tool marks of e, sorted by start.
func (s *Contexts) Tools(e *Context) []ToolMark {
	if e.toolBlk == 0 {
		return e.toolsIn[:e.nTools]
	}
	return s.tools.At(e.toolBlk)[:e.nTools]
}

// Gaps returns the decided intervals of e, oldest first.
func (s *Contexts) Gaps(e *Context) []GapMark {
	if e.gapBlk == 0 {
		return nil
	}
	return s.gaps.At(e.gapBlk)[:e.nGaps]
}

// AddChat inserts an inference span start, keeping the most recent
// MaxEvidence. A start already kept is not added again (the same span can
// arrive twice: an exporter retry, or a tier-1 evidence copy).
func (s *Contexts) AddChat(e *Context, start int64) {
	if e.chatBlk == 0 && int(e.nChats) == len(e.chatsIn) {
		b := s.chats.Alloc()
		copy(s.chats.At(b)[:], e.chatsIn[:])
		e.chatBlk = b
	}
	var buf []int64 // full capacity; the first nChats are in use
	if e.chatBlk == 0 {
		buf = e.chatsIn[:]
	} else {
		buf = s.chats.At(e.chatBlk)[:]
	}
	n := int(e.nChats)
	i := 0
	for i < n && buf[i] < start {
		i++
	}
	if i < n && buf[i] == start {
		return
	}
	if n == MaxEvidence {
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

// ChatBetween reports whether an inference span of e started strictly
// between from and to.
func (s *Contexts) ChatBetween(e *Context, from, to int64) bool {
	for _, c := range s.Chats(e) {
		if c > from {
			return c < to
		}
	}
	return false
}

// AddTool inserts a tool mark, keeping the most recent MaxEvidence.
func (s *Contexts) AddTool(e *Context, t ToolMark) {
	if e.toolBlk == 0 && int(e.nTools) == len(e.toolsIn) {
		b := s.tools.Alloc()
		copy(s.tools.At(b)[:], e.toolsIn[:])
		e.toolBlk = b
	}
	var buf []ToolMark
	if e.toolBlk == 0 {
		buf = e.toolsIn[:]
	} else {
		buf = s.tools.At(e.toolBlk)[:]
	}
	// Marks mostly arrive in start order: search from the end.
	n := int(e.nTools)
	i := n
	for i > 0 && buf[i-1].Start > t.Start {
		i--
	}
	if n == MaxEvidence {
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

// OtherToolBetween reports whether a tool call of another group (whose
// Key.Short is not key) started strictly between from and to in e.
func (s *Contexts) OtherToolBetween(e *Context, key uint64, from, to int64) bool {
	for _, t := range s.Tools(e) {
		if t.Start <= from {
			continue
		}
		if t.Start >= to {
			return false
		}
		if t.Key != key {
			return true
		}
	}
	return false
}

// AddGap remembers a decided interval, keeping the last MaxGaps.
func (s *Contexts) AddGap(e *Context, g GapMark) {
	if e.gapBlk == 0 {
		e.gapBlk = s.gaps.Alloc()
	}
	buf := s.gaps.At(e.gapBlk)
	if int(e.nGaps) == MaxGaps {
		copy(buf[:], buf[1:])
		buf[MaxGaps-1] = g
		return
	}
	buf[e.nGaps] = g
	e.nGaps++
}

// LateChat reports whether an inference span starting at c falls inside an
// interval already decided without it: evidence that came too late.
func (s *Contexts) LateChat(e *Context, c int64) bool {
	for _, g := range s.Gaps(e) {
		if g.From < c && c < g.To {
			return true
		}
	}
	return false
}
