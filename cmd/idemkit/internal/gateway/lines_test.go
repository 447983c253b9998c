package gateway

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The lines the gateway reads are bounded by --max-message-bytes: a stdio
// client's, a stdio upstream's, an SSE stream's. Before, each was read
// whole into memory, however long.

func TestReadLine_DropsALineOverTheLimit(t *testing.T) {
	in := strings.Repeat("x", 200<<10) + "\n" + `{"ok":1}` + "\n" + "12345"
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	line, tooLong, err := readLine(r, 64<<10)
	if !tooLong || line != nil || err != nil {
		t.Fatalf("the long line: %d bytes, tooLong %v, %v", len(line), tooLong, err)
	}
	if line, tooLong, err = readLine(r, 64<<10); string(line) != `{"ok":1}`+"\n" || tooLong || err != nil {
		t.Fatalf("the next line: %q, %v, %v", line, tooLong, err)
	}
	// At the limit exactly, without a newline at the end: kept.
	if line, tooLong, _ = readLine(r, 5); string(line) != "12345" || tooLong {
		t.Fatalf("a last line at the limit: %q, %v", line, tooLong)
	}
}

// TestGateway_StdioClientLineOverTheLimit: a stdio client's line over the
// limit is dropped unread and answered with an error that says so; the
// session goes on.
func TestGateway_StdioClientLineOverTheLimit(t *testing.T) {
	up := newUpstream(t)
	u, err := NewHTTPUpstream(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstream: u, Guard: newGuard(t), MaxMessageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	c := newStdioClient(t, g)
	m := c.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"issue_refund","arguments":{"order_id":"` + strings.Repeat("o", 1<<20) + `"}}}`)
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); !strings.Contains(msg, "over 4096 bytes") || !strings.Contains(msg, "--max-message-bytes") || m["id"] != nil {
		t.Fatalf("answer to a line over the limit: %.300v", m)
	}
	if up.count("issue_refund") != 0 {
		t.Fatal("the call in the dropped line ran")
	}
	if r := c.callParams(`{"name":"issue_refund","arguments":{"order_id":"o-1"}}`); r["result"] == nil || up.count("issue_refund") != 1 {
		t.Fatalf("the next call: %.300v", r)
	}
}

// TestGateway_StdioUpstreamLineOverTheLimit: an upstream process that
// writes a line over the limit is stopped; the request gets an error that
// says why, and the gateway serves new sessions.
func TestGateway_StdioUpstreamLineOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	up, err := NewStdioUpstream([]string{os.Args[0]}, []string{stdioServerEnv + "=" + dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A killed process leaves its PID file: ask the kernel whether it runs.
	running := func() int {
		entries, _ := os.ReadDir(dir)
		n := 0
		for _, e := range entries {
			pid, _ := strconv.Atoi(e.Name())
			if pid > 0 && syscall.Kill(pid, 0) == nil {
				n++
			}
		}
		return n
	}
	g, err := New(Config{Upstream: up, Guard: newGuard(t), MaxMessageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	url := serveGateway(t, g)
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	a := c.call("big", map[string]any{"bytes": 1 << 20})
	e := a.rpcError()
	if msg, _ := e["message"].(string); !strings.Contains(msg, "over 65536 bytes") || !strings.Contains(msg, "went away") {
		t.Fatalf("a line over the limit from the upstream: %d %.400s", a.status, a.body)
	}
	if !eventually(func() bool { return running() == 0 }) {
		t.Errorf("%d upstream processes still run", running())
	}
	c2 := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c2.mustInitialize()
	if r := c2.call("big", map[string]any{"bytes": 1000}).result(t); len(resultText(r)) != 1000 {
		t.Errorf("a new session: %.300v", r)
	}
}
