package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
)

func waitJob(t *testing.T, j *Runner, ctx context.Context, id string, done func(*Job) bool) *Job {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		job, err := j.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if done(job) || time.Now().After(deadline) {
			return job
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newJobs(t *testing.T, store idemstore.Store, cfg *Config) *Runner {
	t.Helper()
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := New(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close(context.Background()) })
	return j
}

func TestJobs_RecordsResultsErrorsAndPanics(t *testing.T) {
	j := newJobs(t, &idemkit.MemoryStore{}, &Config{Heartbeat: 10 * time.Millisecond})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		work  Work
		state State
		check func(*Job) bool
	}{
		{"result", func(ctx context.Context) ([]byte, bool, error) {
			instrument.RecordWrite(ctx, "w-1")
			if err := instrument.Progress(ctx, 1, 1, "all"); err != nil {
				return nil, false, err
			}
			return []byte(`{"ok":true}`), false, nil
		}, Succeeded, func(j *Job) bool {
			return string(j.Result) == `{"ok":true}` && j.WriteID == "w-1" && j.Message == "all" && j.Progress == 1 && j.Total == 1
		}},
		{"isError result", func(context.Context) ([]byte, bool, error) { return []byte(`{"isError":true}`), true, nil }, Failed,
			func(j *Job) bool { return j.IsError && j.Result != nil }},
		{"Go error", func(context.Context) ([]byte, bool, error) { return nil, false, errors.New("boom") }, Failed,
			func(j *Job) bool { return j.Error == "boom" }},
		{"panic", func(context.Context) ([]byte, bool, error) { panic("oops") }, Failed,
			func(j *Job) bool { return strings.Contains(j.Error, "oops") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := j.Start(ctx, "export", tc.work)
			if err != nil || job.State != Running || !strings.HasPrefix(job.ID, "job_") || job.Expires.Sub(job.Created) != idemkit.DefaultWindow {
				t.Fatalf("%#v %v", job, err)
			}
			got := waitJob(t, j, ctx, job.ID, jobEnded)
			if got.State != tc.state || !tc.check(got) {
				t.Errorf("job %#v", got)
			}
		})
	}
}

// A job started by one process is reported by another that shares the
// store (a restart, a replica), and cancelled from it.
func TestJobs_AnotherProcessReportsAndCancels(t *testing.T) {
	store := &idemkit.MemoryStore{}
	a := newJobs(t, store, &Config{Lease: time.Second, Heartbeat: 20 * time.Millisecond})
	b := newJobs(t, store, &Config{Lease: time.Second, Heartbeat: 20 * time.Millisecond})
	stopped := make(chan struct{})
	job, err := a.Start(context.Background(), "export", func(ctx context.Context) ([]byte, bool, error) {
		if err := instrument.Progress(ctx, 2, 5, "copying"); err != nil {
			return nil, false, err
		}
		<-ctx.Done()
		close(stopped)
		return nil, false, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, b, context.Background(), job.ID, func(j *Job) bool { return j.Message == "copying" })
	if got.State != Running || got.Progress != 2 || got.Total != 5 {
		t.Fatalf("the other process's view: %#v", got)
	}
	if got, err := b.Cancel(context.Background(), job.ID, "the user cancelled it"); err != nil || got.State != Cancelled {
		t.Fatalf("Cancel from the other process: %#v, %v", got, err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the work did not stop at its next heartbeat")
	}
	if got, _ := a.Get(context.Background(), job.ID); got.State != Cancelled || got.Error != "the user cancelled it" {
		t.Fatalf("after the cancel: %#v", got)
	}
	if _, err := b.Cancel(context.Background(), job.ID, "again"); !errors.Is(err, ErrEnded) {
		t.Fatalf("second Cancel: %v", err)
	}
	if _, err := b.Get(context.Background(), "job_0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(context.Background(), "export", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestJobs_TimeoutCancelsTheWork(t *testing.T) {
	j := newJobs(t, &idemkit.MemoryStore{}, &Config{Timeout: 20 * time.Millisecond})
	job, err := j.Start(context.Background(), "export", func(ctx context.Context) ([]byte, bool, error) {
		<-ctx.Done()
		return nil, false, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, j, context.Background(), job.ID, jobEnded)
	if got.State != Failed || got.Error != context.DeadlineExceeded.Error() {
		t.Errorf("%#v", got)
	}
}

func TestJobs_OutliveTheRequest(t *testing.T) {
	j := newJobs(t, &idemkit.MemoryStore{}, nil)
	reqCtx, cancel := context.WithCancel(context.Background())
	job, err := j.Start(reqCtx, "export", func(ctx context.Context) ([]byte, bool, error) {
		time.Sleep(20 * time.Millisecond)
		return []byte(`{}`), false, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the request ends at once
	if got := waitJob(t, j, context.Background(), job.ID, jobEnded); got.State != Succeeded {
		t.Errorf("%#v", got)
	}
}

func TestNewJobs_RejectsBadConfig(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if _, err := New(nil, nil); err == nil {
		t.Error("NewJobs without a Guard")
	}
	if _, err := New(g, &Config{Lease: time.Second, Heartbeat: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "Heartbeat") {
		t.Errorf("a heartbeat longer than the lease: %v", err)
	}
}

// jobEnded reports whether the job has ended.
func jobEnded(j *Job) bool { return j.State != Running }
