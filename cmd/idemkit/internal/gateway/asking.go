package gateway

import (
	"context"
	"errors"

	"sync"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// asking tracks a session's server-to-client requests (elicitation/create,
// sampling/createMessage, roots/list, any other) that the gateway relayed
// to the client and whose answer it has not relayed back: while one is
// open, the upstream is waiting on the client (often on a human), not
// crashed, and the session's protected calls in flight keep their leases
// (keepLeaseWhileAsking), as idemkit.Call.KeepAlive does for a handler of
// the Go SDKs. Without it a human who answers after the lease finds the
// call taken over by its retry: asked twice, and the side effect done
// twice.
//
// A request is open from when the gateway relays it until the client's
// answer is relayed, the upstream cancels it (notifications/cancelled), or
// the upstream request whose stream carried it ends. stdio carries no
// related-request ID, so the requests are tracked by session, not by call:
// every protected call of the session keeps its lease while any is open.
type asking struct {
	mu      sync.Mutex
	open    map[string]struct{} // by the upstream's request ID (idKey)
	changed chan struct{}       // closed and replaced when open changes
}

// state reports whether a request is open, and a channel closed at the
// next change.
func (a *asking) state() (bool, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.changed == nil {
		a.changed = make(chan struct{})
	}
	return len(a.open) > 0, a.changed
}

func (a *asking) relayed(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open == nil {
		a.open = map[string]struct{}{}
	}
	if _, ok := a.open[id]; ok {
		return
	}
	a.open[id] = struct{}{}
	a.notify()
}

func (a *asking) answered(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.open[id]; !ok {
		return
	}
	delete(a.open, id)
	a.notify()
}

// notify wakes the waiters of state; under a.mu.
func (a *asking) notify() {
	if a.changed != nil {
		close(a.changed)
	}
	a.changed = make(chan struct{})
}

// keepLeaseWhileAsking extends c's lease (idemkit.Call.KeepAlive) while
// the session has a server-to-client request open, until the returned
// function is called (when the call's upstream request ends).
func (s *session) keepLeaseWhileAsking(ctx context.Context, c *idemkit.Call, tool string) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			open, changed := s.asking.state()
			if !open {
				select {
				case <-changed:
					continue
				case <-done:
					return
				}
			}
			err := c.KeepAlive(ctx, func(ctx context.Context) error {
				for {
					open, changed := s.asking.state()
					if !open {
						return nil
					}
					select {
					case <-changed:
					case <-done:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			})
			if errors.Is(err, idemkit.ErrLeaseLost) {
				s.g.log.Warn("a call waiting on its client lost its claim: another caller took it over", "session", s.logID(), "tool", tool)
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
