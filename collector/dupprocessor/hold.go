package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
)

// heldSpan is a tracked tool span waiting for its decision, inside a
// heldBatch. It holds no pointer: the span is found again by its position
// in the batch, which nothing moves while it is held, so the garbage
// collector does not scan the tens of thousands of heldSpans in flight.
type heldSpan struct {
	m       state.Member
	arrival int64   // processing time, ns
	gi      uint32  // arena index of its group
	pos     spanPos // where the span sits in the heldBatch's td
	decided bool
}

// heldBatch is a Traces holding only tracked tool spans (with their
// resource and scope), released as a whole at its deadline: all the spans
// of a ConsumeTraces call arrive together, so they share one deadline.
// spans is in the order of the spans in td (resource, scope, span).
type heldBatch struct {
	td       ptrace.Traces
	deadline int64
	spans    []heldSpan
}

// spanPos is where a span sits in a Traces.
type spanPos struct{ rs, ss, span int32 }

// spanAt returns the span at pos in td.
func spanAt(td ptrace.Traces, pos spanPos) ptrace.Span {
	return td.ResourceSpans().At(int(pos.rs)).ScopeSpans().At(int(pos.ss)).Spans().At(int(pos.span))
}

// spanBuf returns an empty heldSpan slice, recycled when possible.
func (p *dupProcessor) spanBuf() []heldSpan {
	if n := len(p.spanBufs); n > 0 {
		b := p.spanBufs[n-1]
		p.spanBufs = p.spanBufs[:n-1]
		p.spanBufsCap -= cap(b)
		return b
	}
	return make([]heldSpan, 0, 64)
}

// recycle keeps the spans slice of a released batch for a later one.
// The pool keeps at most maxSpanBufs heldSpans of capacity (460 kB).
func (p *dupProcessor) recycle(spans []heldSpan) {
	if p.spanBufsCap+cap(spans) <= maxSpanBufs {
		p.spanBufs = append(p.spanBufs, spans[:0])
		p.spanBufsCap += cap(spans)
	}
}

// maxSpanBufs bounds the capacity, in heldSpans, of the recycled slices.
const maxSpanBufs = 4096

// batchQueue is a FIFO of held batches, kept by value so that checking the
// deadline at its head reads the queue's own (sequentially reused) memory
// rather than a batch allocated decision_wait ago.
type batchQueue struct {
	buf  []heldBatch
	head int
}

func (q *batchQueue) len() int { return len(q.buf) - q.head }

func (q *batchQueue) push(b heldBatch) { q.buf = append(q.buf, b) }

// due reports whether the head batch exists and its deadline has passed.
func (q *batchQueue) due(now int64) bool { return q.head < len(q.buf) && q.buf[q.head].deadline <= now }

// pop removes and returns the head batch (the queue is not empty).
func (q *batchQueue) pop() heldBatch {
	b := q.buf[q.head]
	q.buf[q.head] = heldBatch{}
	q.head++
	if q.head >= 64 && 2*q.head >= len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	return b
}

// split moves the tracked tool spans (pend, in batch order) out of td into
// a new Traces, which it returns, and rewrites their positions to where they
// now sit. A resource or scope whose spans are all tracked moves as a whole
// (no copy); otherwise its resource and scope are copied and its tracked
// spans moved one by one.
func (p *dupProcessor) split(td ptrace.Traces, pend []heldSpan) ptrace.Traces {
	out := ptrace.NewTraces()
	rss := td.ResourceSpans()
	next := 0
	for next < len(pend) {
		ri := pend[next].pos.rs
		rs := rss.At(int(ri))
		sss := rs.ScopeSpans()
		end := next
		for end < len(pend) && pend[end].pos.rs == ri {
			end++
		}
		total := 0
		for j := 0; j < sss.Len(); j++ {
			total += sss.At(j).Spans().Len()
		}
		newRS := int32(out.ResourceSpans().Len())
		if end-next == total {
			// Every span of the resource is tracked: move it whole, the
			// scope and span indices stay.
			rs.MoveTo(out.ResourceSpans().AppendEmpty())
			for ; next < end; next++ {
				pend[next].pos.rs = newRS
			}
			continue
		}
		dstRS := out.ResourceSpans().AppendEmpty()
		rs.Resource().CopyTo(dstRS.Resource())
		dstRS.SetSchemaUrl(rs.SchemaUrl())
		for next < end {
			si := pend[next].pos.ss
			ss := sss.At(int(si))
			send := next
			for send < end && pend[send].pos.ss == si {
				send++
			}
			newSS := int32(dstRS.ScopeSpans().Len())
			if send-next == ss.Spans().Len() {
				ss.MoveTo(dstRS.ScopeSpans().AppendEmpty())
				for ; next < send; next++ {
					pend[next].pos.rs, pend[next].pos.ss = newRS, newSS
				}
				continue
			}
			dstSS := dstRS.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(dstSS.Scope())
			dstSS.SetSchemaUrl(ss.SchemaUrl())
			dst := dstSS.Spans()
			dst.EnsureCapacity(send - next)
			k := int32(-1)
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				k++
				if next >= send || pend[next].pos.span != k {
					return false
				}
				s.MoveTo(dst.AppendEmpty())
				pend[next].pos = spanPos{newRS, newSS, int32(dst.Len() - 1)}
				next++
				return true
			})
		}
	}
	pruneEmpty(td)
	return out
}

// pruneEmpty drops the resources and scopes left without spans, so that a
// forwarded batch carries no empty containers.
func pruneEmpty(td ptrace.Traces) {
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool { return ss.Spans().Len() == 0 })
		return rs.ScopeSpans().Len() == 0
	})
}

// moveWaiting moves the undecided spans of b (waiting for their original)
// into a new batch of the extended queue, with copies of their resource
// and scope, and returns it.
func (p *dupProcessor) moveWaiting(b *heldBatch, waiting int) heldBatch {
	ext := heldBatch{td: ptrace.NewTraces(), spans: make([]heldSpan, 0, waiting)}
	rss := b.td.ResourceSpans()
	for i := 0; i < len(b.spans); {
		ri := b.spans[i].pos.rs
		rend := i
		for rend < len(b.spans) && b.spans[rend].pos.rs == ri {
			rend++
		}
		rs := rss.At(int(ri))
		var extRS ptrace.ResourceSpans
		hasRS := false
		for i < rend {
			si := b.spans[i].pos.ss
			send, undecided := i, false
			for send < rend && b.spans[send].pos.ss == si {
				undecided = undecided || !b.spans[send].decided
				send++
			}
			if !undecided {
				i = send
				continue
			}
			if !hasRS {
				extRS = ext.td.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(extRS.Resource())
				extRS.SetSchemaUrl(rs.SchemaUrl())
				hasRS = true
			}
			ss := rs.ScopeSpans().At(int(si))
			extSS := extRS.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(extSS.Scope())
			extSS.SetSchemaUrl(ss.SchemaUrl())
			dst := extSS.Spans()
			newRS, newSS := int32(ext.td.ResourceSpans().Len()-1), int32(extRS.ScopeSpans().Len()-1)
			k, next := int32(-1), i
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				k++
				for next < send && b.spans[next].pos.span < k {
					next++
				}
				if next >= send || b.spans[next].pos.span != k || b.spans[next].decided {
					return false
				}
				s.MoveTo(dst.AppendEmpty())
				w := b.spans[next]
				w.pos = spanPos{newRS, newSS, int32(dst.Len() - 1)}
				if len(ext.spans) == 0 {
					ext.deadline = w.arrival + p.origWait
				}
				ext.spans = append(ext.spans, w)
				next++
				return true
			})
			i = send
		}
	}
	pruneEmpty(b.td)
	return ext
}
