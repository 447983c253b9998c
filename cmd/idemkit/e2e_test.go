package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
)

// TestMain lets the test binary stand in for the idemkit command: with
// IDEMKIT_TEST_EXEC=1 it runs the command line it was given, so that tests
// run (and SIGKILL) the real command as a process, built with the race
// detector like the tests.
func TestMain(m *testing.M) {
	if os.Getenv("IDEMKIT_TEST_EXEC") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

// selfExecEnv is the environment entry that makes the test binary run as
// the idemkit command.
const selfExecEnv = "IDEMKIT_TEST_EXEC=1"

// gatewayProc is a running `idemkit gateway` process.
type gatewayProc struct {
	URL  string
	cmd  *exec.Cmd
	log  *lineLog
	done chan struct{}
}

var servingLine = regexp.MustCompile(`serving MCP at (http://\S+/mcp)`)

// startGateway runs `idemkit gateway --listen 127.0.0.1:0 ARGS...` and
// waits until it serves. It is stopped (SIGTERM) when the test ends.
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	return startGatewayEnv(t, nil, args...)
}

// startGatewayEnv is startGateway with extra environment entries, which the
// gateway's stdio server processes inherit.
func startGatewayEnv(t *testing.T, env []string, args ...string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"gateway", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), selfExecEnv), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd, log: &lineLog{}, done: make(chan struct{})}
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.log.add(sc.Text())
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case url <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		g.Stop()
		t.Logf("gateway log:\n%s", g.log.String())
	})
	select {
	case g.URL = <-url:
	case <-g.done:
		t.Fatalf("the gateway exited before serving:\n%s", g.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not serve within 30s:\n%s", g.log.String())
	}
	return g
}

// Stop sends SIGTERM and waits (SIGKILL after 15s).
func (g *gatewayProc) Stop() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(15 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// Kill sends SIGKILL and waits.
func (g *gatewayProc) Kill() {
	_ = g.cmd.Process.Kill()
	<-g.done
}

// lineLog collects a process's log lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// toolResult is a CallToolResult as the TypeScript client returns it.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Meta              map[string]any `json:"_meta"`
}

func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func decodeResult(t *testing.T, a tsfixture.Answer) toolResult {
	t.Helper()
	if !a.OK {
		t.Fatalf("the call failed: %s", a.Error)
	}
	var r toolResult
	if err := json.Unmarshal(a.Result, &r); err != nil {
		t.Fatalf("the call's result %s: %v", a.Result, err)
	}
	return r
}

type listedTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema struct {
		Properties map[string]any `json:"properties"`
	} `json:"inputSchema"`
	Annotations map[string]any `json:"annotations"`
}

func listTools(t *testing.T, c *tsfixture.Client, conn string) map[string]listedTool {
	t.Helper()
	a := c.MustDo(map[string]any{"op": "list", "conn": conn})
	var r struct {
		Tools []listedTool `json:"tools"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]listedTool{}
	for _, tl := range r.Tools {
		out[tl.Name] = tl
	}
	return out
}

func call(c *tsfixture.Client, conn, tool string, args map[string]any) tsfixture.Answer {
	return c.Do(map[string]any{"op": "call", "conn": conn, "tool": tool, "args": args})
}

// stdioServer is the command line of the TypeScript fixture over stdio.
func stdioServer(t *testing.T) []string {
	return []string{"node", filepath.Join(tsfixture.Dir(t), "server.mjs"), "--stdio"}
}

func TestGateway_HTTPUpstream_ForwardsListsCallsAndProgress(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
	ready := filepath.Join(t.TempDir(), "gateway.url")
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory", "--ready-file", ready)
	if b, err := os.ReadFile(ready); err != nil || strings.TrimSpace(string(b)) != gw.URL {
		t.Errorf("--ready-file holds %q (%v), want %s", b, err, gw.URL)
	}
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "token-a"})

	tools := listTools(t, c, "a")
	for _, name := range []string{"issue_refund", "lookup_order", "set_status", "export_report", "charge_card", "crash_server"} {
		if _, ok := tools[name]; !ok {
			t.Errorf("tools/list through the gateway lacks %s: %v", name, tools)
		}
	}
	if tools["lookup_order"].Annotations["readOnlyHint"] != true {
		t.Errorf("lookup_order's annotations did not pass through: %v", tools["lookup_order"].Annotations)
	}

	r := decodeResult(t, call(c, "a", "lookup_order", map[string]any{"order_id": "o-1"}))
	if r.text() != "order o-1: paid" {
		t.Errorf("lookup_order answered %q", r.text())
	}
	r = decodeResult(t, call(c, "a", "issue_refund", map[string]any{"order_id": "o-1", "amount_cents": 500}))
	execs := tsfixture.Executions(t, srv.Log)
	if len(execs) != 1 || execs[0].Tool != "issue_refund" {
		t.Fatalf("executions = %+v, want one issue_refund", execs)
	}
	if r.StructuredContent["refund_id"] != execs[0].ID {
		t.Errorf("the client got refund %v, the server made %s", r.StructuredContent["refund_id"], execs[0].ID)
	}
	if execs[0].Auth != "Bearer token-a" {
		t.Errorf("the upstream saw Authorization %q, want the client's (forwarded)", execs[0].Auth)
	}

	a := c.Do(map[string]any{"op": "call", "conn": "a", "tool": "export_report", "progress": true,
		"args": map[string]any{"name": "q3", "steps": 4, "step_ms": 50}})
	r = decodeResult(t, a)
	if len(a.Progress) != 4 {
		t.Fatalf("the client got %d progress notifications, want 4: %+v", len(a.Progress), a.Progress)
	}
	for i, p := range a.Progress {
		if p.Progress != float64(i+1) || p.Total != 4 || p.Message != fmt.Sprintf("step %d", i+1) {
			t.Errorf("progress %d = %+v", i, p)
		}
	}

	// A JSON-RPC error from the upstream reaches the client as one.
	a = call(c, "a", "issue_refund", map[string]any{"order_id": 7})
	if a.OK {
		if r := decodeResult(t, a); !r.IsError {
			t.Errorf("a call with invalid arguments succeeded: %s", a.Result)
		}
	}
}

func TestGateway_StdioUpstream_OneProcessPerSession(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "executions.jsonl")
	gw := startGatewayEnv(t, []string{"FIXTURE_LOG=" + logFile}, append([]string{"--store", "memory", "--"}, stdioServer(t)...)...)
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "a"})
	c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "b"})
	decodeResult(t, call(c, "a", "issue_refund", map[string]any{"order_id": "o-a", "amount_cents": 1}))
	decodeResult(t, call(c, "b", "issue_refund", map[string]any{"order_id": "o-b", "amount_cents": 1}))
	a := c.Do(map[string]any{"op": "call", "conn": "b", "tool": "export_report", "progress": true,
		"args": map[string]any{"name": "q3", "steps": 3, "step_ms": 30}})
	decodeResult(t, a)
	if len(a.Progress) != 3 {
		t.Errorf("progress through a stdio upstream: %+v, want 3 notifications", a.Progress)
	}
	execs := tsfixture.Executions(t, logFile)
	if len(execs) != 3 {
		t.Fatalf("executions = %+v, want 3", execs)
	}
	if execs[0].PID == execs[1].PID {
		t.Errorf("two sessions ran in one upstream process (pid %d)", execs[0].PID)
	}
	if execs[1].PID != execs[2].PID {
		t.Errorf("one session's calls ran in two processes (%d, %d)", execs[1].PID, execs[2].PID)
	}
}

func TestGateway_ServesStdio(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "executions.jsonl")
	c := tsfixture.StartClient(t, "FIXTURE_LOG="+logFile)
	c.MustDo(map[string]any{"op": "connect", "conn": "s", "command": os.Args[0],
		"args": append([]string{"gateway", "--stdio", "--store", "memory", "--log-level", "debug", "--"}, stdioServer(t)...),
		"env":  map[string]string{"IDEMKIT_TEST_EXEC": "1"}})
	tools := listTools(t, c, "s")
	if _, ok := tools["issue_refund"]; !ok {
		t.Fatalf("tools over stdio: %v", tools)
	}
	r := decodeResult(t, call(c, "s", "issue_refund", map[string]any{"order_id": "o-s", "amount_cents": 2}))
	execs := tsfixture.Executions(t, logFile)
	if len(execs) != 1 || r.StructuredContent["refund_id"] != execs[0].ID {
		t.Fatalf("executions %+v, result %+v", execs, r)
	}
	a := c.Do(map[string]any{"op": "call", "conn": "s", "tool": "export_report", "progress": true,
		"args": map[string]any{"name": "q3", "steps": 3, "step_ms": 30}})
	decodeResult(t, a)
	if len(a.Progress) != 3 {
		t.Errorf("progress over stdio: %+v, want 3 notifications", a.Progress)
	}
	c.MustDo(map[string]any{"op": "close", "conn": "s"})
}

func TestGateway_UpstreamProcessExit_IsAClearError(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, append([]string{"--store", "memory", "--"}, stdioServer(t)...)...)
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "a"})
	a := call(c, "a", "crash_server", map[string]any{"delay_ms": 50})
	if a.OK {
		t.Fatalf("a call whose server died succeeded: %s", a.Result)
	}
	if !strings.Contains(a.Error, "went away before answering") || !strings.Contains(a.Error, "unknown") {
		t.Errorf("the client's error does not say the upstream went away: %s", a.Error)
	}
	// The session died with its process: the next request is told so, and
	// a new session works.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a = call(c, "a", "lookup_order", map[string]any{"order_id": "o"})
		if !a.OK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a.OK || !strings.Contains(a.Error, "Session not found") {
		t.Errorf("a request on the dead session: ok=%v error=%q, want the gateway's 404 answer", a.OK, a.Error)
	}
	c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "a"})
	decodeResult(t, call(c, "b", "lookup_order", map[string]any{"order_id": "o"}))
}

func TestGateway_HTTPUpstreamRestart_IsAClearError(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "executions.jsonl")
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{Port: port, Log: logFile})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "a"})
	decodeResult(t, call(c, "a", "lookup_order", map[string]any{"order_id": "o"}))

	// Killed mid-call: the client is told the upstream went away.
	done := make(chan tsfixture.Answer, 1)
	go func() {
		done <- call(c, "a", "issue_refund", map[string]any{"order_id": "o-k", "amount_cents": 1, "delay_ms": 3000})
	}()
	time.Sleep(500 * time.Millisecond)
	srv.Kill()
	a := <-done
	if a.OK || !strings.Contains(a.Error, "went away before answering") {
		t.Errorf("a call under a killed upstream: ok=%v error=%q", a.OK, a.Error)
	}

	// Restarted: it no longer knows the session; the client is told to
	// start a new one, and the new one works.
	tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{Port: port, Log: logFile})
	a = call(c, "a", "lookup_order", map[string]any{"order_id": "o"})
	if a.OK || !strings.Contains(a.Error, "no longer knows this session") {
		t.Errorf("a call on a session the restarted upstream lost: ok=%v error=%q", a.OK, a.Error)
	}
	c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "a"})
	decodeResult(t, call(c, "b", "lookup_order", map[string]any{"order_id": "o"}))
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// post sends one raw JSON-RPC POST to the gateway, as an identified
// caller (Authorization: Bearer raw) unless hdr says otherwise.
func post(t *testing.T, url, session, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer raw")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func TestGateway_SessionRules(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, append([]string{"--store", "memory", "--"}, stdioServer(t)...)...)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

	resp, body := post(t, gw.URL, "", list)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "no Mcp-Session-Id") {
		t.Errorf("no session: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, gw.URL, "00112233445566778899aabbccddeeff", list)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a session the gateway never issued: %d %s, want 404", resp.StatusCode, body)
	}
	resp, body = post(t, gw.URL, "", "["+initBody+"]")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "batches are not supported") {
		t.Errorf("a batch: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, gw.URL, "", `{"jsonrpc":"2.0","id":1,`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "-32700") {
		t.Errorf("malformed JSON: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, gw.URL, "", initBody, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Origin: %d %s, want 403", resp.StatusCode, body)
	}

	resp, body = post(t, gw.URL, "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || len(sid) != 32 {
		t.Fatalf("initialize: %d %q %s", resp.StatusCode, sid, body)
	}
	resp, _ = post(t, gw.URL, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a notification: %d, want 202", resp.StatusCode)
	}
	resp, body = post(t, gw.URL, sid, list)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"id":2`) || !strings.Contains(body, "issue_refund") {
		t.Errorf("tools/list on the session: %d %s", resp.StatusCode, body)
	}
	// String and number IDs come back as they were sent.
	resp, body = post(t, gw.URL, sid, `{"jsonrpc":"2.0","id":"req-9","method":"ping"}`)
	if !strings.Contains(body, `"id":"req-9"`) {
		t.Errorf("ping with a string ID: %d %s", resp.StatusCode, body)
	}

	// The session is bound to its initialize's caller: a request with
	// another credential, or none, is answered as for an unknown session
	// (but for a credential-less DELETE, below).
	for _, auth := range []string{"Bearer other", ""} {
		if resp, body = post(t, gw.URL, sid, list, "Authorization", auth); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "issue_refund") {
			t.Errorf("tools/list on the session with Authorization %q: %d %s, want 404", auth, resp.StatusCode, body)
		}
	}
	// A DELETE with another credential is refused; one without any
	// credential ends the session (mcp-go's client sends its closing
	// DELETE without its headers).
	for _, auth := range []string{"Bearer other", ""} {
		req, _ := http.NewRequest(http.MethodDelete, gw.URL, nil)
		req.Header.Set("Mcp-Session-Id", sid)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		dresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		dresp.Body.Close()
		if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[auth == ""]; dresp.StatusCode != want {
			t.Errorf("DELETE with Authorization %q: %d, want %d", auth, dresp.StatusCode, want)
		}
	}
	resp, body = post(t, gw.URL, sid, list)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a deleted session: %d %s, want 404", resp.StatusCode, body)
	}
}

// TestGateway_ResumesAnUpstreamStreamClosedMidCall: a server that closes a
// long call's SSE stream on purpose (MCP 2025-11-25's polling pattern) has
// it resumed by the gateway with Last-Event-ID; the client sees one
// uninterrupted answer, with every progress notification.
func TestGateway_ResumesAnUpstreamStreamClosedMidCall(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{Resumable: true})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "a"})
	a := c.Do(map[string]any{"op": "call", "conn": "a", "tool": "poll_export", "progress": true, "args": map[string]any{"name": "q4"}})
	r := decodeResult(t, a)
	execs := tsfixture.Executions(t, srv.Log)
	if len(execs) != 1 || r.StructuredContent["export_id"] != execs[0].ID {
		t.Fatalf("executions %+v, result %+v", execs, r)
	}
	if len(a.Progress) != 2 {
		t.Errorf("progress across the resumed stream: %+v, want 2 notifications", a.Progress)
	}
}

// TestGateway_StatelessUpstream: an upstream without sessions still gets
// the gateway's own sessions in front of it.
func TestGateway_StatelessUpstream(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{Stateless: true})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "a"})
	sid := c.MustDo(map[string]any{"op": "session", "conn": "a"})
	var id string
	if err := json.Unmarshal(sid.Result, &id); err != nil || len(id) != 32 {
		t.Errorf("the client holds session %s (%v), want the gateway's 32-hex ID", sid.Result, err)
	}
	a := c.Do(map[string]any{"op": "call", "conn": "a", "tool": "export_report", "progress": true,
		"args": map[string]any{"name": "q3", "steps": 2, "step_ms": 20}})
	decodeResult(t, a)
	if len(a.Progress) != 2 {
		t.Errorf("progress: %+v", a.Progress)
	}
	if n := len(tsfixture.Executions(t, srv.Log)); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
}

// TestGateway_StdioServe_UpstreamExitEndsTheGateway: on --stdio, when the
// server process dies, the pending call gets an answer that says so and
// the gateway exits, as the server itself would have.
func TestGateway_StdioServe_UpstreamExitEndsTheGateway(t *testing.T) {
	t.Parallel()
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "s", "command": os.Args[0],
		"args": append([]string{"gateway", "--stdio", "--store", "memory", "--"}, stdioServer(t)...),
		"env":  map[string]string{"IDEMKIT_TEST_EXEC": "1"}})
	a := call(c, "s", "crash_server", map[string]any{"delay_ms": 20})
	if a.OK || !strings.Contains(a.Error, "went away before answering") {
		t.Errorf("a call whose server died: ok=%v error=%q", a.OK, a.Error)
	}
	a = call(c, "s", "lookup_order", map[string]any{"order_id": "o"})
	if a.OK {
		t.Errorf("a call after the server died succeeded: %s", a.Result)
	}
}
