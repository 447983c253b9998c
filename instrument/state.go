package instrument

import (
	"context"
	"sync"

	"github.com/idemkit/idemkit/idemkit"
)

type stateKey struct{}

// callState is the per-call state a handler reaches through its context.
// It is itself the context that carries it, which saves an allocation.
type callState struct {
	context.Context // the parent

	scope      string
	scoped     bool
	hasSubject bool // scope came from WithSubject
	progress   ProgressSender
	job        *jobRun // set in a job worker's context

	mu      sync.Mutex // protects writeID
	writeID string
}

// Value implements context.Context.
func (st *callState) Value(key any) any {
	if key == (stateKey{}) {
		return st
	}
	return st.Context.Value(key)
}

func stateFrom(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

func (st *callState) recordedWrite() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeID
}

// RecordWrite records the ID of the downstream write the running tool call
// made (a refund ID, a row ID, a message ID). It becomes the span's
// idemkit.write.id and is stored with the response, so that every replay of
// the call reports the same ID. Call it from the tool handler (or a job's
// work) with the handler's ctx; the last call wins. Outside an instrumented
// call it does nothing. It is safe for concurrent use.
func RecordWrite(ctx context.Context, id string) {
	st := stateFrom(ctx)
	if st == nil {
		return
	}
	st.mu.Lock()
	st.writeID = id
	st.mu.Unlock()
}

// Progress reports the progress of a long-running tool call and keeps its
// claim alive, in one call:
//
//   - when the client asked for progress (params._meta.progressToken), it
//     sends notifications/progress, which also lets MCP clients reset their
//     request timeout; delivery is best effort and its failure is not
//     returned;
//   - it extends the claim's lease (idemkit.Call.Heartbeat), so that a
//     duplicate arriving after the tool's Lease is answered "in progress"
//     instead of taking the call over.
//
// Inside a job's work (see Jobs) it records the progress on the job, where
// the status tool reports it, and heartbeats the job instead.
//
// total is 0 when unknown. Call it every few seconds, well inside the
// Lease, not in a tight loop: each call is a store round trip. It returns an
// error matching idemkit.ErrLeaseLost when another caller has taken the
// claim over; the work should then stop, because its outcome will not be
// recorded. ctx bounds the notification and the store call.
func Progress(ctx context.Context, progress, total float64, message string) error {
	st := stateFrom(ctx)
	if st != nil {
		if st.job != nil {
			return st.job.report(ctx, progress, total, message)
		}
		if st.progress != nil {
			_ = st.progress.SendProgress(ctx, progress, total, message)
		}
	}
	return idemkit.CallFromContext(ctx).Heartbeat(ctx)
}
