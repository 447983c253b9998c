package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
)

// touchEvidence returns the evidence of context c (whose index tag is tag),
// creating it (and evicting the oldest context not touched again, at the
// cap) when needed. The pointer is valid until the next touchEvidence.
func (p *dupProcessor) touchEvidence(c uint64, tag uint32, now int64) *state.Context {
	e := p.evidence.Find(c, tag)
	if e == nil {
		if p.evidence.Len() >= p.cfg.MaxGroups {
			p.evictEvidence()
		}
		e = p.evidence.Create(c, tag)
	} else {
		e.Hit = true
	}
	e.LastSeen = now
	return e
}

// evictEvidence forgets the oldest context not touched since it was queued
// (FIFO with a second chance).
func (p *dupProcessor) evictEvidence() {
	q := p.evidence.Queue()
	for n := q.Len(); n >= 0 && q.Len() > 0; n-- {
		r := q.Pop()
		e := p.evidence.Live(r)
		switch {
		case e == nil:
			continue
		case e.Hit:
			e.Hit = false
			q.Push(r)
			continue
		}
		p.evidence.Remove(r.Idx)
		return
	}
}

// evictGroup forgets the oldest group that saw no span since it was queued
// (FIFO with a second chance: a group seen again goes back to the end of
// the queue once). Its held spans are not dropped: the slot stays theirs
// until they are decided and released at their deadline, on the evidence
// the group had.
func (p *dupProcessor) evictGroup() {
	q := p.groups.Queue()
	for n := q.Len(); n > 0; n-- {
		r := q.Pop()
		mt := p.groups.Live(r)
		switch {
		case mt == nil:
			continue
		case mt.Flags&state.MetaHit != 0:
			mt.Flags &^= state.MetaHit
			q.Push(r)
			continue
		}
		p.groups.Remove(r.Idx, r.Tag)
		p.counts.evictions++
		return
	}
}

// expire forgets the groups and contexts that saw nothing for a window.
func (p *dupProcessor) expire(now int64) {
	q := p.groups.Queue()
	for n := q.Len(); n > 0; n-- {
		r := q.Peek()
		mt := p.groups.Live(r)
		switch {
		case mt == nil:
			q.Pop()
			continue
		case now-p.groups.Get(r.Idx).LastSeen > p.window:
			q.Pop()
			p.groups.Remove(r.Idx, r.Tag)
			continue
		case mt.Flags&state.MetaHit != 0:
			// Seen since it was queued: queue it again from now on.
			q.Pop()
			mt.Flags &^= state.MetaHit
			q.Push(r)
			continue
		}
		break
	}
	eq := p.evidence.Queue()
	for n := eq.Len(); n > 0; n-- {
		r := eq.Peek()
		e := p.evidence.Live(r)
		switch {
		case e == nil:
			eq.Pop()
			continue
		case now-e.LastSeen > p.window:
			eq.Pop()
			p.evidence.Remove(r.Idx)
			continue
		case e.Hit:
			eq.Pop()
			e.Hit = false
			eq.Push(r)
			continue
		}
		break
	}
}
