package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM before it kills.
const DefaultStopTimeout = 15 * time.Second

// Group is the background processes of one run, each logging to its own
// file in Dir. StopAll stops them, the last started first. The zero value
// is not usable: set Dir. A Group is safe for concurrent use.
type Group struct {
	// Dir holds each process's log, NAME.log.
	Dir string

	mu    sync.Mutex // protects procs
	procs []*Proc
}

// Proc is a process started by a Group.
type Proc struct {
	// Name names the process in messages; Log is its output file.
	Name, Log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error // the exit error, set before done is closed
	logFile   *os.File
}

// Start starts args[0] with args[1:] and the environment of this process
// plus env (KEY=VALUE), its stdout and stderr going to Dir/name.log.
func (g *Group) Start(name string, env []string, args ...string) (*Proc, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("start %s: no command", name)
	}
	if err := os.MkdirAll(g.Dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(g.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{}), logFile: f}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// StopAll stops every process of the group, the last started first, each
// with SIGTERM and, after timeout, SIGKILL. It returns the errors of the
// processes that had to be killed.
func (g *Group) StopAll(timeout time.Duration) error {
	g.mu.Lock()
	procs := append([]*Proc(nil), g.procs...)
	g.procs = nil
	g.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(timeout))
	}
	return errors.Join(errs...)
}

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the exit error once the process has ended (nil for exit 0).
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits up to timeout (DefaultStopTimeout when 0)
// for the process to end, then kills it. It returns an error only when the
// process had to be killed.
func (p *Proc) Stop(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM: killed", p.Name, p.Pid(), timeout)
}

// Tail returns the last n lines of the process's log.
func (p *Proc) Tail(n int) string { return TailFile(p.Log, n) }

// WaitReady waits until ready reports true, checking every 100ms. It fails
// with the end of the process's log when the process exits first, when
// timeout passes or when ctx ends.
func (p *Proc) WaitReady(ctx context.Context, what string, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before %s; the end of %s:\n%s", p.Name, p.err, what, p.Log, p.Tail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w", p.Name, what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s after %s; the end of %s:\n%s", p.Name, what, timeout, p.Log, p.Tail(30))
		}
	}
}

// TailFile returns the last n lines of a file ("" when it cannot be read).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Run runs a command to its end, its output going to w (which may be nil),
// and returns an error that names the command when it fails.
func Run(ctx context.Context, w io.Writer, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	if w == nil {
		w = io.Discard
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return nil
}
