package sqlitestore

import (
	queue "container/list"
	"context"
	"sync"
)

// writeGate queues the store's own writes within the process, one at a
// time, in order of arrival, with the writes that end work in flight (a
// finish, a heartbeat, a cancellation, a phased call's local transaction)
// ahead of those that start new work (a claim, a sweep, a DoInTx).
//
// Without it the writes would queue for the pool's connection in
// database/sql, which hands a freed connection to a random waiter: under a
// storm of claims, a finish could wait behind an unbounded number of them
// (and run into FinishTimeout), although every finish it waits for frees a
// key that its duplicates are waiting on.
type writeGate struct {
	mu        sync.Mutex // protects held and the queues
	held      bool
	high, low queue.List // of chan struct{}, closed to hand the gate over
}

// acquire takes the gate, waiting behind the writes queued before it at
// its priority (high: ends of work), and behind every high one for a low
// one. ctx ends the wait.
func (g *writeGate) acquire(ctx context.Context, high bool) error {
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
		return nil
	}
	q := &g.low
	if high {
		q = &g.high
	}
	ch := make(chan struct{})
	e := q.PushBack(ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-ch:
		// Handed over just as ctx ended: pass it on.
		g.mu.Unlock()
		g.release()
	default:
		q.Remove(e)
		g.mu.Unlock()
	}
	return ctx.Err()
}

// release hands the gate to the first waiter, or frees it.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range []*queue.List{&g.high, &g.low} {
		if e := q.Front(); e != nil {
			close(q.Remove(e).(chan struct{}))
			return
		}
	}
	g.held = false
}

// waiting returns how many writes wait for the gate.
func (g *writeGate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.high.Len() + g.low.Len()
}
