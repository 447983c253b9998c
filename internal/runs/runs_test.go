package runs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/runkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newEngine(t *testing.T, store idemstore.Store, cfg Config) *Engine {
	t.Helper()
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kind == "" {
		cfg.Kind = "task"
	}
	e, err := New(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func start(t *testing.T, e *Engine, owner, tool string, work Work) *Run {
	t.Helper()
	r, err := e.Create(ctx(t), ctx(t), owner, tool)
	if err != nil {
		t.Fatal(err)
	}
	r.Launch(work)
	return r
}

func wait(t *testing.T, e *Engine, owner, id string) Info {
	t.Helper()
	in, err := e.Wait(ctx(t), owner, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return in
}

func TestRun_ReportsProgressThenTheStoredResult(t *testing.T) {
	e := newEngine(t, &idemkit.MemoryStore{}, Config{IDPrefix: "task-"})
	step := make(chan struct{})
	var runs atomic.Int32
	r := start(t, e, "alice", "export", func(ctx context.Context) (idemkit.Response, error) {
		runs.Add(1)
		if err := idemkit.CallFromContext(ctx).HeartbeatNote(ctx, "half done"); err != nil {
			return idemkit.Response{}, err
		}
		<-step
		return idemkit.Response{Body: []byte(`{"rows":3}`), WriteID: "exp_1"}, nil
	})
	if !strings.HasPrefix(r.ID(), "task-") || r.Info().Status != Running || r.Info().Expires.Sub(r.Info().Created) != idemkit.DefaultWindow {
		t.Fatalf("created run: %+v", r.Info())
	}
	// Running, with its note, on the status path.
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, err := e.Get(ctx(t), "alice", r.ID(), false)
		if err != nil {
			t.Fatal(err)
		}
		if in.Status != Running {
			t.Fatalf("status %s before the work finished", in.Status)
		}
		if in.Note == "half done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the note never showed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(step)
	in := wait(t, e, "alice", r.ID())
	if in.Status != Succeeded || string(in.Body) != `{"rows":3}` || in.WriteID != "exp_1" || in.IsError || !in.Kept || in.Tool != "export" || in.ID != r.ID() {
		t.Fatalf("finished run: %+v", in)
	}
	if in.Updated.Before(in.Created) {
		t.Fatalf("updated %v before created %v", in.Updated, in.Created)
	}
	if runs.Load() != 1 {
		t.Fatalf("the work ran %d times", runs.Load())
	}
	// Only the owner sees it, and only in its kind's namespace.
	if _, err := e.Get(ctx(t), "bob", r.ID(), false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's Get: %v, want ErrNotFound", err)
	}
	jobs := newEngine(t, e.store, Config{Kind: "job", IDPrefix: "task-"})
	if _, err := jobs.Get(ctx(t), "alice", r.ID(), false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another kind's Get: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "task-", "task-xyz", strings.TrimPrefix(r.ID(), "task-"), r.ID() + "0"} {
		if _, err := e.Get(ctx(t), "alice", bad, false); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", bad, err)
		}
	}
}

func TestRun_FailuresAreFailed(t *testing.T) {
	e := newEngine(t, &idemkit.MemoryStore{}, Config{})
	cases := []struct {
		name    string
		work    Work
		isError bool
		text    string
	}{
		{"error result", func(context.Context) (idemkit.Response, error) {
			return idemkit.Response{Body: []byte(`{"isError":true}`), IsError: true}, nil
		}, true, ""},
		{"Go error", func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, errors.New("gateway down") }, false, "gateway down"},
		{"panic", func(context.Context) (idemkit.Response, error) { panic("boom") }, false, "the work panicked: boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, e, "", "refund", tc.work)
			in := wait(t, e, "", r.ID())
			if in.Status != Failed || in.IsError != tc.isError || in.Error != tc.text {
				t.Fatalf("run: %+v, want failed (isError %v, error %q)", in, tc.isError, tc.text)
			}
			if tc.isError && string(in.Body) != `{"isError":true}` {
				t.Fatalf("the error result was not kept: %q", in.Body)
			}
		})
	}
}

func TestRun_AbortedRunNeverStarts(t *testing.T) {
	e := newEngine(t, &idemkit.MemoryStore{}, Config{})
	r, err := e.Create(ctx(t), ctx(t), "", "refund")
	if err != nil {
		t.Fatal(err)
	}
	r.Abort("the task could not be recorded")
	r.Launch(func(context.Context) (idemkit.Response, error) {
		t.Error("the aborted run's work ran")
		return idemkit.Response{}, nil
	})
	in := wait(t, e, "", r.ID())
	if in.Status != Failed || in.Error != "the task could not be recorded" {
		t.Fatalf("aborted run: %+v", in)
	}
}

func TestRun_CancelStopsTheWorkAndIsFinal(t *testing.T) {
	e := newEngine(t, &idemkit.MemoryStore{}, Config{})
	stopped := make(chan error, 1)
	started := make(chan struct{})
	r := start(t, e, "alice", "export", func(ctx context.Context) (idemkit.Response, error) {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return idemkit.Response{Body: []byte("too late")}, nil
	})
	<-started
	in, err := e.Cancel(ctx(t), "alice", r.ID(), "cancelled by the user")
	if err != nil || in.Status != Cancelled || in.Error != "cancelled by the user" {
		t.Fatalf("Cancel: %+v, %v", in, err)
	}
	select {
	case cause := <-stopped:
		if cause == nil || cause.Error() != "cancelled by the user" {
			t.Fatalf("the work's context was cancelled with %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled work did not stop")
	}
	<-r.Done()
	// The late result was not recorded: the run stays cancelled.
	if in := wait(t, e, "alice", r.ID()); in.Status != Cancelled || in.Body != nil {
		t.Fatalf("after the work returned: %+v, want still cancelled", in)
	}
	if _, err := e.Cancel(ctx(t), "alice", r.ID(), "again"); !errors.Is(err, ErrTerminal) {
		t.Fatalf("second Cancel: %v, want ErrTerminal", err)
	}
	done := start(t, e, "alice", "export", func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: []byte("x")}, nil })
	wait(t, e, "alice", done.ID())
	if in, err := e.Cancel(ctx(t), "alice", done.ID(), "late"); !errors.Is(err, ErrTerminal) || in.Status != Succeeded {
		t.Fatalf("Cancel of a finished run: %+v, %v", in, err)
	}
	if _, err := e.Cancel(ctx(t), "bob", done.ID(), "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's Cancel: %v", err)
	}
}

// A run cancelled on another replica stops at its next heartbeat.
func TestRun_CancelFromAnotherReplica(t *testing.T) {
	store := &idemkit.MemoryStore{}
	a := newEngine(t, store, Config{Lease: 300 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	b := newEngine(t, store, Config{Lease: 300 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	started := make(chan struct{})
	stopped := make(chan error, 1)
	r := start(t, a, "alice", "export", func(ctx context.Context) (idemkit.Response, error) {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return idemkit.Response{}, ctx.Err()
	})
	<-started
	if in, err := b.Get(ctx(t), "alice", r.ID(), false); err != nil || in.Status != Running {
		t.Fatalf("the other replica's view: %+v, %v", in, err)
	}
	if _, err := b.Cancel(ctx(t), "alice", r.ID(), "stop"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, idemkit.ErrLeaseLost) {
			t.Fatalf("the work was stopped by %v, want its heartbeat's ErrLeaseLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the work cancelled on another replica did not stop")
	}
	if in := wait(t, a, "alice", r.ID()); in.Status != Cancelled {
		t.Fatalf("after the stop: %s", in.Status)
	}
}

// A run whose worker died (it holds the record and never heartbeats again)
// is reported lost once its lease has run out, and its worker cannot revive
// it.
func TestRun_DeadWorkerIsLost(t *testing.T) {
	store := &idemkit.MemoryStore{}
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	g, err := idemkit.NewGuard(store, &idemkit.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(g, Config{Kind: "job", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	// The worker of a process that was killed: its claim, then nothing.
	id := runkey.NewID()
	key, _ := idemkit.NewRunKey("job", "alice", "export", id)
	if _, err := store.Claim(ctx(t), idemstore.ClaimRequest{Key: key.ID(), Tool: "export", Token: 42, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if in, err := e.Get(ctx(t), "alice", id, false); err != nil || in.Status != Running {
		t.Fatalf("within the lease: %+v, %v; want running (nobody can tell yet)", in, err)
	}
	clock.advance(61 * time.Second)
	in, err := e.Get(ctx(t), "alice", id, false)
	if err != nil || in.Status != Lost || !strings.Contains(in.Error, "may or may not have done its work") {
		t.Fatalf("past the lease: %+v, %v; want lost", in, err)
	}
	// The slow worker cannot heartbeat it back, nor record an outcome.
	if err := store.Extend(ctx(t), idemstore.ExtendRequest{Key: key.ID(), Token: 42, Lease: time.Minute, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the dead worker's heartbeat: %v", err)
	}
	if in, err := e.Get(ctx(t), "alice", id, false); err != nil || in.Status != Lost {
		t.Fatalf("read again: %+v, %v", in, err)
	}
	// Listed as lost too; gone once its window is over.
	list, _, err := e.List(ctx(t), "alice", "", 10)
	if err != nil || len(list) != 1 || list[0].Status != Lost {
		t.Fatalf("List: %+v, %v", list, err)
	}
	clock.advance(time.Hour)
	if _, err := e.Get(ctx(t), "alice", id, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the window: %v, want ErrNotFound", err)
	}
}

func TestRun_ListPagesOneOwnersRuns(t *testing.T) {
	e := newEngine(t, &idemkit.MemoryStore{}, Config{IDPrefix: "j_"})
	done := func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: []byte("ok")}, nil }
	want := map[string]bool{}
	for range 5 {
		r := start(t, e, "alice", "export", done)
		want[r.ID()] = true
		wait(t, e, "alice", r.ID())
	}
	for range 2 {
		start(t, e, "bob", "export", done)
	}
	got := map[string]bool{}
	cursor, pages := "", 0
	for {
		page, next, err := e.List(ctx(t), "alice", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > 2 {
			t.Fatalf("page of %d, want at most 2", len(page))
		}
		for _, in := range page {
			if !want[in.ID] || got[in.ID] {
				t.Fatalf("List returned %s (another owner's, or twice)", in.ID)
			}
			got[in.ID] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != 5 || pages != 3 {
		t.Fatalf("listed %d runs in %d pages, want 5 in 3", len(got), pages)
	}
	if _, _, err := e.List(ctx(t), "alice", "not-a-cursor", 2); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestEngine_CloseStopsRunsAndAbortsUnlaunched(t *testing.T) {
	store := &idemkit.MemoryStore{}
	g, _ := idemkit.NewGuard(store, nil)
	e, err := New(g, Config{Kind: "job"})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	running := start(t, e, "", "export", func(ctx context.Context) (idemkit.Response, error) {
		close(started)
		<-ctx.Done()
		return idemkit.Response{}, ctx.Err()
	})
	idle, err := e.Create(ctx(t), ctx(t), "", "export")
	if err != nil {
		t.Fatal(err)
	}
	<-started
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the deadline (a run was still working)", err)
	}
	reader, _ := New(g, Config{Kind: "job"})
	defer reader.Close(context.Background())
	for _, id := range []string{running.ID(), idle.ID()} {
		in, err := reader.Get(ctx(t), "", id, false)
		if err != nil || in.Status != Failed || in.Error != shutdownReason {
			t.Fatalf("after Close: %+v, %v; want failed by the shutdown", in, err)
		}
	}
	if _, err := e.Create(ctx(t), ctx(t), "", "export"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Create after Close: %v", err)
	}
}

type fakeClock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
