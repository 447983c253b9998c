package adaptertest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// testSessionBinding: a session belongs to the subject that initialized it.
// Another subject's request naming it (a stolen session ID with the
// attacker's own valid token) gets 404, as for an unknown session, on
// tools/call (nothing runs), on the GET stream (not attached) and on
// DELETE (the session lives on); the victim's session keeps working.
func testSessionBinding(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	victim := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	sid := victim.SessionID()
	if sid == "" {
		t.Fatal("the victim has no session ID")
	}
	hijack := func(method, body string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var rd *strings.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequestWithContext(ctx, method, r.srv.URL(), nil)
		if rd != nil {
			req, _ = http.NewRequestWithContext(ctx, method, r.srv.URL(), rd)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		} else {
			req.Header.Set("Accept", "text/event-stream")
		}
		req.Header.Set("Mcp-Protocol-Version", LegacyProtocol)
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Authorization", "Bearer token-bob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && method == http.MethodGet {
			return resp.StatusCode, "(a stream)" // attached: do not wait on it
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	const callBody = `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"refund","arguments":{"order_id":"o-9","amount_cents":1}}}`
	for _, step := range []struct{ method, body string }{
		{http.MethodPost, callBody},
		{http.MethodGet, ""},
		{http.MethodDelete, ""},
	} {
		if code, body := hijack(step.method, step.body); code != http.StatusNotFound {
			t.Errorf("bob's %s on alice's session: %d %s, want 404", step.method, code, body)
		}
	}
	if runs.get() != 0 {
		t.Fatalf("the refund ran %d times for a caller on another's session", runs.get())
	}
	res := call(t, victim, "refund", map[string]any{"order_id": "o-9", "amount_cents": 1}, nil)
	if isError(res) || runs.get() != 1 || marker(res, sc.ReplayMetaKey) != nil {
		t.Errorf("alice's call after the attempts: %v, %d runs; want one first run", res, runs.get())
	}
}
