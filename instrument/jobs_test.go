package instrument

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func waitJob(t *testing.T, j *Jobs, ctx context.Context, id string, done func(*Job) bool) *Job {
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

func TestJobs_RecordsResultsErrorsAndPanics(t *testing.T) {
	j := NewJobs(&JobsConfig{Heartbeat: 10 * time.Millisecond})
	defer func() { _ = j.Close(context.Background()) }()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		work  JobWork
		state JobState
		check func(*Job) bool
	}{
		{"result", func(ctx context.Context) ([]byte, bool, error) {
			RecordWrite(ctx, "w-1")
			if err := Progress(ctx, 1, 1, "all"); err != nil {
				return nil, false, err
			}
			return []byte(`{"ok":true}`), false, nil
		}, JobSucceeded, func(j *Job) bool {
			return string(j.Result) == `{"ok":true}` && j.WriteID == "w-1" && j.Message == "all"
		}},
		{"isError result", func(context.Context) ([]byte, bool, error) { return []byte(`{"isError":true}`), true, nil }, JobFailed,
			func(j *Job) bool { return j.IsError && j.Result != nil }},
		{"Go error", func(context.Context) ([]byte, bool, error) { return nil, false, errors.New("boom") }, JobFailed,
			func(j *Job) bool { return j.Error == "boom" }},
		{"panic", func(context.Context) ([]byte, bool, error) { panic("oops") }, JobFailed,
			func(j *Job) bool { return strings.Contains(j.Error, "oops") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := j.Start(ctx, "export", tc.work)
			if err != nil || job.State != JobRunning || !strings.HasPrefix(job.ID, "job_") {
				t.Fatalf("%#v %v", job, err)
			}
			got := waitJob(t, j, ctx, job.ID, (*Job).Done)
			if got.State != tc.state || !tc.check(got) {
				t.Errorf("job %#v", got)
			}
		})
	}
}

func TestJobs_HeartbeatsAndAbandonment(t *testing.T) {
	store := &MemoryJobStore{}
	j := NewJobs(&JobsConfig{Store: store, Heartbeat: 10 * time.Millisecond, StaleAfter: time.Minute})
	release := make(chan struct{})
	job, err := j.Start(context.Background(), "export", func(ctx context.Context) ([]byte, bool, error) {
		<-release
		return []byte(`{}`), false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The worker heartbeats while the work runs.
	got := waitJob(t, j, context.Background(), job.ID, func(g *Job) bool { return g.Heartbeat.After(job.Heartbeat) })
	if !got.Heartbeat.After(job.Heartbeat) || got.State != JobRunning {
		t.Errorf("no heartbeat recorded: %#v", got)
	}
	close(release)
	if err := j.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A running record whose worker is gone (another process died).
	dead := &Job{ID: "job_dead", Tool: "export", State: JobRunning, Heartbeat: time.Now().Add(-time.Minute)}
	if err := store.Create(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if got, _ := j.Get(context.Background(), "job_dead"); got.State != JobAbandoned {
		t.Errorf("stale job reported %s", got.State)
	}
	if _, err := j.Start(context.Background(), "export", nil); !errors.Is(err, ErrJobsClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestJobs_TimeoutCancelsTheWork(t *testing.T) {
	j := NewJobs(&JobsConfig{Timeout: 20 * time.Millisecond})
	defer func() { _ = j.Close(context.Background()) }()
	job, err := j.Start(context.Background(), "export", func(ctx context.Context) ([]byte, bool, error) {
		<-ctx.Done()
		return nil, false, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, j, context.Background(), job.ID, (*Job).Done)
	if got.State != JobFailed || got.Error != context.DeadlineExceeded.Error() {
		t.Errorf("%#v", got)
	}
}

func TestJobs_OutliveTheRequest(t *testing.T) {
	j := NewJobs(nil)
	defer func() { _ = j.Close(context.Background()) }()
	reqCtx, cancel := context.WithCancel(context.Background())
	job, err := j.Start(reqCtx, "export", func(ctx context.Context) ([]byte, bool, error) {
		time.Sleep(20 * time.Millisecond)
		return []byte(`{}`), false, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the request ends at once
	if got := waitJob(t, j, context.Background(), job.ID, (*Job).Done); got.State != JobSucceeded {
		t.Errorf("%#v", got)
	}
}

func TestMemoryJobStore_Retention(t *testing.T) {
	s := &MemoryJobStore{Retention: time.Millisecond}
	ctx := context.Background()
	if err := s.Create(ctx, &Job{ID: "a", State: JobSucceeded, Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, &Job{ID: "a"}); err == nil {
		t.Error("duplicate ID accepted")
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("expired job: %v", err)
	}
	if err := s.Update(ctx, &Job{ID: "zzz"}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("update unknown: %v", err)
	}
}
