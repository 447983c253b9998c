package instrument

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idemkit/internal/mcpcall"
)

// JobState is the state of a background job.
type JobState string

// Job states.
const (
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	// JobAbandoned is reported (never stored) for a running job whose worker
	// stopped heartbeating: its process died. Its work may or may not have
	// completed.
	JobAbandoned JobState = "abandoned"
)

// Job is a background job's record.
type Job struct {
	ID   string
	Tool string
	// Owner is a hash of the starting caller's subject, or "" when the call
	// had no subject (the unguessable ID is then the only access control).
	Owner string
	State JobState
	// Result is the wire JSON of the work's result (an MCP CallToolResult)
	// once it has one; IsError is its isError flag.
	Result  []byte
	IsError bool
	// Error is the text of a Go error (or panic) the work ended with.
	Error   string
	WriteID string
	// Progress, Total and Message are the last values the work reported
	// with Progress.
	Progress, Total float64
	Message         string
	Created         time.Time
	Updated         time.Time
	// Heartbeat is when the worker last proved it was alive.
	Heartbeat time.Time
}

func (j *Job) clone() *Job {
	c := *j
	c.Result = append([]byte(nil), j.Result...)
	return &c
}

// Done reports whether the job has finished (succeeded or failed).
func (j *Job) Done() bool { return j.State == JobSucceeded || j.State == JobFailed }

// ErrJobNotFound is returned for an unknown job ID, an expired job, or a job
// that belongs to another caller.
var ErrJobNotFound = errors.New("instrument: job not found")

// ErrJobsClosed is returned by Jobs.Start after Close.
var ErrJobsClosed = errors.New("instrument: jobs are shutting down")

// JobStore keeps job records. Implementations must be safe for concurrent
// use; ctx bounds each call. Get returns a copy the caller may keep.
type JobStore interface {
	Create(ctx context.Context, job *Job) error
	Get(ctx context.Context, id string) (*Job, error)
	Update(ctx context.Context, job *Job) error
}

// DefaultJobRetention is how long MemoryJobStore keeps a finished job.
const DefaultJobRetention = time.Hour

// MemoryJobStore is a JobStore in process memory. Its zero value is ready to
// use and safe for concurrent use. It keeps finished jobs for Retention
// (DefaultJobRetention when zero), then forgets them; jobs die with the
// process.
type MemoryJobStore struct {
	Retention time.Duration

	mu        sync.Mutex      // protects jobs and lastSweep
	jobs      map[string]*Job // by ID
	lastSweep time.Time
}

var _ JobStore = (*MemoryJobStore)(nil)

// Create implements JobStore.
func (s *MemoryJobStore) Create(ctx context.Context, job *Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = make(map[string]*Job)
	}
	s.sweepLocked(time.Now())
	if _, ok := s.jobs[job.ID]; ok {
		return fmt.Errorf("instrument: job %s already exists", job.ID)
	}
	s.jobs[job.ID] = job.clone()
	return nil
}

// Get implements JobStore.
func (s *MemoryJobStore) Get(ctx context.Context, id string) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok || s.expired(j, time.Now()) {
		return nil, ErrJobNotFound
	}
	return j.clone(), nil
}

// Update implements JobStore.
func (s *MemoryJobStore) Update(ctx context.Context, job *Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[job.ID]; !ok {
		return ErrJobNotFound
	}
	s.jobs[job.ID] = job.clone()
	return nil
}

func (s *MemoryJobStore) retention() time.Duration {
	if s.Retention > 0 {
		return s.Retention
	}
	return DefaultJobRetention
}

func (s *MemoryJobStore) expired(j *Job, now time.Time) bool {
	return j.Done() && now.Sub(j.Updated) > s.retention()
}

// sweepLocked drops expired jobs, at most once a minute.
func (s *MemoryJobStore) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for id, j := range s.jobs {
		if s.expired(j, now) {
			delete(s.jobs, id)
		}
	}
}

// Defaults of JobsConfig.
const (
	DefaultJobHeartbeat     = 5 * time.Second
	DefaultJobFinishTimeout = 10 * time.Second
)

// JobsConfig configures Jobs. A nil *JobsConfig means all defaults.
type JobsConfig struct {
	// Store keeps the job records. Defaults to a new MemoryJobStore.
	Store JobStore
	// Heartbeat is how often a worker records that it is alive. Defaults to
	// DefaultJobHeartbeat (5s).
	Heartbeat time.Duration
	// StaleAfter is how long a running job may go without a heartbeat before
	// the status tool reports it abandoned. Defaults to 3 × Heartbeat.
	StaleAfter time.Duration
	// Timeout bounds one job's work. Defaults to 0 (no bound but Close).
	Timeout time.Duration
}

// JobWork is a job's background work. It returns the wire JSON of its
// result and the result's isError flag (SDK adapters marshal their result
// type), or a Go error.
type JobWork func(ctx context.Context) (body []byte, isError bool, err error)

// Jobs runs job-and-poll tools (see mcpgo.AddJobTool and gosdk.AddJobTool):
// a start call returns a job ID at once and the work runs in a worker that
// outlives the request, whose state a status tool reports. The start tool
// is an ordinary protected tool, so the Guard stores its answer and a
// duplicate start call gets the same job ID instead of starting the work
// twice. Build Jobs with NewJobs and Close them on shutdown; they are safe
// for concurrent use.
type Jobs struct {
	store      JobStore
	heartbeat  time.Duration
	staleAfter time.Duration
	timeout    time.Duration

	ctx    context.Context // cancelled to stop workers
	cancel context.CancelFunc
	wg     sync.WaitGroup // running workers

	mu     sync.Mutex // protects closed and the wg.Add it orders
	closed bool
}

// NewJobs returns Jobs that keep records as cfg says (nil: all defaults).
func NewJobs(cfg *JobsConfig) *Jobs {
	var c JobsConfig
	if cfg != nil {
		c = *cfg
	}
	j := &Jobs{store: c.Store, heartbeat: c.Heartbeat, staleAfter: c.StaleAfter, timeout: c.Timeout}
	if j.store == nil {
		j.store = &MemoryJobStore{}
	}
	if j.heartbeat <= 0 {
		j.heartbeat = DefaultJobHeartbeat
	}
	if j.staleAfter <= 0 {
		j.staleAfter = 3 * j.heartbeat
	}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	return j
}

// StatusToolName returns the name of the status tool of a job tool: tool
// with "_status" appended.
func StatusToolName(tool string) string { return tool + "_status" }

// Start records a new running job of tool and runs work in a new goroutine
// detached from ctx's cancellation (it keeps ctx's values, such as the
// trace). The work's ctx is cancelled by Close or the configured Timeout;
// Progress and RecordWrite called with it update the job. Start returns the
// job as created; ctx bounds only the record's creation.
func (j *Jobs) Start(ctx context.Context, tool string, work JobWork) (*Job, error) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, ErrJobsClosed
	}
	j.wg.Add(1)
	j.mu.Unlock()

	now := time.Now()
	job := &Job{ID: newJobID(), Tool: tool, Owner: jobOwner(ctx), State: JobRunning, Created: now, Updated: now, Heartbeat: now}
	if err := j.store.Create(ctx, job); err != nil {
		j.wg.Done()
		return nil, err
	}
	run := &jobRun{jobs: j, job: job.clone()}
	jctx, written := mcpcall.JobContext(ctx, run)
	wctx, cancel := context.WithCancel(jctx)
	if j.timeout > 0 {
		var cancelT context.CancelFunc
		wctx, cancelT = context.WithTimeout(wctx, j.timeout)
		prev := cancel
		cancel = func() { cancelT(); prev() }
	}
	stop := context.AfterFunc(j.ctx, cancel)
	go func() {
		defer j.wg.Done()
		defer cancel()
		defer stop()
		run.run(wctx, written, work)
	}()
	return job.clone(), nil
}

// Get returns the job with id as its status tool reports it: a running job
// whose heartbeat is older than StaleAfter is returned as JobAbandoned. It
// returns ErrJobNotFound when the job does not exist or was started by
// another subject than ctx's.
func (j *Jobs) Get(ctx context.Context, id string) (*Job, error) {
	job, err := j.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if job.Owner != "" && job.Owner != jobOwner(ctx) {
		return nil, ErrJobNotFound
	}
	if job.State == JobRunning && time.Since(job.Heartbeat) > j.staleAfter {
		job.State = JobAbandoned
	}
	return job, nil
}

// Close stops accepting jobs and waits for the running ones to finish until
// ctx is done; it then cancels the rest, waits for them to return, and
// returns ctx's error. Work must honour its ctx for Close to return.
func (j *Jobs) Close(ctx context.Context) error {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()

	done := make(chan struct{})
	go func() {
		j.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		j.cancel()
		return nil
	case <-ctx.Done():
		j.cancel()
		<-done
		return ctx.Err()
	}
}

func newJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "job_" + hex.EncodeToString(b[:])
}

// jobOwner returns the owner hash of the subject in ctx, or "".
func jobOwner(ctx context.Context) string {
	subject, ok := mcpcall.CallerSubject(ctx)
	if !ok {
		return ""
	}
	sum := sha256.Sum256([]byte("idemkit/job-owner\x00" + subject))
	return hex.EncodeToString(sum[:])
}

// jobRun is one running job.
type jobRun struct {
	jobs *Jobs

	mu  sync.Mutex // protects job and serialises writes of it
	job *Job
}

func (r *jobRun) update(ctx context.Context, mut func(*Job)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	mut(r.job)
	r.job.Updated = time.Now()
	return r.jobs.store.Update(ctx, r.job)
}

// Report records the progress the work reported (see Progress).
func (r *jobRun) Report(ctx context.Context, progress, total float64, message string) error {
	return r.update(ctx, func(j *Job) {
		j.Progress, j.Total, j.Message = progress, total, message
		j.Heartbeat = time.Now()
	})
}

func (r *jobRun) run(ctx context.Context, written func() string, work JobWork) {
	hbDone := make(chan struct{})
	hbExited := make(chan struct{})
	go func() {
		defer close(hbExited)
		t := time.NewTicker(r.jobs.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				_ = r.update(ctx, func(j *Job) { j.Heartbeat = time.Now() })
			}
		}
	}()

	body, isError, err := safeWork(ctx, work)
	close(hbDone)
	<-hbExited

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultJobFinishTimeout)
	defer cancel()
	_ = r.update(fctx, func(j *Job) {
		j.Heartbeat = time.Now()
		j.WriteID = written()
		switch {
		case err != nil:
			j.State, j.Error = JobFailed, err.Error()
		case isError:
			j.State, j.Result, j.IsError = JobFailed, body, true
		default:
			j.State, j.Result = JobSucceeded, body
		}
	})
}

func safeWork(ctx context.Context, work JobWork) (body []byte, isError bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the job's work panicked: %v", p)
		}
	}()
	return work(ctx)
}
