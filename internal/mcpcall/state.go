package mcpcall

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
)

type stateKey struct{}

// callState is what a tool handler reaches through its context: the write
// ID it records, its progress sender, in a background run the receiver of
// its progress, and the functions to run once the call's outcome is
// recorded.
type callState struct {
	scope      string
	hasSubject bool // scope came from the Subject function
	scoped     bool // scope identifies the caller (not ScopeNone)
	progress   ProgressSender
	job        JobReporter

	mu       sync.Mutex // protects writeID and recorded
	writeID  string
	recorded []func(recorded bool)
	pending  atomic.Bool // recorded is not empty
}

func (st *callState) reset(p ProgressSender) {
	st.progress = p
	st.mu.Lock()
	st.writeID = ""
	st.recorded = nil
	st.mu.Unlock()
	st.pending.Store(false)
}

func (st *callState) recordedWrite() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeID
}

// afterCall runs, once, the functions registered with OnRecorded.
func (st *callState) afterCall(recorded bool) {
	if !st.pending.Load() {
		return
	}
	st.pending.Store(false)
	st.mu.Lock()
	fns := st.recorded
	st.recorded = nil
	st.mu.Unlock()
	for _, fn := range fns {
		fn(recorded)
	}
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

// OnRecorded registers fn to run once the outcome of the tool call running
// in ctx is settled: with true when its answer was stored (or the call is
// not protected, so nothing is to be stored), with false when it was not
// (the handler failed or panicked, or the store could not record it). A
// handler that starts background work (a job, a task) launches it from fn,
// so that the work never runs when a duplicate could not find the answer
// that names it. Outside an instrumented call fn runs at once, with true.
func OnRecorded(ctx context.Context, fn func(recorded bool)) {
	st := stateFrom(ctx)
	if st == nil || st.job != nil {
		fn(true)
		return
	}
	st.mu.Lock()
	st.recorded = append(st.recorded, fn)
	st.mu.Unlock()
	st.pending.Store(true)
}

// JobReporter receives the progress a background run's work reports.
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
	// The progress is the record's note: what the call status tool and
	// `idemkit inspect` report of a running call.
	return idemkit.CallFromContext(ctx).HeartbeatNote(ctx, EncodeRunNote(RunNote{Progress: progress, Total: total, Message: message}))
}

// InRun reports whether ctx is the context of a background run's work (a
// job's or a task's: see RunContext).
func InRun(ctx context.Context) bool {
	st := stateFrom(ctx)
	return st != nil && st.job != nil
}

// CallerScope returns the scope of the call running in ctx (see ScopeOf):
// the namespace of its key, which also owns the jobs and tasks it starts;
// and whether the caller was identified (a subject, a local transport, an
// authentic session).
func CallerScope(ctx context.Context) (scope string, identified bool) {
	st := stateFrom(ctx)
	if st == nil {
		return "", false
	}
	return st.scope, st.scoped
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

// RunContext returns the context of a background run's work (a job's, a
// task's): ctx (the run's context, carrying its idemkit.Call) with a call
// state of its own, whose progress goes to report and whose scope is the
// starting call's (parent); and the function that returns the write ID the
// work recorded. The request's Op is hidden: it has ended.
func RunContext(ctx, parent context.Context, report JobReporter, progress ProgressSender) (context.Context, func() string) {
	st := &callState{job: report, progress: progress}
	if p := stateFrom(parent); p != nil {
		st.scope, st.hasSubject, st.scoped = p.scope, p.hasSubject, p.scoped
	}
	return &stateContext{Context: ctx, st: st}, st.recordedWrite
}

// stateContext carries a callState outside an Op.
type stateContext struct {
	context.Context
	st *callState
}

func (c *stateContext) Value(key any) any {
	switch key {
	case stateKey{}:
		return c.st
	case opKeyCtx{}:
		return nil
	}
	return c.Context.Value(key)
}

// RunNote is the progress a background run's work reported, as its record
// keeps it (idemstore.Record.Note, at most idemstore.MaxNoteBytes).
type RunNote struct {
	Progress float64 `json:"p,omitempty"`
	Total    float64 `json:"t,omitempty"`
	Message  string  `json:"m,omitempty"`
}

// EncodeRunNote returns n as a record note: compact JSON, the message cut
// so that the whole fits in idemstore.MaxNoteBytes.
func EncodeRunNote(n RunNote) string {
	for {
		b, err := json.Marshal(n)
		if err != nil {
			return ""
		}
		if len(b) <= idemstore.MaxNoteBytes || n.Message == "" {
			return string(b)
		}
		over := len(b) - idemstore.MaxNoteBytes
		n.Message = clip.Text(n.Message, max(len(n.Message)-over-8, 0))
	}
}

// DecodeRunNote reads a record note: EncodeRunNote's JSON, or any other
// text as the message.
func DecodeRunNote(note string) RunNote {
	var n RunNote
	if len(note) > 0 && note[0] == '{' && json.Unmarshal([]byte(note), &n) == nil {
		return n
	}
	return RunNote{Message: note}
}

// Text returns the note for a reader: "message (3 of 10)".
func (n RunNote) Text() string {
	s := n.Message
	var p string
	switch {
	case n.Total > 0:
		p = strconv.FormatFloat(n.Progress, 'f', -1, 64) + " of " + strconv.FormatFloat(n.Total, 'f', -1, 64)
	case n.Progress > 0:
		p = "progress " + strconv.FormatFloat(n.Progress, 'f', -1, 64)
	}
	switch {
	case s == "":
		return p
	case p == "":
		return s
	}
	return s + " (" + p + ")"
}

// noteReporter stores a run's progress as its record's note (a heartbeat),
// and sends it as a progress notification when the starting request asked
// for them.
type noteReporter struct {
	progress ProgressSender
}

func (r noteReporter) Report(ctx context.Context, progress, total float64, message string) error {
	if r.progress != nil {
		_ = r.progress.SendProgress(ctx, progress, total, message)
	}
	return idemkit.CallFromContext(ctx).HeartbeatNote(ctx, EncodeRunNote(RunNote{Progress: progress, Total: total, Message: message}))
}

// NoteReporter returns the JobReporter of a background run: its progress
// becomes its record's note (with a heartbeat), and a progress notification
// through progress when that is not nil.
func NoteReporter(progress ProgressSender) JobReporter { return noteReporter{progress: progress} }
