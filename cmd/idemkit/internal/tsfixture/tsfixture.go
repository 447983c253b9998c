// Package tsfixture runs the real TypeScript MCP server and client of
// cmd/idemkit/testdata/ts (the official @modelcontextprotocol/sdk from npm)
// for tests.
//
// The npm packages are installed once per package-lock.json with `npm ci`
// into a cache directory outside the repository ($IDEMKIT_TS_CACHE, or the
// user cache directory's idemkit-gateway-ts-fixtures/<lock hash>), under a file
// lock, so that concurrent test binaries share one install. The scripts are
// copied next to their node_modules on every use (ES modules resolve
// packages from the script's own directory).
//
// Without node or npm a test is skipped, except under CI=true, where it
// fails: CI must run these tests.
package tsfixture

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// files are the fixture files copied into the install directory.
var files = []string{"server.mjs", "client.mjs"}

// installMu serialises install within the test binary.
var installMu sync.Mutex

// Dir returns the directory holding the installed fixtures (node_modules
// and the scripts), installing them on first use. It skips t when node or
// npm is missing, or fails it under CI=true.
func Dir(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("tsfixture: %s is not installed (install Node.js 20 or later with npm): %v", tool, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	// Checked on every use, not once: a cache directory can be cleaned
	// under a long test run, and the next test then installs again.
	installMu.Lock()
	defer installMu.Unlock()
	dir, err := install()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// sourceDir is cmd/idemkit/testdata/ts, found from this file's location.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("tsfixture: cannot locate the source directory")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "ts"), nil
}

func install() (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("tsfixture: %w", err)
	}
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		return "", fmt.Errorf("tsfixture: %w", err)
	}
	sum := sha256.Sum256(append(append([]byte(nil), pkg...), lock...))
	base := os.Getenv("IDEMKIT_TS_CACHE")
	if base == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		base = filepath.Join(cache, "idemkit-gateway-ts-fixtures")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("tsfixture: %w", err)
	}
	dir := filepath.Join(base, hex.EncodeToString(sum[:8]))

	lf, err := os.OpenFile(filepath.Join(base, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("tsfixture: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("tsfixture: lock %s: %w", lf.Name(), err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)

	if _, err := os.Stat(filepath.Join(dir, ".installed")); err != nil {
		tmp, err := os.MkdirTemp(base, "install-")
		if err != nil {
			return "", fmt.Errorf("tsfixture: %w", err)
		}
		defer os.RemoveAll(tmp)
		if err := os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644); err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("tsfixture: npm ci in %s: %v\n%s", tmp, err, out)
		}
		if err := os.WriteFile(filepath.Join(tmp, ".installed"), []byte(time.Now().UTC().Format(time.RFC3339)), 0o644); err != nil {
			return "", err
		}
		_ = os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			return "", fmt.Errorf("tsfixture: %w", err)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("tsfixture: %w", err)
		}
		if cur, err := os.ReadFile(filepath.Join(dir, f)); err == nil && bytes.Equal(cur, b) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f+".tmp"), b, 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(filepath.Join(dir, f+".tmp"), filepath.Join(dir, f)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Server is a running TypeScript fixture server.
type Server struct {
	// URL is the Streamable HTTP endpoint (http://127.0.0.1:PORT/mcp).
	URL string
	// Log is the file the server appends one line to per execution.
	Log string
	cmd *exec.Cmd
}

// ServerOptions configure StartHTTPServer.
type ServerOptions struct {
	// Stateless serves without sessions.
	Stateless bool
	// Resumable keeps an event store, so that streams can be resumed.
	Resumable bool
	// Log is the execution log; a new file under t.TempDir() when "".
	Log string
	// Port to listen on; 0 picks a free one.
	Port int
}

// StartHTTPServer starts server.mjs over Streamable HTTP and stops it when
// the test ends.
func StartHTTPServer(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	dir := Dir(t)
	if opts.Log == "" {
		opts.Log = filepath.Join(t.TempDir(), "executions.jsonl")
	}
	args := []string{filepath.Join(dir, "server.mjs"), "--http", fmt.Sprint(opts.Port)}
	if opts.Stateless {
		args = append(args, "--stateless")
	}
	if opts.Resumable {
		args = append(args, "--resumable")
	}
	cmd := exec.Command("node", args...)
	cmd.Env = append(os.Environ(), "FIXTURE_LOG="+opts.Log)
	cmd.Stderr = &prefixWriter{t: t, prefix: "ts-server: "}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("tsfixture: start server: %v", err)
	}
	s := &Server{Log: opts.Log, cmd: cmd}
	t.Cleanup(s.Stop)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		port, ok := strings.CutPrefix(l, "listening ")
		if !ok {
			t.Fatalf("tsfixture: server said %q, want \"listening PORT\"", l)
		}
		s.URL = "http://127.0.0.1:" + port + "/mcp"
	case <-time.After(30 * time.Second):
		t.Fatal("tsfixture: the server did not start listening within 30s")
	}
	return s
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// Kill stops the server at once (SIGKILL) and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// StdioServerCommand returns the command line that runs server.mjs over
// stdio, with its execution log in the environment entry it returns.
func StdioServerCommand(t testing.TB) (argv []string) {
	t.Helper()
	return []string{"node", filepath.Join(Dir(t), "server.mjs"), "--stdio"}
}

// Execution is one line of a server's execution log.
type Execution struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	ID   string         `json:"id"`
	PID  int            `json:"pid"`
	Auth string         `json:"auth"`
}

// Executions reads an execution log (none yet when it does not exist).
func Executions(t testing.TB, path string) []Execution {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []Execution
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Execution
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("tsfixture: execution log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// Client drives client.mjs: the official TypeScript MCP client.
type Client struct {
	t    testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	seq  atomic.Int64
	mu   sync.Mutex // protects wait and the writes to in
	wait map[int64]chan Answer
	done chan struct{}
}

// Answer is the driver's answer to one command.
type Answer struct {
	Seq      int64           `json:"seq"`
	OK       bool            `json:"ok"`
	Result   json.RawMessage `json:"result"`
	Progress []Progress      `json:"progress"`
	Error    string          `json:"error"`
	Code     any             `json:"code"`
}

// Progress is one progress notification the client received.
type Progress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total"`
	Message  string  `json:"message"`
}

// StartClient starts the client driver; it stops when the test ends.
func StartClient(t testing.TB, env ...string) *Client {
	t.Helper()
	dir := Dir(t)
	cmd := exec.Command("node", filepath.Join(dir, "client.mjs"))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &prefixWriter{t: t, prefix: "ts-client: "}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("tsfixture: start client: %v", err)
	}
	c := &Client{t: t, cmd: cmd, in: in, wait: map[int64]chan Answer{}, done: make(chan struct{})}
	go c.read(out)
	t.Cleanup(c.Close)
	return c
}

func (c *Client) read(out io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var a Answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			c.t.Logf("tsfixture: unreadable client answer %q: %v", sc.Text(), err)
			continue
		}
		c.mu.Lock()
		ch := c.wait[a.Seq]
		delete(c.wait, a.Seq)
		c.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
}

// Do sends a command and waits for its answer (up to 2 minutes).
func (c *Client) Do(cmd map[string]any) Answer {
	c.t.Helper()
	seq := c.seq.Add(1)
	cmd["seq"] = seq
	b, err := json.Marshal(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	ch := make(chan Answer, 1)
	c.mu.Lock()
	c.wait[seq] = ch
	_, err = c.in.Write(append(b, '\n'))
	c.mu.Unlock()
	if err != nil {
		c.t.Fatalf("tsfixture: write to client: %v", err)
	}
	select {
	case a := <-ch:
		return a
	case <-c.done:
		c.t.Fatalf("tsfixture: the client exited before answering %s", b)
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("tsfixture: no answer to %s within 2 minutes", b)
	}
	return Answer{}
}

// MustDo is Do that fails the test when the command failed.
func (c *Client) MustDo(cmd map[string]any) Answer {
	c.t.Helper()
	a := c.Do(cmd)
	if !a.OK {
		c.t.Fatalf("tsfixture: %v failed: %s", cmd, a.Error)
	}
	return a
}

// Close ends the driver (closing its connections) and waits for it.
func (c *Client) Close() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// prefixWriter logs a child's output lines through t.
type prefixWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.t.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
