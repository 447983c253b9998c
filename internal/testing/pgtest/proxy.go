package pgtest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy relays TCP connections between clients and a PostgreSQL server,
// reading the client's protocol messages as they pass, and can stop all
// traffic at one chosen statement: the crash tests kill the client process
// exactly there, with the statement sent to the server or not.
//
// It understands the startup message, simple queries ('Q') and the
// extended protocol's Parse ('P') and Bind ('B'), which it maps back to the
// statement text a prepared statement was parsed from. Clients must not
// use TLS (sslmode=disable).
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex // protects the fields below
	conns     []net.Conn
	marker    string        // armed: the statement text to stop at
	forward   bool          // whether the stopping message reaches the server
	fired     chan struct{} // closed when the proxy stopped (after writing a forwarded stopping message)
	firedDone bool          // fired is closed
	frozen    bool          // stopped: nothing is relayed any more
	closed    bool
}

// NewProxy listens on 127.0.0.1 and relays every connection to target
// (host:port). It is closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, to put in the client's DSN.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the proxy stop at the first client message that executes a
// statement whose text contains marker: a simple query, or a Bind of a
// statement parsed from such text. With forward, that message and the rest
// of its batch (through the next Sync) reach the server, which runs the
// statement; without, they do not. Either way nothing more is relayed in
// either direction, so the client never learns the outcome. The returned
// channel is closed when the proxy stops: with forward, once the stopping
// message has been written to the server.
func (p *Proxy) Arm(marker string, forward bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.forward = marker, forward
	p.fired = make(chan struct{})
	return p.fired
}

// Close closes the listener and every relayed connection; the server sees
// its clients go away (and rolls back their open transactions).
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go p.serverToClient(server, client)
		go p.clientToServer(client, server)
	}
}

func (p *Proxy) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// serverToClient relays the server's bytes until the proxy stops; after
// that it reads and drops them.
func (p *Proxy) serverToClient(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !p.isFrozen() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// clientToServer relays the client's bytes message by message.
func (p *Proxy) clientToServer(client, server net.Conn) {
	var (
		pending  []byte
		started  bool // the startup message has passed
		stmts    = map[string]string{}
		buf      = make([]byte, 32<<10)
		untilSyn bool // stopping with forward: relay through the next Sync
	)
	for {
		n, err := client.Read(buf)
		pending = append(pending, buf[:n]...)
		var out []byte
		stop := false
		for !stop {
			size, ok := messageSize(pending, started)
			if !ok {
				break
			}
			msg := pending[:size]
			if !started {
				started = true
				out = append(out, msg...)
				pending = pending[size:]
				continue
			}
			if untilSyn {
				out = append(out, msg...)
				pending = pending[size:]
				if msg[0] == 'S' {
					stop = true
				}
				continue
			}
			if q, ok := statementOf(msg, stmts); ok && p.matches(q) {
				if p.forwards() {
					out = append(out, msg...)
					pending = pending[size:]
					if msg[0] == 'Q' {
						stop = true
					} else {
						untilSyn = true
					}
					continue
				}
				stop = true
				break
			}
			out = append(out, msg...)
			pending = pending[size:]
		}
		if stop {
			// Freeze before the stopping statement reaches the server, so
			// that its response can never reach the client.
			p.freeze()
		}
		if len(out) > 0 && (stop || !p.isFrozen()) {
			_, werr := server.Write(out)
			if stop {
				// Only now: a test that kills the client and closes the
				// proxy once the channel is closed must not close the
				// server connection before a forwarded statement is
				// written to it.
				p.fire()
			}
			if werr != nil {
				return
			}
		} else if stop {
			p.fire()
		}
		if err != nil {
			server.Close()
			return
		}
		if p.isFrozen() {
			// Hold the server connection until the client goes away (the
			// test kills it), then close it, as the kernel would.
			_, _ = io.Copy(io.Discard, client)
			server.Close()
			return
		}
	}
}

func (p *Proxy) matches(q string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.marker != "" && !p.frozen && strings.Contains(q, p.marker)
}

func (p *Proxy) forwards() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forward
}

// freeze stops the relaying: nothing more passes in either direction
// (but the stopping message, which the caller writes itself).
func (p *Proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// fire closes the channel Arm returned, once.
func (p *Proxy) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired != nil && !p.firedDone {
		p.firedDone = true
		close(p.fired)
	}
}

// messageSize returns the size of the first complete message in b.
func messageSize(b []byte, started bool) (int, bool) {
	if !started { // the startup message: length, then body
		if len(b) < 4 {
			return 0, false
		}
		n := int(binary.BigEndian.Uint32(b))
		return n, len(b) >= n
	}
	if len(b) < 5 {
		return 0, false
	}
	n := 1 + int(binary.BigEndian.Uint32(b[1:]))
	return n, len(b) >= n
}

// statementOf returns the statement text msg runs ('Q', or 'B' of a parsed
// statement), recording Parse messages in stmts.
func statementOf(msg []byte, stmts map[string]string) (string, bool) {
	body := msg[5:]
	switch msg[0] {
	case 'Q':
		q, _, _ := bytes.Cut(body, []byte{0})
		return string(q), true
	case 'P':
		name, rest, _ := bytes.Cut(body, []byte{0})
		q, _, _ := bytes.Cut(rest, []byte{0})
		stmts[string(name)] = string(q)
	case 'B':
		_, rest, _ := bytes.Cut(body, []byte{0}) // portal
		name, _, _ := bytes.Cut(rest, []byte{0})
		q, ok := stmts[string(name)]
		return q, ok
	}
	return "", false
}
