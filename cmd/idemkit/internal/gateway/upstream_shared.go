package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// SharedStdioUpstream runs a stdio MCP server once per subject instead of
// once per session: the sessions of one caller (a client that reconnects,
// or opens several) share one process. The process is initialized by the
// first session's initialize; later sessions are answered with that
// initialize's result, and their notifications/initialized is not
// repeated. Request IDs and progress tokens are rewritten so that the
// sessions' never collide on the process; a cancellation names the
// request it cancels. Messages the server sends outside any request go to
// every one of the subject's sessions that holds a stream open for them
// (a server request to one of them). The process ends when the last of its
// sessions does.
//
// Only an upstream that keeps no per-session state can be shared this way:
// the server sees one client, whose capabilities are the first session's,
// and whatever a session sets (a logging level, resource subscriptions,
// roots, in-memory state between calls, tasks) is every other session of
// the caller's too. Processes are never shared between callers: on stdio a
// message outside a request names no session, so another caller could
// receive it.
type SharedStdioUpstream struct {
	base *StdioUpstream

	mu    sync.Mutex // protects procs
	procs map[string]*sharedProc
}

// NewSharedStdioUpstream returns an upstream that shares base's processes
// by subject (see SharedStdioUpstream).
func NewSharedStdioUpstream(base *StdioUpstream) *SharedStdioUpstream {
	return &SharedStdioUpstream{base: base, procs: map[string]*sharedProc{}}
}

// Transport implements Upstream.
func (u *SharedStdioUpstream) Transport() string { return "stdio" }

// sharedBySubject marks an upstream whose processes are per subject (the
// caps count processes, not sessions).
func (u *SharedStdioUpstream) sharedBySubject() bool { return true }

// Connect implements Upstream: a share of the process of ctx's subject,
// started when the subject has none (or its last one ended).
func (u *SharedStdioUpstream) Connect(ctx context.Context) (Conn, error) {
	subject := subjectFromContext(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.procs[subject]
	if p != nil {
		select {
		case <-p.conn.Done():
			p = nil // ended: a new one
		default:
		}
	}
	if p == nil {
		c, err := u.base.Connect(ctx)
		if err != nil {
			return nil, err
		}
		p = &sharedProc{u: u, subject: subject, conn: c, listeners: map[*sharedListen]struct{}{}}
		u.procs[subject] = p
	}
	p.refs++
	return &sharedConn{p: p, inflight: map[string]json.RawMessage{}}, nil
}

// sharedProc is one subject's process.
type sharedProc struct {
	u       *SharedStdioUpstream
	subject string
	conn    Conn
	refs    int          // shares open; under u.mu
	nextID  atomic.Int64 // request IDs on the process
	nextTok atomic.Int64 // progress tokens on the process

	initMu   sync.Mutex // serialises initialize; protects initResp
	initResp *Message   // the first successful initialize answer
	notified atomic.Bool

	listenMu  sync.Mutex // protects listeners and upListen
	listeners map[*sharedListen]struct{}
	upListen  Stream
}

// release ends one share; the last one closes the process.
func (p *sharedProc) release(ctx context.Context) error {
	p.u.mu.Lock()
	p.refs--
	last := p.refs <= 0
	if last && p.u.procs[p.subject] == p {
		delete(p.u.procs, p.subject)
	}
	p.u.mu.Unlock()
	if !last {
		return nil
	}
	return p.conn.Close(ctx)
}

// sharedConn is one session's share of a process.
type sharedConn struct {
	p         *sharedProc
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex                 // protects inflight
	inflight map[string]json.RawMessage // the session's upstream ID -> the process's
}

// Done implements Conn.
func (c *sharedConn) Done() <-chan struct{} { return c.p.conn.Done() }

// Close implements Conn.
func (c *sharedConn) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.p.release(ctx) })
	return c.closeErr
}

// Request implements Conn.
func (c *sharedConn) Request(ctx context.Context, msg *Message, h http.Header) (Stream, error) {
	if msg.Method == "initialize" {
		return c.p.initialize(ctx, msg, h)
	}
	pid := rawID(c.p.nextID.Add(1))
	out := msg.withID(pid)
	var tok, ptok json.RawMessage
	if tok = progressToken(msg.Params); tok != nil {
		ptok = json.RawMessage(fmt.Sprintf(`"p%d"`, c.p.nextTok.Add(1)))
		params, err := withProgressToken(msg.Params, ptok)
		if err != nil {
			return nil, err
		}
		out = out.withParams(params)
	}
	k := idKey(msg.ID)
	c.mu.Lock()
	c.inflight[k] = pid
	c.mu.Unlock()
	st, err := c.p.conn.Request(ctx, out, h)
	if err != nil {
		c.done(k, pid)
		return nil, err
	}
	return &sharedStream{st: st, id: msg.ID, tok: tok, ptok: ptok, done: func() { c.done(k, pid) }}, nil
}

func (c *sharedConn) done(k string, pid json.RawMessage) {
	c.mu.Lock()
	if idKey(c.inflight[k]) == idKey(pid) {
		delete(c.inflight, k)
	}
	c.mu.Unlock()
}

// Send implements Conn.
func (c *sharedConn) Send(ctx context.Context, msg *Message, h http.Header) error {
	switch {
	case msg.Method == "notifications/initialized":
		if c.p.notified.Swap(true) {
			return nil // the process was told once
		}
	case cancelledRequest(msg) != nil:
		c.mu.Lock()
		pid, ok := c.inflight[idKey(cancelledRequest(msg))]
		c.mu.Unlock()
		if !ok {
			return nil
		}
		params, err := setMember(msg.Params, "requestId", pid)
		if err != nil {
			return err
		}
		msg = msg.withParams(params)
	}
	return c.p.conn.Send(ctx, msg, h)
}

// Listen implements Conn: the messages the process sends outside requests,
// shared by the subject's sessions that listen.
func (c *sharedConn) Listen(ctx context.Context, h http.Header) (Stream, error) {
	return c.p.listen(ctx, h)
}

// initialize sends the first initialize to the process and answers every
// later one with its result.
func (p *sharedProc) initialize(ctx context.Context, msg *Message, h http.Header) (Stream, error) {
	p.initMu.Lock()
	defer p.initMu.Unlock()
	if p.initResp != nil {
		return &sliceStream{msgs: []*Message{p.initResp.withID(msg.ID)}}, nil
	}
	st, err := p.conn.Request(ctx, msg.withID(rawID(p.nextID.Add(1))), h)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var msgs []*Message
	for {
		m, err := st.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: it ended the stream without answering", ErrUpstreamGone)
			}
			return nil, err
		}
		if m.IsResponse() {
			m = m.withID(msg.ID)
			if m.Error == nil {
				p.initResp = m
			}
			return &sliceStream{msgs: append(msgs, m)}, nil
		}
		msgs = append(msgs, m)
	}
}

// sharedStream restores the session's request ID on the answer and its
// progress token on progress notifications.
type sharedStream struct {
	st        Stream
	id        json.RawMessage
	tok, ptok json.RawMessage
	done      func()
	once      sync.Once
}

func (s *sharedStream) Next() (*Message, error) {
	m, err := s.st.Next()
	if err != nil {
		return nil, err
	}
	switch {
	case m.IsResponse():
		return m.withID(s.id), nil
	case s.ptok != nil && idKey(progressOf(m)) == idKey(s.ptok):
		if params, err := setMember(m.Params, "progressToken", s.tok); err == nil {
			return m.withParams(params), nil
		}
	}
	return m, nil
}

func (s *sharedStream) Close() error {
	s.once.Do(s.done)
	return s.st.Close()
}

// sliceStream is a stream of messages known already.
type sliceStream struct{ msgs []*Message }

func (s *sliceStream) Next() (*Message, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *sliceStream) Close() error { return nil }

// withProgressToken returns params with _meta.progressToken set to tok.
func withProgressToken(params json.RawMessage, tok json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Meta json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	meta, err := setMember(p.Meta, "progressToken", tok)
	if err != nil {
		return nil, err
	}
	return setMember(params, "_meta", meta)
}

// sharedListen is one session's stream of the process's messages outside
// requests.
type sharedListen struct {
	p    *sharedProc
	ctx  context.Context
	ch   chan *Message
	quit chan struct{}
	once sync.Once
}

// listen opens a session's share of the stream outside requests, and the
// process's own stream with the first one.
func (p *sharedProc) listen(ctx context.Context, h http.Header) (Stream, error) {
	p.listenMu.Lock()
	defer p.listenMu.Unlock()
	if p.upListen == nil {
		// Not bound to the first listener's request: it serves them all
		// until the last one leaves.
		st, err := p.conn.Listen(context.WithoutCancel(ctx), h)
		if err != nil {
			return nil, err
		}
		p.upListen = st
		go p.fanOut(st)
	}
	l := &sharedListen{p: p, ctx: ctx, ch: make(chan *Message, 64), quit: make(chan struct{})}
	p.listeners[l] = struct{}{}
	return l, nil
}

// fanOut delivers the process's messages outside requests: a notification
// to every listener, a request (which wants one answer) to one.
func (p *sharedProc) fanOut(st Stream) {
	for {
		m, err := st.Next()
		p.listenMu.Lock()
		if err != nil {
			if p.upListen == st {
				// The process's stream ended under its listeners (a stream
				// closed by its last listener has none left).
				for l := range p.listeners {
					l.stop()
				}
				p.listeners = map[*sharedListen]struct{}{}
				p.upListen = nil
			}
			p.listenMu.Unlock()
			return
		}
		targets := make([]*sharedListen, 0, len(p.listeners))
		for l := range p.listeners {
			targets = append(targets, l)
			if m.IsRequest() {
				break
			}
		}
		p.listenMu.Unlock()
		for _, l := range targets {
			select {
			case l.ch <- m:
			case <-l.quit:
			case <-l.ctx.Done():
			}
		}
	}
}

func (l *sharedListen) stop() { l.once.Do(func() { close(l.quit) }) }

func (l *sharedListen) Next() (*Message, error) {
	select {
	case m := <-l.ch:
		return m, nil
	case <-l.quit:
		return nil, io.EOF
	case <-l.ctx.Done():
		return nil, l.ctx.Err()
	}
}

// Close implements Stream; the last listener closes the process's stream.
func (l *sharedListen) Close() error {
	l.stop()
	p := l.p
	p.listenMu.Lock()
	delete(p.listeners, l)
	var st Stream
	if len(p.listeners) == 0 {
		st, p.upListen = p.upListen, nil
	}
	p.listenMu.Unlock()
	if st != nil {
		return st.Close()
	}
	return nil
}

// isShared reports an upstream whose processes are per subject.
func isShared(u Upstream) bool {
	s, ok := u.(interface{ sharedBySubject() bool })
	return ok && s.sharedBySubject()
}
