package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fault is what the network between the agent and the server does to one
// HTTP request. The agent's MCP client sends every request through a Proxy,
// which applies the fault found in the request's context.
type Fault int

const (
	// NoFault forwards the request and returns the server's answer.
	NoFault Fault = iota
	// ResetThenRetry is an infrastructure retry: the request reaches the
	// server and is answered, the connection is reset before the answer
	// gets back, and the proxy (as HTTP client libraries and proxies do on
	// a reset) POSTs the very same bytes again: same JSON-RPC id, same
	// Mcp-Session-Id. The client gets the second answer.
	ResetThenRetry
	// Reset is a broken stream: the request reaches the server and is
	// answered, the connection is reset before the answer gets back, and
	// the client sees a network error.
	Reset
)

type faultKey struct{}

// WithFault returns ctx with the fault the Proxy applies to the HTTP
// requests sent with it.
func WithFault(ctx context.Context, f Fault) context.Context {
	return context.WithValue(ctx, faultKey{}, f)
}

// ErrConnectionReset is the error a Reset fault returns to the client.
var ErrConnectionReset = errors.New("read: connection reset by peer (injected by the demo proxy)")

// WireEvent is one JSON-RPC request the Proxy put on the wire.
type WireEvent struct {
	At        time.Time `json:"at"`
	Method    string    `json:"method"`
	Tool      string    `json:"tool,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Status    int       `json:"status,omitempty"`
	// Note says what the proxy did with the answer: "", "dropped (reset)",
	// "retry of the same bytes".
	Note string `json:"note,omitempty"`
}

// Proxy is an http.RoundTripper standing for the network and
// infrastructure between an agent and an MCP server. It logs every POST
// and applies the Fault of the request's context. It is safe for
// concurrent use.
type Proxy struct {
	Next http.RoundTripper // nil: http.DefaultTransport

	mu  sync.Mutex // protects log
	log []WireEvent
}

// Events returns the requests put on the wire so far.
func (p *Proxy) Events() []WireEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]WireEvent(nil), p.log...)
}

// RoundTrip implements http.RoundTripper.
func (p *Proxy) RoundTrip(req *http.Request) (*http.Response, error) {
	next := p.Next
	if next == nil {
		next = http.DefaultTransport
	}
	if req.Method != http.MethodPost || req.Body == nil {
		return next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	fault, _ := req.Context().Value(faultKey{}).(Fault)
	send := func(note string) (*http.Response, error) {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		ev := describe(body, r.Header.Get("Mcp-Session-Id"))
		ev.Note = note
		resp, err := next.RoundTrip(r)
		if resp != nil {
			ev.Status = resp.StatusCode
		}
		p.record(ev)
		return resp, err
	}
	switch fault {
	case ResetThenRetry, Reset:
		resp, err := send("")
		if err != nil {
			return nil, err
		}
		// The server answered in full; the answer never reaches the client.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.annotateLast("answer dropped: connection reset")
		if fault == Reset {
			return nil, ErrConnectionReset
		}
		return send("retry of the same bytes after the reset")
	default:
		return send("")
	}
}

func (p *Proxy) record(ev WireEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, ev)
}

func (p *Proxy) annotateLast(note string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.log); n > 0 {
		p.log[n-1].Note = note
	}
}

// describe reads the JSON-RPC method, id and tool name of a request body.
func describe(body []byte, session string) WireEvent {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	ev := WireEvent{At: time.Now(), SessionID: session}
	if json.Unmarshal(body, &msg) != nil {
		ev.Method = "?"
		return ev
	}
	ev.Method = msg.Method
	if msg.Method == "tools/call" {
		ev.Tool = msg.Params.Name
	}
	if len(msg.ID) > 0 && string(msg.ID) != "null" {
		var s string
		if json.Unmarshal(msg.ID, &s) != nil {
			s = string(msg.ID)
		}
		ev.RequestID = s
	}
	return ev
}

// String formats an event for the log.
func (e WireEvent) String() string {
	s := fmt.Sprintf("POST %s", e.Method)
	if e.Tool != "" {
		s += " " + e.Tool
	}
	s += fmt.Sprintf(" id=%s session=%s", orDash(e.RequestID), orDash(shortID(e.SessionID)))
	if e.Status == 0 {
		s += " no answer (the client gave up)"
	} else {
		s += fmt.Sprintf(" → %d", e.Status)
	}
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortID shortens an mcp-go session ID (mcp-session-<uuid>) to the
// first block of its UUID.
func shortID(s string) string {
	s = strings.TrimPrefix(s, "mcp-session-")
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}
