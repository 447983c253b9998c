package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
)

// childEnv makes the test binary run the refund server with the flags in
// its value (a JSON array) instead of the tests: the crash tests kill a
// real refundserver process.
const childEnv = "REFUNDSERVER_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		var flags []string
		if err := json.Unmarshal([]byte(args), &flags); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Args = append([]string{os.Args[0]}, flags...)
		main()
		os.Exit(0)
	}
	pgtest.Main(m)
}

// process is a refundserver process started by a test.
type process struct {
	t   *testing.T
	cmd *exec.Cmd
	url string
	log *bytes.Buffer
}

// startProcess runs the refund server with args (plus a free address, a
// ready file and no telemetry export) until it listens.
func startProcess(t *testing.T, dir string, args ...string) *process {
	t.Helper()
	ready := filepath.Join(dir, "ready")
	_ = os.Remove(ready)
	all := append([]string{"-addr", "127.0.0.1:0", "-ready-file", ready, "-otlp-endpoint", ""}, args...)
	b, _ := json.Marshal(all)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	p := &process{t: t, cmd: cmd, log: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("refundserver log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			p.url = strings.TrimSpace(string(b))
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refund server did not start:\n%s", p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL: no deferred function, no shutdown, no finish runs.
func (p *process) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		p.t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// client is an MCP client over Streamable HTTP speaking raw JSON-RPC (the
// protocol version with sessions and tasks, 2025-11-25), for the messages
// the Go SDK clients have no method for.
type client struct {
	t     *testing.T
	url   string
	token string
	sid   string
	mu    sync.Mutex // protects id
	id    int
}

const protocol = "2025-11-25"

// connect opens a session on url as the caller of token.
func connect(t *testing.T, url, token string) *client {
	t.Helper()
	c := &client{t: t, url: url, token: token}
	resp, err := c.send(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": protocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "refundserver-test", "version": "1"}}})
	if err != nil || resp["result"] == nil {
		t.Fatalf("initialize: %v %v", resp, err)
	}
	if _, err := c.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// call sends a request and returns its response object; it fails the test
// on a transport error.
func (c *client) call(method string, params any) map[string]any {
	c.t.Helper()
	resp, err := c.try(method, params)
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// try sends a request and returns its response object, or the transport
// error (the server died).
func (c *client) try(method string, params any) (map[string]any, error) {
	c.mu.Lock()
	c.id++
	id := c.id
	c.mu.Unlock()
	return c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

func (c *client) send(msg map[string]any) (map[string]any, error) {
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, c.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocol)
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.sid = sid
	}
	if msg["id"] == nil {
		return nil, nil // a notification
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && strings.Contains(data, `"id":`+fmt.Sprint(msg["id"])) {
				raw = []byte(data)
				break
			}
		}
	} else if raw, err = io.ReadAll(resp.Body); err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("response %q: %w", raw, err)
	}
	return out, nil
}

func result(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	r, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a result: %v", resp)
	}
	return r
}

func rpcError(resp map[string]any) (int, string) {
	e, _ := resp["error"].(map[string]any)
	code, _ := e["code"].(float64)
	msg, _ := e["message"].(string)
	return int(code), msg
}

func text(res map[string]any) string {
	var parts []string
	items, _ := res["content"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			if s, ok := m["text"].(string); ok {
				parts = append(parts, s)
			}
		}
	}
	return strings.Join(parts, "\n")
}

func metaOf(res map[string]any, key string) map[string]any {
	m, _ := res["_meta"].(map[string]any)
	v, _ := m[key].(map[string]any)
	return v
}

// eventually polls fn until it returns true or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
