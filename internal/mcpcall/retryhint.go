package mcpcall

import (
	"sync/atomic"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// The retry hint of an in-progress answer (retry_after_ms): how long the
// running first call is expected to take still, from the tool's recent
// successful calls on this process, minus the time the first call has
// already run, bounded below by MinRetryAfter and above by what remains of
// its lease (after which a duplicate takes the call over). A tool with no
// successful call recorded yet gets DefaultRetryAfter, still bounded by the
// lease.
const (
	// DefaultRetryAfter is the hint for a tool without recorded calls.
	DefaultRetryAfter = 2 * time.Second
	// MinRetryAfter is the shortest hint: for a first call that has run
	// longer than its tool usually takes.
	MinRetryAfter = 250 * time.Millisecond
)

// durationEstimate is a tool's running estimate of how long its successful
// calls take: an exponentially weighted moving average of their durations,
// the newest weighing 1/4 (the first call sets it). It is safe for
// concurrent use and costs one compare-and-swap per call.
type durationEstimate struct {
	ewma atomic.Int64 // nanoseconds; 0: no call recorded
}

// observe records the duration of a successful call.
func (d *durationEstimate) observe(x time.Duration) {
	n := max(int64(x), 1)
	for {
		old := d.ewma.Load()
		v := n
		if old != 0 {
			v = max(old+(n-old)/4, 1)
		}
		if d.ewma.CompareAndSwap(old, v) {
			return
		}
	}
}

// estimate returns the estimate, and false when no call was recorded.
func (d *durationEstimate) estimate() (time.Duration, bool) {
	v := d.ewma.Load()
	return time.Duration(v), v != 0
}

// retryAfter returns the hint for a duplicate of a call in progress, e,
// at now.
func (d *durationEstimate) retryAfter(e *idemkit.InProgressError, now time.Time) time.Duration {
	hint := DefaultRetryAfter
	if est, ok := d.estimate(); ok {
		hint = est
		if !e.Started.IsZero() {
			if ran := now.Sub(e.Started); ran > 0 {
				hint -= ran
			}
		}
	}
	hint = max(hint, MinRetryAfter)
	if e.RetryAfter > 0 {
		hint = min(hint, e.RetryAfter)
	}
	return hint
}
