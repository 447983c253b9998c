package mcpcall

import (
	"context"
	"sync"

	"github.com/idemkit/idemkit/idemkit"
)

type stateKey struct{}

// callState is what a tool handler reaches through its context: the write
// ID it records, its progress sender, and, in a job's worker, the job.
type callState struct {
	scope      string
	hasSubject bool // scope came from the Subject function
	progress   ProgressSender
	job        JobReporter

	mu      sync.Mutex // protects writeID
	writeID string
}

func (st *callState) reset(p ProgressSender) {
	st.progress = p
	st.mu.Lock()
	st.writeID = ""
	st.mu.Unlock()
}

func (st *callState) recordedWrite() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeID
}

func stateFrom(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// RecordWrite records the ID of the downstream write the running tool call
// made; see instrument.RecordWrite.
func RecordWrite(ctx context.Context, id string) {
	st := stateFrom(ctx)
	if st == nil {
		return
	}
	st.mu.Lock()
	st.writeID = id
	st.mu.Unlock()
}

// JobReporter receives the progress a job's work reports.
type JobReporter interface {
	Report(ctx context.Context, progress, total float64, message string) error
}

// Progress reports progress and keeps the claim alive; see
// instrument.Progress.
func Progress(ctx context.Context, progress, total float64, message string) error {
	if st := stateFrom(ctx); st != nil {
		if st.job != nil {
			return st.job.Report(ctx, progress, total, message)
		}
		if st.progress != nil {
			_ = st.progress.SendProgress(ctx, progress, total, message)
		}
	}
	return idemkit.CallFromContext(ctx).Heartbeat(ctx)
}

// JobContext returns a context for a job's worker: ctx's values without its
// cancellation, the caller's scope (for job ownership), and job as the
// receiver of Progress; and the function that returns the write ID the
// work recorded.
func JobContext(ctx context.Context, job JobReporter) (context.Context, func() string) {
	st := &callState{job: job}
	if parent := stateFrom(ctx); parent != nil {
		st.scope, st.hasSubject = parent.scope, parent.hasSubject
	}
	jctx := &stateContext{Context: context.WithoutCancel(ctx), st: st}
	return jctx, st.recordedWrite
}

// stateContext carries a callState outside an Op.
type stateContext struct {
	context.Context
	st *callState
}

func (c *stateContext) Value(key any) any {
	if key == (stateKey{}) {
		return c.st
	}
	return c.Context.Value(key)
}

// CallerSubject returns the subject that scoped the call running in ctx,
// and whether there is one (a Subject function named the caller).
func CallerSubject(ctx context.Context) (string, bool) {
	st := stateFrom(ctx)
	if st == nil || !st.hasSubject {
		return "", false
	}
	return st.scope, true
}
