// Package runs runs durable background work on an idemkit.Guard's records:
// the work of a job-and-poll tool (jobs.Runner) and of an MCP task
// (internal/mcpcall) is a run. A run's execution is itself a claim: its
// record, keyed by idemkit.NewRunKey in its owner's namespace, is in
// progress while a worker holds it with a lease its heartbeats keep,
// carries the last progress note, and stores the work's outcome. Since the
// record lives where the Guard's records live, a run started on one
// replica is reported by every other, and after a restart.
//
// A run runs at most once. It is never taken over: a worker that died
// holding it (its lease ran out) makes it Lost, settled by the first status
// read that finds it so (idemkit.Guard.ReleaseAbandoned), so that a worker
// that was only slow cannot revive it. A cancellation (Engine.Cancel, from
// any replica) releases the record and fences the worker out; the worker
// stops at once on the replica that cancelled it, and at its next
// heartbeat elsewhere.
package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/runkey"
)

// Defaults of Config.
const (
	// DefaultLease is how long a run's worker holds it without a heartbeat
	// before the run is reported lost.
	DefaultLease = 30 * time.Second
	// DefaultPageSize is the page size of List when it is given none.
	DefaultPageSize = 50
)

// Status is a run's state as its readers report it.
type Status uint8

// Statuses.
const (
	// Running: a live worker holds the run.
	Running Status = iota + 1
	// Succeeded: the work's result is stored.
	Succeeded
	// Failed: the work's error result is stored (IsError), or the work
	// ended with an error (Error), or the run was aborted before it
	// started.
	Failed
	// Cancelled: Cancel stopped the run (Error holds the reason).
	Cancelled
	// Lost: the worker stopped heartbeating (its process died or hung)
	// before it finished. The work may or may not have done its effect.
	Lost
)

// String returns the status's name.
func (s Status) String() string {
	switch s {
	case Running:
		return "running"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether the run has ended: every status but Running.
func (s Status) Terminal() bool { return s != Running }

// Info is what a reader learns about a run.
type Info struct {
	// ID is the run's ID as callers see it (Config.IDPrefix and the hex
	// run ID).
	ID string
	// Tool is the tool whose work the run does.
	Tool   string
	Status Status
	// Created is when the run was claimed, Updated when its record last
	// changed (a heartbeat, the outcome), Expires when its record may be
	// deleted (the tool's window, from Created).
	Created, Updated, Expires time.Time
	// Note is the last progress note the work reported.
	Note string
	// Error is the work's error text, the cancellation's reason, or the
	// explanation of a lost or aborted run.
	Error string
	// WriteID and IsError describe a stored result; Body is the result
	// itself when the read asked for it and it was kept.
	WriteID string
	IsError bool
	Body    []byte
	// Kept is false for a finished run whose result was too large to keep
	// (or that has none).
	Kept bool
}

// Errors.
var (
	// ErrNotFound: no run with this ID in the caller's namespace, or its
	// record expired.
	ErrNotFound = errors.New("runs: not found")
	// ErrTerminal: the run has ended already (Cancel).
	ErrTerminal = errors.New("runs: the run has already ended")
	// ErrBadCursor: a List cursor that List did not return.
	ErrBadCursor = errors.New("runs: invalid cursor")
	// ErrClosed: the engine is shutting down (Create).
	ErrClosed = errors.New("runs: shutting down")
)

// Reasons written into released records; Lost is recognised by its own.
const (
	lostReason = "its worker stopped before it finished (the server running it went away or hung): " +
		"it may or may not have done its work"
	shutdownReason = "the server shut down while it ran: it may have done part of its work"
)

// Config configures an Engine.
type Config struct {
	// Kind names the runs' namespace ("job", "task"): runs of two kinds
	// never see each other. Required.
	Kind string
	// IDPrefix starts every run ID callers see ("job_"); Defaults to "".
	IDPrefix string
	// Lease is how long a worker holds a run without a heartbeat before the
	// run is reported lost. Defaults to DefaultLease (30s).
	Lease time.Duration
	// Heartbeat is how often a worker renews its lease. Defaults to a third
	// of Lease.
	Heartbeat time.Duration
	// Timeout bounds one run's work. Defaults to 0 (no bound but Close and
	// Cancel).
	Timeout time.Duration
}

// Engine starts and reports runs. Build it with New and Close it on
// shutdown; it is safe for concurrent use.
type Engine struct {
	guard     *idemkit.Guard   // lease and failure policy of runs
	now       func() time.Time // the Guard's Config.Now, or nil: the store's clock
	store     idemstore.Store
	kind      string
	prefix    string
	heartbeat time.Duration
	timeout   time.Duration

	ctx    context.Context // cancelled by Close to stop workers
	cancel context.CancelFunc
	wg     sync.WaitGroup // workers

	mu     sync.Mutex // protects closed and the wg.Add it orders
	closed bool

	local sync.Map // record key -> *Run running in this process
}

// New returns an Engine that keeps runs in g's store, with g's clock and
// per-tool windows, and cfg's lease.
func New(g *idemkit.Guard, cfg Config) (*Engine, error) {
	if g == nil {
		return nil, errors.New("runs: New needs a Guard")
	}
	if cfg.Kind == "" {
		return nil, errors.New("runs: Config.Kind is required")
	}
	if cfg.Lease < 0 || cfg.Heartbeat < 0 || cfg.Timeout < 0 {
		return nil, errors.New("runs: Config.Lease, Heartbeat and Timeout must not be negative")
	}
	lease := cfg.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	hb := cfg.Heartbeat
	if hb == 0 {
		hb = lease / 3
	}
	if hb >= lease {
		return nil, fmt.Errorf("runs: Config.Heartbeat %s must be shorter than Config.Lease %s", hb, lease)
	}
	// Runs use g's store, clock and windows, with their own lease, and keep
	// an error result as their outcome: every tool's policy says so.
	gc := g.Config()
	gc.Lease, gc.FailurePolicy = lease, idemkit.StoreToolErrors
	for name, tc := range gc.Tools {
		tc.Lease, tc.FailurePolicy = lease, idemkit.StoreToolErrors
		gc.Tools[name] = tc
	}
	rg, err := idemkit.NewGuard(g.Store(), &gc)
	if err != nil {
		return nil, fmt.Errorf("runs: %w", err)
	}
	e := &Engine{
		guard:     rg,
		now:       gc.Now,
		store:     g.Store(),
		kind:      cfg.Kind,
		prefix:    cfg.IDPrefix,
		heartbeat: hb,
		timeout:   cfg.Timeout,
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	return e, nil
}

// clock returns the time of a store request: the Guard's clock, or zero
// for the store's own.
func (e *Engine) clock() time.Time {
	if e.now == nil {
		return time.Time{}
	}
	return e.now()
}

// key returns the record key of a caller's run ID, or ErrNotFound for an ID
// that the engine did not make.
func (e *Engine) key(owner, tool, id string) (idemkit.Key, error) {
	hex, ok := strings.CutPrefix(id, e.prefix)
	if !ok || !runkey.ValidID(hex) {
		return idemkit.Key{}, ErrNotFound
	}
	if tool == "" {
		tool = e.kind // the record's tool is only read back
	}
	return idemkit.NewRunKey(e.kind, owner, tool, hex)
}

// Work is a run's work. Its ctx keeps the values of the context Create was
// given, carries the run's idemkit.Call (whose HeartbeatNote stores a
// progress note), and is cancelled when the run is cancelled (at once on
// this replica, at the next heartbeat on another), times out, or the
// engine closes. A panic is recovered and fails the run.
type Work func(ctx context.Context) (idemkit.Response, error)

// Run is a run claimed by Create: it holds its record until Launch runs
// its work or Abort releases it.
type Run struct {
	e       *Engine
	key     idemkit.Key
	id      string
	info    Info
	cancel  context.CancelCauseFunc
	start   chan startOrder
	claimed chan error
	done    chan struct{}
	once    sync.Once // Launch or Abort, once
}

type startOrder struct {
	work   Work
	reason string // Abort's
}

// ID returns the run's ID as callers see it.
func (r *Run) ID() string { return r.id }

// Info returns the run as created: running, with its creation time (this
// process's clock) and expiry.
func (r *Run) Info() Info { return r.info }

// Done is closed when the run's worker has returned.
func (r *Run) Done() <-chan struct{} { return r.done }

// Launch runs work as the run's work, in the run's worker.
func (r *Run) Launch(work Work) {
	r.once.Do(func() { r.start <- startOrder{work: work} })
}

// Abort ends the run without starting it: it fails with reason.
func (r *Run) Abort(reason string) {
	r.once.Do(func() { r.start <- startOrder{reason: reason} })
}

// Create claims a new run of tool in owner's namespace and returns it once
// its record exists (so that every replica's status reads find it), not yet
// started: call Launch, or Abort. base supplies the values of the work's
// context (its deadline and cancellation are not kept); ctx bounds the
// claim. A run that is neither launched nor aborted is aborted when the
// engine closes.
func (e *Engine) Create(ctx, base context.Context, owner, tool string) (*Run, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.wg.Add(1)
	e.mu.Unlock()

	hex := runkey.NewID()
	key, err := idemkit.NewRunKey(e.kind, owner, tool, hex)
	if err != nil {
		e.wg.Done()
		return nil, err
	}
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(base))
	stop := context.AfterFunc(e.ctx, func() { cancel(errShutdown) })
	r := &Run{
		e: e, key: key, id: e.prefix + hex, cancel: cancel,
		start:   make(chan startOrder, 1),
		claimed: make(chan error, 1),
		done:    make(chan struct{}),
	}
	e.local.Store(key.ID(), r)

	go func() {
		defer e.wg.Done()
		defer close(r.done)
		defer e.local.Delete(key.ID())
		defer stop()
		defer cancel(nil)
		claimedOK := false
		_, err := e.guard.Do(rctx, key, func(wctx context.Context) (idemkit.Response, error) {
			claimedOK = true
			r.claimed <- nil
			var order startOrder
			select {
			case order = <-r.start:
			case <-rctx.Done():
				return idemkit.Response{}, errors.New(shutdownReason)
			}
			if order.work == nil {
				return idemkit.Response{}, errors.New(order.reason)
			}
			return e.work(wctx, order.work)
		})
		if !claimedOK {
			if err == nil {
				err = errors.New("runs: the run's record was found completed at its creation")
			}
			r.claimed <- err
		}
	}()
	select {
	case err := <-r.claimed:
		if err != nil {
			return nil, fmt.Errorf("runs: create a %s run of %s: %w", e.kind, tool, err)
		}
	case <-ctx.Done():
		r.Abort("the request that created the run ended before its record was written")
		return nil, ctx.Err()
	}
	// The record as the store wrote it: its clock's creation time, and the
	// window of the tool.
	r.info = Info{ID: r.id, Tool: tool, Status: Running, Created: time.Now()}
	if rec, err := e.store.Lookup(ctx, idemstore.LookupRequest{Key: key.ID(), Now: e.clock()}); err == nil {
		r.info.Created, r.info.Expires = rec.Started, rec.ExpiresAt
	}
	r.info.Updated = r.info.Created
	return r, nil
}

var errShutdown = errors.New(shutdownReason)

// work runs the run's work with heartbeats and a recovered panic.
func (e *Engine) work(ctx context.Context, work Work) (resp idemkit.Response, err error) {
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	call := idemkit.CallFromContext(ctx)
	hbDone := make(chan struct{})
	hbExited := make(chan struct{})
	go func() {
		defer close(hbExited)
		t := time.NewTicker(e.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				if err := call.Heartbeat(wctx); errors.Is(err, idemkit.ErrLeaseLost) {
					// Cancelled on another replica, or settled as lost:
					// the outcome would not be recorded.
					cancel(err)
					return
				}
			}
		}
	}()
	defer func() {
		close(hbDone)
		<-hbExited
		if p := recover(); p != nil {
			err = fmt.Errorf("the work panicked: %v", p)
		}
		if err != nil && context.Cause(ctx) == errShutdown {
			err = errShutdown
		}
	}()
	return work(wctx)
}

// Get returns the run id of owner's namespace. A run whose worker stopped
// heartbeating is settled as Lost first. With body, a finished run's kept
// result comes back in Info.Body. It returns ErrNotFound for an unknown or
// expired run.
func (e *Engine) Get(ctx context.Context, owner, id string, body bool) (Info, error) {
	key, err := e.key(owner, "", id)
	if err != nil {
		return Info{}, err
	}
	rec, err := e.store.Lookup(ctx, idemstore.LookupRequest{Key: key.ID(), Body: body, Now: e.clock()})
	if errors.Is(err, idemkit.ErrNotFound) {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, fmt.Errorf("%w: read run %s: %w", idemkit.ErrStore, id, err)
	}
	return e.info(ctx, key, rec, body)
}

// info turns the record of key into an Info, settling an abandoned run as
// Lost.
func (e *Engine) info(ctx context.Context, key idemkit.Key, rec idemstore.Record, body bool) (Info, error) {
	if rec.Expired() {
		return Info{}, ErrNotFound
	}
	if rec.Abandoned() {
		settled, err := e.guard.ReleaseAbandoned(ctx, key, lostReason)
		switch {
		case err == nil:
			rec = settled
		case errors.Is(err, idemkit.ErrNotInProgress), errors.Is(err, idemkit.ErrInProgress):
			// Finished, or heartbeated, meanwhile: read it again.
			again, err := e.store.Lookup(ctx, idemstore.LookupRequest{Key: rec.Key, Body: body, Now: e.clock()})
			if err != nil {
				return Info{}, fmt.Errorf("%w: read run: %w", idemkit.ErrStore, err)
			}
			rec = again
		default:
			return Info{}, err
		}
	}
	id, _ := runkey.ID(rec.Key)
	in := Info{
		ID: e.prefix + id, Tool: rec.Tool, Created: rec.Started, Updated: rec.Updated, Expires: rec.ExpiresAt,
		Note: rec.Note, Error: rec.Error, WriteID: rec.WriteID, IsError: rec.IsError, Body: rec.Body,
	}
	if in.Updated.IsZero() {
		in.Updated = in.Created
	}
	switch rec.State {
	case idemstore.StateInProgress:
		in.Status = Running
	case idemstore.StateCompleted:
		in.Status, in.Kept = Succeeded, rec.Storage != idemstore.StorageDropped
		if rec.IsError {
			in.Status = Failed
		}
	case idemstore.StateReleased:
		switch {
		case rec.Cancelled && rec.Error == lostReason:
			in.Status = Lost
		case rec.Cancelled:
			in.Status = Cancelled
		default:
			in.Status = Failed
		}
	}
	return in, nil
}

// Cancel cancels the run id of owner's namespace with reason: its record
// is released as Cancelled at once (every replica reports it so), and its
// worker is stopped, at once on this replica and at its next heartbeat on
// another. It returns the run afterwards; ErrTerminal (with the run as it
// stands) when it had ended already; ErrNotFound for an unknown run.
func (e *Engine) Cancel(ctx context.Context, owner, id, reason string) (Info, error) {
	key, err := e.key(owner, "", id)
	if err != nil {
		return Info{}, err
	}
	rec, err := e.guard.Cancel(ctx, key, reason)
	switch {
	case err == nil:
	case errors.Is(err, idemkit.ErrNotFound):
		return Info{}, ErrNotFound
	case errors.Is(err, idemkit.ErrNotInProgress):
		in, ierr := e.info(ctx, key, rec, false)
		if ierr != nil {
			return Info{}, ierr
		}
		return in, ErrTerminal
	default:
		return Info{}, err
	}
	if v, ok := e.local.Load(key.ID()); ok {
		v.(*Run).cancel(errors.New(reason))
	}
	return e.info(ctx, key, rec, false)
}

// List returns a page of owner's runs, at most limit (DefaultPageSize when
// limit <= 0), after the run whose ID is cursor ("" from the start), and
// the cursor of the next page ("" after the last). Runs come in ID order.
func (e *Engine) List(ctx context.Context, owner, cursor string, limit int) ([]Info, string, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, idemstore.MaxListLimit-1)
	prefix := runkey.Prefix(e.kind, owner)
	after := ""
	if cursor != "" {
		hex, ok := strings.CutPrefix(cursor, e.prefix)
		if !ok || !runkey.ValidID(hex) {
			return nil, "", ErrBadCursor
		}
		after = prefix + hex
	}
	out := make([]Info, 0, limit)
	for {
		// One record more than the page needs tells whether another page
		// follows.
		want := limit - len(out) + 1
		recs, err := e.store.List(ctx, idemstore.ListRequest{KeyPrefix: prefix, After: after, Limit: want, Now: e.clock()})
		if err != nil {
			return nil, "", fmt.Errorf("%w: list runs: %w", idemkit.ErrStore, err)
		}
		for _, rec := range recs {
			if len(out) == limit {
				return out, out[len(out)-1].ID, nil
			}
			after = rec.Key
			hex, ok := runkey.ID(rec.Key)
			if !ok {
				continue
			}
			key, err := idemkit.NewRunKey(e.kind, owner, rec.Tool, hex)
			if err != nil {
				continue
			}
			in, err := e.info(ctx, key, rec, false)
			if errors.Is(err, ErrNotFound) {
				continue // expired, not yet swept
			}
			if err != nil {
				return nil, "", err
			}
			out = append(out, in)
		}
		if len(recs) < want {
			return out, "", nil
		}
	}
}

// Wait waits until the run id of owner's namespace has ended, and returns
// it with its kept result. ctx bounds the wait. It returns ErrNotFound for
// an unknown run.
func (e *Engine) Wait(ctx context.Context, owner, id string) (Info, error) {
	backoff := 20 * time.Millisecond
	for {
		in, err := e.Get(ctx, owner, id, true)
		if err != nil || in.Status.Terminal() {
			return in, err
		}
		var local <-chan struct{}
		if key, err := e.key(owner, "", id); err == nil {
			if v, ok := e.local.Load(key.ID()); ok {
				local = v.(*Run).done
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return in, ctx.Err()
		case <-local:
			t.Stop()
		case <-t.C:
		}
		backoff = min(backoff*3/2, time.Second)
	}
}

// Close stops accepting runs and waits for the running ones until ctx is
// done; it then cancels the rest (they fail: the server shut down) and
// waits for them to return, and returns ctx's error. Runs created but
// never launched are aborted. Work must honour its ctx for Close to return.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.local.Range(func(_, v any) bool {
		v.(*Run).Abort(shutdownReason)
		return true
	})
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		e.cancel()
		return nil
	case <-ctx.Done():
		e.cancel()
		<-done
		return ctx.Err()
	}
}
