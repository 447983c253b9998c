package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
)

// rawPost sends one POST to the gateway with exactly the headers in h
// (none added) and returns the status and body.
func rawPost(t *testing.T, url string, h http.Header, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// mcpHeaders are an MCP client's headers, with Authorization when auth is
// not "".
func mcpHeaders(auth, session string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	if session != "" {
		h.Set("Mcp-Session-Id", session)
	}
	return h
}

// waitFor waits until the gateway's log has a line containing s, or 15s
// pass (what happens in another process: no claim on how long it takes).
func waitFor(gw *gatewayProc, s string) bool {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(gw.log.String(), s) {
			return true
		}
	}
	return false
}

// TestGateway_HostileRequests_TypeScriptStdioUpstream puts the attacks of
// issue 24 to the real command in front of the TypeScript SDK's server over
// stdio, which reads member names exactly: an unidentified initialize
// starts no process; envelope decoys, a doubled subject header and
// dishonest headers are refused and never reach the server; the memory
// store is swept.
func TestGateway_HostileRequests_TypeScriptStdioUpstream(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "executions.jsonl")
	gw := startGatewayEnv(t, []string{"FIXTURE_LOG=" + logFile}, append([]string{"--store", "memory", "--window", "1s", "--lease", "1s",
		"--sweep-interval", "100ms", "--log-level", "debug", "--"}, stdioServer(t)...)...)

	for _, auth := range []string{"", "Bearer ", "Bearer", "Basic"} {
		resp, body := rawPost(t, gw.URL, mcpHeaders(auth, ""), initBody)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(body, "Nothing was started") {
			t.Errorf("initialize with Authorization %q: %d %s, want 401", auth, resp.StatusCode, body)
		}
	}
	if strings.Contains(gw.log.String(), "upstream process started") {
		t.Fatalf("an unidentified initialize started an upstream process:\n%s", gw.log.String())
	}

	resp, body := rawPost(t, gw.URL, mcpHeaders("Bearer a", ""), initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	rawPost(t, gw.URL, mcpHeaders("Bearer a", sid), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := func(h http.Header, params string) (*http.Response, map[string]any) {
		t.Helper()
		resp, body := rawPost(t, gw.URL, h, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":`+params+`}`)
		var m map[string]any
		if i := strings.Index(body, "{"); i >= 0 {
			_ = json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(body[i:], "data: "))), &m)
		}
		return resp, m
	}
	for what, params := range map[string]string{
		"Arguments": `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"Arguments":{"order_id":"o-2","amount_cents":900}}`,
		"Name":      `{"name":"lookup_order","Name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5}}`,
		"_META":     `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"_META":{"io.idemkit/idempotency_key":"k"}}`,
	} {
		_, m := call(mcpHeaders("Bearer a", sid), params)
		e, _ := m["error"].(map[string]any)
		if e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["message"]), "nothing was run") {
			t.Errorf("a %s decoy: %v, want -32602", what, m)
		}
	}
	twice := mcpHeaders("Bearer a", sid)
	twice.Add("Authorization", "Bearer b")
	with := func(k, v string) http.Header {
		h := mcpHeaders("Bearer a", sid)
		h.Set(k, v)
		return h
	}
	for what, h := range map[string]http.Header{
		"text/plain": with("Content-Type", "text/plain"),
		"JSON only":  with("Accept", "application/json"),
		"a version":  with("Mcp-Protocol-Version", "2001-01-01"),
		"two tokens": twice,
	} {
		resp, m := call(h, `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5}}`)
		if resp.StatusCode/100 != 4 || m["result"] != nil {
			t.Errorf("%s: %d %v, want a 4xx", what, resp.StatusCode, m)
		}
	}
	if n := countExecutions(t, logFile, "issue_refund"); n != 0 {
		t.Fatalf("refused requests ran issue_refund %d times", n)
	}
	_, m := call(mcpHeaders("Bearer a", sid), `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5}}`)
	if execs := tsfixture.Executions(t, logFile); m["result"] == nil || len(execs) != 1 || execs[0].Args["order_id"] != "o-1" {
		t.Fatalf("a proper call: %v, executions %+v", m, execs)
	}
	// The call's record expires after its 1s window; the sweeper deletes it.
	if !waitFor(gw, "swept expired records") {
		t.Errorf("the memory store was never swept")
	}
}

// TestGateway_UpstreamLimits_TypeScriptClient: with the real TypeScript
// client, a caller's session beyond --max-upstreams-per-subject is refused
// with a readable error, and a session the client closed without a DELETE
// (Client.close() sends none) is reaped after --session-idle-timeout with
// its process, which frees the slot.
func TestGateway_UpstreamLimits_TypeScriptClient(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, append([]string{"--store", "memory", "--max-upstreams-per-subject", "1", "--session-idle-timeout", "1s",
		"--log-level", "debug", "--"}, stdioServer(t)...)...)
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "x"})
	decodeResult(t, call(c, "a", "lookup_order", map[string]any{"order_id": "o"}))
	a := c.Do(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "x"})
	if a.OK || !strings.Contains(a.Error, "Too Many Requests") || !strings.Contains(a.Error, "--max-upstreams-per-subject 1") {
		t.Fatalf("a second session of one caller: ok=%v %q, want the 429 answer", a.OK, a.Error)
	}
	// Another caller is not held back by the first one's cap.
	c.MustDo(map[string]any{"op": "connect", "conn": "other", "url": gw.URL, "token": "y"})
	c.MustDo(map[string]any{"op": "close", "conn": "other"})

	c.MustDo(map[string]any{"op": "close", "conn": "a"}) // no DELETE
	if !waitFor(gw, "closing an idle session") || !waitFor(gw, "upstream process ended") {
		t.Fatalf("the closed client's session was never reaped")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		a = c.Do(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "x"})
		if a.OK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !a.OK {
		t.Fatalf("a new session after the idle one was reaped: %s", a.Error)
	}
	decodeResult(t, call(c, "b", "lookup_order", map[string]any{"order_id": "o"}))
}

// TestGateway_SlowClientsAreCutOff: the command's --read-timeout bounds a
// request's headers (the connection is closed) and its body (408), so that
// slow clients cannot hold connections open.
func TestGateway_SlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, "--upstream", "http://127.0.0.1:1/mcp", "--store", "memory", "--read-timeout", "300ms")
	host := strings.TrimSuffix(strings.TrimPrefix(gw.URL, "http://"), "/mcp")
	for what, partial := range map[string]string{
		"headers": "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: applic",
		"body": "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
			"Content-Length: 500\r\n\r\n{\"jsonrpc\":",
	} {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, partial); err != nil {
			t.Fatal(err)
		}
		// The test's own bound, far above the timeout.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		switch {
		case what == "headers":
			if err == nil {
				t.Errorf("slow headers: %d, want the connection closed", resp.StatusCode)
			} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Errorf("slow headers held the connection: %v", err)
			}
		case err != nil:
			t.Errorf("slow body: %v, want 408", err)
		case resp.StatusCode != http.StatusRequestTimeout:
			t.Errorf("slow body: %d, want 408", resp.StatusCode)
		}
		conn.Close()
	}
}
