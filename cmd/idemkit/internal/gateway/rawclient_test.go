package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// rawClient speaks MCP's Streamable HTTP with hand-made requests, so that
// a test controls every header and every byte of the body, as an attacker
// (or a broken client) does.
type rawClient struct {
	t    testing.TB
	url  string
	hdr  http.Header // sent on every request, over the defaults
	sid  string
	next int
}

func newRawClient(t testing.TB, url string, hdr http.Header) *rawClient {
	t.Helper()
	if hdr == nil {
		hdr = http.Header{}
	}
	return &rawClient{t: t, url: url, hdr: hdr}
}

// rawAnswer is one HTTP answer: its status, headers and body, and the
// JSON-RPC message in it (the last one of an SSE stream), if any.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
	msg    map[string]any
}

// send makes one request with method and body and returns its answer.
// The defaults (Content-Type and Accept of an MCP client, the session ID)
// are set first; c.hdr and extra, pairs of name and value, replace them
// (a value "" removes the header).
func (c *rawClient) send(method, body string, extra ...string) rawAnswer {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	} else if method == http.MethodGet {
		req.Header.Set("Accept", "text/event-stream")
	}
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			req.Header.Del(extra[i])
		} else {
			req.Header.Set(extra[i], extra[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	a := rawAnswer{status: resp.StatusCode, header: resp.Header}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" && method == http.MethodPost {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		var all bytes.Buffer
		for sc.Scan() {
			all.Write(sc.Bytes())
			all.WriteByte('\n')
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(d), &m) == nil {
					a.msg = m
				}
			}
		}
		a.body = all.Bytes()
		return a
	}
	a.body, _ = io.ReadAll(resp.Body)
	if ct == "application/json" {
		_ = json.Unmarshal(a.body, &a.msg)
	}
	return a
}

// post sends one JSON-RPC message.
func (c *rawClient) post(body string, extra ...string) rawAnswer {
	c.t.Helper()
	return c.send(http.MethodPost, body, extra...)
}

const rawInitialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// initialize starts a session and returns the initialize answer; the
// session ID is kept for the next requests when there is one.
func (c *rawClient) initialize() rawAnswer {
	c.t.Helper()
	c.sid = ""
	a := c.post(rawInitialize)
	if a.status != http.StatusOK {
		return a
	}
	c.sid = a.header.Get("Mcp-Session-Id")
	if c.sid == "" {
		c.t.Fatalf("initialize answered without a session: %d %s", a.status, a.body)
	}
	if n := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); n.status != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %d %s", n.status, n.body)
	}
	return a
}

// mustInitialize is initialize that fails the test unless a session began.
func (c *rawClient) mustInitialize() {
	c.t.Helper()
	if a := c.initialize(); a.status != http.StatusOK {
		c.t.Fatalf("initialize: %d %s", a.status, a.body)
	}
}

// callParams sends a tools/call whose params are the raw JSON params.
func (c *rawClient) callParams(params string, extra ...string) rawAnswer {
	c.t.Helper()
	c.next++
	return c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, c.next, params), extra...)
}

// call sends a tools/call of tool with args.
func (c *rawClient) call(tool string, args any, extra ...string) rawAnswer {
	c.t.Helper()
	b, err := json.Marshal(map[string]any{"name": tool, "arguments": args})
	if err != nil {
		c.t.Fatal(err)
	}
	return c.callParams(string(b), extra...)
}

// result returns the CallToolResult of an answer, failing the test when
// the answer is not one.
func (a rawAnswer) result(t testing.TB) map[string]any {
	t.Helper()
	r, ok := a.msg["result"].(map[string]any)
	if a.status != http.StatusOK || !ok {
		t.Fatalf("not a tools/call result: HTTP %d %s", a.status, a.body)
	}
	return r
}

// refusal returns the reason of the idemkit refusal marker of a result,
// or "".
func refusalOf(r map[string]any) string {
	meta, _ := r["_meta"].(map[string]any)
	m, _ := meta[spancontract.RefusalMetaKey].(map[string]any)
	s, _ := m["reason"].(string)
	return s
}

// replayed reports whether a result carries the replay marker.
func replayed(r map[string]any) bool {
	meta, _ := r["_meta"].(map[string]any)
	return meta[spancontract.ReplayMetaKey] != nil
}

// resultText joins the text contents of a result.
func resultText(r map[string]any) string {
	var b strings.Builder
	content, _ := r["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok {
			s, _ := m["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// rpcError returns the JSON-RPC error of an answer, or nil.
func (a rawAnswer) rpcError() map[string]any {
	e, _ := a.msg["error"].(map[string]any)
	return e
}

// stdioClient is a client of a Gateway served over stdio (ServeStdio),
// one line per message.
type stdioClient struct {
	t       testing.TB
	in      *io.PipeWriter
	answers *bufio.Scanner
	served  chan error
	next    int
}

// newStdioClient serves g over stdio to a new client and initializes the
// session. The session ends when the test does.
func newStdioClient(t testing.TB, g *Gateway) *stdioClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioClient{t: t, in: inW, answers: bufio.NewScanner(outR), served: make(chan error, 1)}
	c.answers.Buffer(nil, 64<<20)
	go func() {
		c.served <- g.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		<-c.served
	})
	c.send(rawInitialize)
	c.notify(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *stdioClient) notify(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// send writes one request and returns the response to it (messages before
// it are skipped).
func (c *stdioClient) send(line string) map[string]any {
	c.t.Helper()
	c.notify(line)
	for c.answers.Scan() {
		var m map[string]any
		if err := json.Unmarshal(c.answers.Bytes(), &m); err != nil {
			c.t.Fatalf("the gateway wrote %q: %v", c.answers.Bytes(), err)
		}
		if _, ok := m["method"]; !ok {
			return m
		}
	}
	c.t.Fatalf("no answer to %s: %v", line, c.answers.Err())
	return nil
}

// callParams sends a tools/call whose params are the raw JSON params.
func (c *stdioClient) callParams(params string) map[string]any {
	c.t.Helper()
	c.next++
	return c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, c.next, params))
}
