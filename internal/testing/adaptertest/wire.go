package adaptertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// Message is one JSON-RPC request or notification a client sent.
type Message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Wire records the JSON-RPC messages a client sends. It is safe for
// concurrent use.
type Wire struct {
	mu   sync.Mutex // protects msgs
	msgs []Message
}

func (w *Wire) record(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var msgs []Message
	if b[0] == '[' {
		_ = json.Unmarshal(b, &msgs)
	} else {
		var m Message
		if json.Unmarshal(b, &m) == nil {
			msgs = append(msgs, m)
		}
	}
	w.mu.Lock()
	w.msgs = append(w.msgs, msgs...)
	w.mu.Unlock()
}

// Messages returns the requests recorded so far with method.
func (w *Wire) Messages(method string) []Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Message
	for _, m := range w.msgs {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// RoundTripper returns an http.RoundTripper that records the body of every
// POST and sends it through base (http.DefaultTransport when nil).
func (w *Wire) RoundTripper(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && r.Body != nil {
			b, err := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if err != nil {
				return nil, err
			}
			w.record(b)
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		}
		return base.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Writer returns a writer that records every newline-delimited message
// written through it to w2 (a stdio client's output).
func (w *Wire) Writer(w2 io.WriteCloser) io.WriteCloser {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			w.record(sc.Bytes())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return &teeWriter{w: w2, pw: pw, done: done}
}

type teeWriter struct {
	w    io.WriteCloser
	pw   *io.PipeWriter
	done chan struct{}
}

func (t *teeWriter) Write(p []byte) (int, error) {
	_, _ = t.pw.Write(p)
	return t.w.Write(p)
}

func (t *teeWriter) Close() error {
	_ = t.pw.Close()
	<-t.done
	return t.w.Close()
}
