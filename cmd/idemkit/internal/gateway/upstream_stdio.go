package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// StdioUpstream runs an MCP server that speaks over stdio: one process per
// session, because a stdio server serves exactly one client.
type StdioUpstream struct {
	argv   []string
	env    []string
	stderr io.Writer
	log    *slog.Logger
}

// NewStdioUpstream returns the upstream that runs argv (a program and its
// arguments) for every session, with the gateway's environment plus env.
// The processes' stderr goes to stderr (os.Stderr when nil).
func NewStdioUpstream(argv []string, env []string, stderr io.Writer, log *slog.Logger) (*StdioUpstream, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no upstream command: give the stdio server's command after --, for example: idemkit gateway --store memory -- node server.js")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("the upstream command %q cannot be run: %w", argv[0], err)
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StdioUpstream{argv: argv, env: env, stderr: stderr, log: log}, nil
}

// Transport implements Upstream.
func (u *StdioUpstream) Transport() string { return "stdio" }

// Connect implements Upstream: it starts the server process.
func (u *StdioUpstream) Connect(ctx context.Context) (Conn, error) {
	cmd := exec.Command(u.argv[0], u.argv[1:]...)
	cmd.Env = append(os.Environ(), u.env...)
	cmd.Stderr = u.stderr
	// Its own process group, so that a signal meant for the gateway (a
	// terminal's Ctrl-C) does not reach it before the gateway closes it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the upstream command %q: %w", u.argv[0], err)
	}
	c := &stdioConn{
		cmd:     cmd,
		in:      in,
		log:     u.log.With("pid", cmd.Process.Pid),
		pending: map[string]*stdioStream{},
		done:    make(chan struct{}),
	}
	go func() {
		c.read(out) // until the process closes its stdout
		c.wait()
	}()
	u.log.Debug("upstream process started", "pid", cmd.Process.Pid, "command", u.argv[0])
	return c, nil
}

// stdioConn is one upstream process.
type stdioConn struct {
	cmd *exec.Cmd
	log *slog.Logger

	wmu sync.Mutex // serialises writes to in
	in  io.WriteCloser

	mu      sync.Mutex              // protects pending, listen, exitErr
	pending map[string]*stdioStream // by request ID (idKey)
	listen  *stdioStream            // the Listen stream, or nil
	exitErr error                   // set once the process ended

	done      chan struct{} // closed when the process has exited
	closeOnce sync.Once
}

// Done implements Conn.
func (c *stdioConn) Done() <-chan struct{} { return c.done }

func (c *stdioConn) write(msg *Message) error {
	b := msg.Bytes()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.in.Write(append(b[:len(b):len(b)], '\n')); err != nil {
		return fmt.Errorf("%w: writing to the server process: %v", ErrUpstreamGone, err)
	}
	return nil
}

// Request implements Conn.
func (c *stdioConn) Request(ctx context.Context, msg *Message, _ http.Header) (Stream, error) {
	s := newStdioStream(ctx, c, 16)
	s.id, s.token = idKey(msg.ID), idKey(progressToken(msg.Params))
	c.mu.Lock()
	if c.exitErr != nil {
		err := c.exitErr
		c.mu.Unlock()
		return nil, err
	}
	c.pending[s.id] = s
	c.mu.Unlock()
	if err := c.write(msg); err != nil {
		c.remove(s)
		return nil, err
	}
	return s, nil
}

// Send implements Conn.
func (c *stdioConn) Send(_ context.Context, msg *Message, _ http.Header) error {
	c.mu.Lock()
	err := c.exitErr
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.write(msg)
}

// Listen implements Conn: the messages the server sends that belong to no
// request in flight.
func (c *stdioConn) Listen(ctx context.Context, _ http.Header) (Stream, error) {
	s := newStdioStream(ctx, c, 64)
	s.listen = true
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exitErr != nil {
		return nil, c.exitErr
	}
	if c.listen != nil {
		return nil, errors.New("a stream outside requests is already open on this session")
	}
	c.listen = s
	return s, nil
}

// Close implements Conn: it closes the server's stdin, as the MCP stdio
// transport prescribes, then sends SIGTERM after 2s and SIGKILL after 5s.
func (c *stdioConn) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		_ = c.in.Close()
		c.wmu.Unlock()
		for _, step := range []struct {
			wait time.Duration
			sig  syscall.Signal
		}{{2 * time.Second, syscall.SIGTERM}, {3 * time.Second, syscall.SIGKILL}} {
			t := time.NewTimer(step.wait)
			select {
			case <-c.done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				_ = c.cmd.Process.Kill()
				return
			case <-t.C:
				_ = c.cmd.Process.Signal(step.sig)
			}
		}
	})
	<-c.done
	return nil
}

// wait reaps the process and fails every stream still waiting.
func (c *stdioConn) wait() {
	err := c.cmd.Wait()
	why := "exited"
	if err != nil {
		why = "ended (" + err.Error() + ")"
	}
	c.log.Debug("upstream process ended", "status", why)
	gone := fmt.Errorf("%w: the server process %s", ErrUpstreamGone, why)
	c.mu.Lock()
	c.exitErr = gone
	streams := make([]*stdioStream, 0, len(c.pending)+1)
	for _, s := range c.pending {
		streams = append(streams, s)
	}
	if c.listen != nil {
		streams = append(streams, c.listen)
	}
	c.pending = map[string]*stdioStream{}
	c.listen = nil
	c.mu.Unlock()
	for _, s := range streams {
		s.fail(gone)
	}
	close(c.done)
}

// read dispatches every line the server writes.
func (c *stdioConn) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			c.dispatch(line)
		}
		if err != nil {
			return
		}
	}
}

func (c *stdioConn) dispatch(line []byte) {
	m, err := parseMessage(line)
	if err != nil {
		// Its size, never its bytes: a line may be a tool's result.
		c.log.Warn("upstream wrote a line that is not a JSON-RPC message; ignored", "bytes", len(line))
		return
	}
	c.mu.Lock()
	var to *stdioStream
	switch {
	case m.IsResponse():
		to = c.pending[idKey(m.ID)]
		delete(c.pending, idKey(m.ID))
	case progressOf(m) != nil:
		tok := idKey(progressOf(m))
		for _, s := range c.pending {
			if s.token != "" && s.token == tok {
				to = s
				break
			}
		}
	}
	if to == nil && !m.IsResponse() {
		// stdio has no notion of a related request: a server request or
		// notification goes to the stream outside requests when one is open,
		// else to the only request in flight, if there is exactly one.
		if c.listen != nil {
			to = c.listen
		} else if len(c.pending) == 1 {
			for _, s := range c.pending {
				to = s
			}
		}
	}
	c.mu.Unlock()
	if to == nil {
		c.log.Debug("upstream message with no stream to deliver it to; dropped", "method", m.Method, "id", string(m.ID))
		return
	}
	to.deliver(m)
}

func (c *stdioConn) remove(s *stdioStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.listen {
		if c.listen == s {
			c.listen = nil
		}
		return
	}
	if c.pending[s.id] == s {
		delete(c.pending, s.id)
	}
}

// stdioStream is the stream of one request (or the Listen stream). The
// reader goroutine delivers to it and fails it; it is the only sender on
// ch and the only one to close it.
type stdioStream struct {
	c      *stdioConn
	id     string
	token  string
	listen bool
	ctx    context.Context
	ch     chan *Message
	quit   chan struct{} // closed by Close
	once   sync.Once

	mu    sync.Mutex // protects err
	err   error
	ended bool // the response was read (the consumer's goroutine only)
}

func newStdioStream(ctx context.Context, c *stdioConn, buf int) *stdioStream {
	return &stdioStream{c: c, ctx: ctx, ch: make(chan *Message, buf), quit: make(chan struct{})}
}

// deliver queues m; the reader goroutine waits while the consumer is
// slower than the server, the backpressure a pipe gives anyway, until the
// consumer closes the stream or its ctx ends.
func (s *stdioStream) deliver(m *Message) {
	select {
	case s.ch <- m:
	case <-s.quit:
	case <-s.ctx.Done():
	}
}

func (s *stdioStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	close(s.ch)
}

// Next implements Stream.
func (s *stdioStream) Next() (*Message, error) {
	if s.ended {
		return nil, io.EOF
	}
	select {
	case m, ok := <-s.ch:
		if !ok {
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return nil, err
		}
		if m.IsResponse() && !s.listen {
			s.ended = true
		}
		return m, nil
	case <-s.quit:
		return nil, io.EOF
	case <-s.ctx.Done():
		s.c.remove(s)
		return nil, s.ctx.Err()
	}
}

// Close implements Stream.
func (s *stdioStream) Close() error {
	s.once.Do(func() { close(s.quit) })
	s.c.remove(s)
	return nil
}

// rawID is the JSON of an integer request ID.
func rawID(n int64) json.RawMessage { return json.RawMessage(fmt.Sprint(n)) }
