package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/clip"
)

// TestGateway_AuthorizationWithoutACredentialIsNoSubject: an Authorization
// value that carries no credential (an unset token in a client's config
// sends "Bearer ", which a Go server reads as "Bearer"; a scheme alone;
// white space) names no one. Two unrelated clients sending it never share a
// scope: each protected call is refused as unscoped, as without the
// header, and nothing runs.
func TestGateway_AuthorizationWithoutACredentialIsNoSubject(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t)})
	for _, v := range []string{"", "   ", "Bearer ", "Bearer", "bearer \t", "BEARER", "Basic", "Basic ", "Token", "DPoP \t "} {
		for client := range 2 {
			c := newRawClient(t, url, http.Header{"Authorization": {v}})
			c.mustInitialize()
			r := c.call("issue_refund", map[string]any{"order_id": "o-1", "amount_cents": 5}).result(t)
			if refusalOf(r) != "unscoped" || r["isError"] != true || replayed(r) {
				t.Errorf("Authorization %q, client %d: %v, want an unscoped refusal", v, client, r)
			}
		}
	}
	if n := up.count("issue_refund"); n != 0 {
		t.Fatalf("the upstream ran %d refunds for callers that sent no credential", n)
	}
}

// TestGateway_AuthorizationSchemes: a credential under any scheme is a
// subject, hashed with its scheme (case-insensitive) in front: the same
// credential under the same scheme is one caller, under another scheme or
// with other bytes another.
func TestGateway_AuthorizationSchemes(t *testing.T) {
	up := newUpstream(t)
	tel := newTelemetryPair()
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: tel.config()})
	args := map[string]any{"order_id": "o-1", "amount_cents": 5}
	for i, step := range []struct {
		auth   string
		runs   int64 // the upstream's runs after the call
		replay bool
	}{
		{"Basic YWxpY2U6cHc=", 1, false},
		{"basic   YWxpY2U6cHc=", 1, true}, // the scheme's case and the spaces after it do not count
		{"Basic Ym9iOnB3", 2, false},      // another credential
		{"Bearer YWxpY2U6cHc=", 3, false}, // the same bytes under another scheme
		{"Token abc", 4, false},           // a scheme the gateway does not know
		{"token abc", 4, true},
		{"Token ABC", 5, false}, // the credential's case counts
	} {
		c := newRawClient(t, url, http.Header{"Authorization": {step.auth}})
		c.mustInitialize()
		r := c.call("issue_refund", args).result(t)
		if refusalOf(r) != "" || replayed(r) != step.replay || up.count("issue_refund") != step.runs {
			t.Errorf("step %d, Authorization %q: replayed %v, %d runs, %v; want replayed %v, %d runs",
				i, step.auth, replayed(r), up.count("issue_refund"), r, step.replay, step.runs)
		}
	}
	sum := sha256.Sum256([]byte("YWxpY2U6cHc="))
	want := clip.Hash("basic:" + hex.EncodeToString(sum[:]))
	if spans := tel.toolSpans("issue_refund"); len(spans) == 0 || spans[0]["idemkit.subject.hash"] != want {
		t.Errorf("the Basic caller's span: %v, want idemkit.subject.hash %s", spans, want)
	}
}

// TestGateway_RepeatedSubjectHeaderIsRefused: a request that carries the
// subject header twice (a proxy that appends the identity it
// authenticated instead of replacing the client's) is refused with HTTP
// 400 before anything is forwarded: the client's own first value never
// impersonates another caller.
func TestGateway_RepeatedSubjectHeaderIsRefused(t *testing.T) {
	for _, header := range []string{"X-User", "Authorization"} {
		t.Run(header, func(t *testing.T) {
			up := newUpstream(t)
			cfg := Config{Guard: newGuard(t)}
			alice, mallory := "Bearer alice", "Bearer mallory"
			if header != "Authorization" {
				cfg.SubjectHeader = header
				alice, mallory = "alice", "mallory"
			}
			_, url := newGatewayServer(t, up.URL, cfg)
			args := map[string]any{"order_id": "o-1", "amount_cents": 5}
			a := newRawClient(t, url, http.Header{header: {alice}})
			a.mustInitialize()
			if r := a.call("issue_refund", args).result(t); refusalOf(r) != "" || up.count("issue_refund") != 1 {
				t.Fatalf("alice's refund: %v", r)
			}

			// Mallory names alice first; the proxy appends mallory.
			m := newRawClient(t, url, http.Header{header: {alice, mallory}})
			if got := m.initialize(); got.status != http.StatusBadRequest || !hasText(got.body, header+" header appears 2 times") {
				t.Errorf("initialize with two %s headers: %d %s, want 400 naming the header", header, got.status, got.body)
			}
			m.hdr = http.Header{header: {mallory}}
			m.mustInitialize()
			m.hdr = http.Header{header: {alice, mallory}}
			got := m.call("issue_refund", args)
			if got.status != http.StatusBadRequest || got.msg["result"] != nil || !hasText(got.body, "Nothing was done") {
				t.Errorf("a call with two %s headers: %d %s, want 400 and no result", header, got.status, got.body)
			}
			got = m.call("issue_refund", map[string]any{"order_id": "o-2", "amount_cents": 5})
			if got.status != http.StatusBadRequest || up.count("issue_refund") != 1 {
				t.Errorf("a new call with two %s headers: %d %s, %d runs; want 400 and nothing run", header, got.status, got.body, up.count("issue_refund"))
			}
			if got := m.send(http.MethodDelete, ""); got.status != http.StatusBadRequest {
				t.Errorf("DELETE with two %s headers: %d, want 400", header, got.status)
			}
		})
	}
}

func hasText(b []byte, s string) bool { return strings.Contains(string(b), s) }

// envelopeDecoys are tools/call params with a member of the envelope
// spelled twice: a Go server reads the case variant (the last one wins), a
// server in JavaScript or Python the exact name, so the gateway would have
// hashed other arguments (or another tool) than the upstream runs.
var envelopeDecoys = map[string]string{
	"Arguments":       `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"Arguments":{"order_id":"o-2","amount_cents":900}}`,
	"ARGUMENTS first": `{"name":"issue_refund","ARGUMENTS":{"order_id":"o-2","amount_cents":900},"arguments":{"order_id":"o-1","amount_cents":5}}`,
	"only Arguments":  `{"name":"issue_refund","Arguments":{"order_id":"o-2","amount_cents":900}}`,
	"Name":            `{"name":"lookup","Name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5}}`,
	"_META":           `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"_meta":{"progressToken":1},"_META":{"io.idemkit/idempotency_key":"k-1"}}`,
	"arguments twice": `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"arguments":{"order_id":"o-2","amount_cents":900}}`,
	"long s (U+017F)": `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"argument\u017f":{"order_id":"o-2","amount_cents":900}}`,
	"escaped Name":    `{"name":"issue_refund","\u004eame":"lookup","arguments":{"order_id":"o-1","amount_cents":5}}`,
	"_Meta null":      `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5},"_meta":{},"_Meta":null}`,
}

// checkEnvelopeRefusal checks the answer to a decoy: a JSON-RPC invalid
// params error that says what to change.
func checkEnvelopeRefusal(t *testing.T, what string, msg map[string]any) {
	t.Helper()
	e, _ := msg["error"].(map[string]any)
	text, _ := e["message"].(string)
	if msg["result"] != nil || e["code"] != float64(codeInvalidParams) || !strings.Contains(text, "nothing was run") || !strings.Contains(text, "spelled exactly") {
		t.Errorf("%s: %v, want a -32602 error saying nothing was run", what, msg)
	}
}

// TestGateway_EnvelopeIsReadByExactName: tools/call params with a case
// variant (or a second copy) of name, arguments or _meta are refused with
// a JSON-RPC error, over HTTP and over stdio; nothing is claimed or
// forwarded. The same session's proper call then runs once.
func TestGateway_EnvelopeIsReadByExactName(t *testing.T) {
	proper := `{"name":"issue_refund","arguments":{"order_id":"o-1","amount_cents":5}}`
	t.Run("http", func(t *testing.T) {
		up := newUpstream(t)
		_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t)})
		c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
		c.mustInitialize()
		for what, params := range envelopeDecoys {
			a := c.callParams(params)
			if a.status != http.StatusOK {
				t.Errorf("%s: HTTP %d %s", what, a.status, a.body)
			}
			checkEnvelopeRefusal(t, what, a.msg)
		}
		if n := up.count("issue_refund") + up.count("lookup"); n != 0 {
			t.Fatalf("the upstream ran %d calls of refused params", n)
		}
		for range 2 {
			c.callParams(proper).result(t)
		}
		if n := up.count("issue_refund"); n != 1 {
			t.Errorf("a proper call and its retry ran %d times, want 1", n)
		}
	})
	t.Run("stdio", func(t *testing.T) {
		up := newUpstream(t)
		u, err := NewHTTPUpstream(up.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(Config{Upstream: u, Guard: newGuard(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close(context.Background())
		c := newStdioClient(t, g)
		for what, params := range envelopeDecoys {
			checkEnvelopeRefusal(t, what, c.callParams(params))
		}
		if n := up.count("issue_refund") + up.count("lookup"); n != 0 {
			t.Fatalf("the upstream ran %d calls of refused params", n)
		}
		for range 2 {
			if m := c.callParams(proper); m["result"] == nil {
				t.Fatalf("a proper call: %v", m)
			}
		}
		if n := up.count("issue_refund"); n != 1 {
			t.Errorf("a proper call and its retry ran %d times, want 1", n)
		}
	})
}

// TestGateway_HonestHeaders: the Streamable HTTP transport's header rules,
// answered as the SDKs' servers answer them: a body that is not
// application/json gets 415, an Accept without both JSON and SSE 406 (a
// GET's without SSE 406), an MCP-Protocol-Version the gateway does not know
// 400. None of them starts a session or reaches the upstream.
func TestGateway_HonestHeaders(t *testing.T) {
	up := newUpstream(t)
	g, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t)})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	for _, tc := range []struct {
		hdr    []string
		status int
		text   string
	}{
		{[]string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, "application/json"},
		{[]string{"Content-Type", ""}, http.StatusUnsupportedMediaType, "application/json"},
		{[]string{"Content-Type", "application/jsonx"}, http.StatusUnsupportedMediaType, "application/json"},
		{[]string{"Accept", ""}, http.StatusNotAcceptable, "text/event-stream"},
		{[]string{"Accept", "application/json"}, http.StatusNotAcceptable, "text/event-stream"},
		{[]string{"Accept", "text/event-stream"}, http.StatusNotAcceptable, "application/json"},
		{[]string{"Accept", "text/html"}, http.StatusNotAcceptable, "text/event-stream"},
		{[]string{"Mcp-Protocol-Version", "1999-01-01"}, http.StatusBadRequest, "unsupported MCP-Protocol-Version"},
		{[]string{"Mcp-Protocol-Version", "latest"}, http.StatusBadRequest, "unsupported MCP-Protocol-Version"},
	} {
		a := c.post(rawInitialize, tc.hdr...)
		if a.status != tc.status || a.header.Get("Mcp-Session-Id") != "" || !hasText(a.body, tc.text) {
			t.Errorf("initialize with %q: %d %s, want %d", tc.hdr, a.status, a.body, tc.status)
		}
	}
	g.mu.Lock()
	n := len(g.sessions)
	g.mu.Unlock()
	if n != 0 {
		t.Errorf("refused initializes left %d sessions", n)
	}
	// What MCP clients send is accepted.
	for _, tc := range [][]string{
		{"Content-Type", "application/json; charset=utf-8"},
		{"Accept", "*/*"},
		{"Accept", "application/json;q=0.9, text/event-stream;q=0.8"},
		{"Accept", "application/*, text/*"},
		{"Mcp-Protocol-Version", "2025-03-26"},
	} {
		if a := c.post(rawInitialize, tc...); a.status != http.StatusOK {
			t.Errorf("initialize with %q: %d %s, want 200", tc, a.status, a.body)
		}
	}

	c.mustInitialize()
	args := map[string]any{"order_id": "o-1", "amount_cents": 5}
	for _, tc := range []struct {
		hdr    []string
		status int
	}{
		{[]string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{[]string{"Accept", "application/json"}, http.StatusNotAcceptable},
		{[]string{"Mcp-Protocol-Version", "2099-99-99"}, http.StatusBadRequest},
	} {
		if a := c.call("issue_refund", args, tc.hdr...); a.status != tc.status || a.msg["result"] != nil {
			t.Errorf("tools/call with %q: %d %s, want %d", tc.hdr, a.status, a.body, tc.status)
		}
	}
	if n := up.count("issue_refund"); n != 0 {
		t.Fatalf("refused calls ran %d times", n)
	}
	if a := c.call("issue_refund", args, "Mcp-Protocol-Version", "2025-06-18"); a.status != http.StatusOK || refusalOf(a.result(t)) != "" {
		t.Errorf("a call with the negotiated version: %d %s", a.status, a.body)
	}
	if a := c.send(http.MethodGet, "", "Accept", "application/json"); a.status != http.StatusNotAcceptable {
		t.Errorf("GET without text/event-stream: %d %s, want 406", a.status, a.body)
	}
	if a := c.send(http.MethodDelete, "", "Mcp-Protocol-Version", "0"); a.status != http.StatusBadRequest {
		t.Errorf("DELETE with an unknown version: %d %s, want 400", a.status, a.body)
	}
	if a := c.send(http.MethodDelete, ""); a.status != http.StatusOK {
		t.Errorf("DELETE: %d %s", a.status, a.body)
	}
}

// TestGateway_ResultOverTheLimitIsRecordedNotRerun: an upstream answer
// over the gateway's 16 MiB message limit is neither passed on nor kept,
// but the call ran: the first caller is told so (response_not_kept, "do
// not call it again"), and a retry is answered response_not_kept from the
// record, without running the write again.
func TestGateway_ResultOverTheLimitIsRecordedNotRerun(t *testing.T) {
	up := newUpstream(t)
	tel := newTelemetryPair()
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: tel.config()})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	args := map[string]any{"bytes": 17 << 20}
	first := c.call("big_report", args).result(t)
	if refusalOf(first) != "response_not_kept" || first["isError"] != true || !strings.Contains(resultText(first), "ran") ||
		!strings.Contains(resultText(first), "Do not call big_report again") {
		t.Errorf("the first caller: %.300v, want a readable response_not_kept answer", first)
	}
	for range 2 {
		r := c.call("big_report", args).result(t)
		if refusalOf(r) != "response_not_kept" || !strings.Contains(resultText(r), "Do not call it again") {
			t.Errorf("a retry: %.300v, want response_not_kept", r)
		}
	}
	if n := up.count("big_report"); n != 1 {
		t.Fatalf("the write ran %d times, want once", n)
	}
	spans := tel.toolSpans("big_report")
	if len(spans) != 3 || spans[0]["idemkit.outcome"] != "executed" || spans[0]["idemkit.finish.error"] != "response_too_large" ||
		spans[1]["idemkit.refusal.reason"] != "response_not_kept" {
		t.Errorf("spans: %v", spans)
	}

	// An unprotected tool's answer over the limit: an error that says the
	// call ran and its answer could not be passed on.
	a := c.call("big_lookup", args)
	e := a.rpcError()
	if msg, _ := e["message"].(string); a.status != http.StatusOK || !strings.Contains(msg, "larger than") || !strings.Contains(msg, "ran") {
		t.Errorf("an unprotected tool's answer over the limit: %d %.300s", a.status, a.body)
	}
}

// TestGateway_MaxMessageBytes: the limit is configurable; a client's
// message over it gets 413, and over stdio a protected call's answer over
// it is recorded as done, not run again.
func TestGateway_MaxMessageBytes(t *testing.T) {
	const limit = 64 << 10
	up := newUpstream(t)
	guard, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{MaxResponseBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	_, url := newGatewayServer(t, up.URL, Config{Guard: guard, MaxMessageBytes: limit})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	a := c.call("issue_refund", map[string]any{"order_id": strings.Repeat("o", limit), "amount_cents": 5})
	if a.status != http.StatusRequestEntityTooLarge || !hasText(a.body, "at most 65536 bytes") || up.count("issue_refund") != 0 {
		t.Errorf("a message over the limit: %d %.300s", a.status, a.body)
	}
	if r := c.call("big_report", map[string]any{"bytes": limit - 1000}).result(t); refusalOf(r) != "" || len(resultText(r)) != limit-1000 {
		t.Errorf("an answer under the limit: %.300v", r)
	}

	// An answer the upstream streams as SSE (mcp-go does once a
	// notification comes first) is passed on whole; the Guard keeps none
	// over its limit, and the retry is told so.
	sse := `{"name":"big_report","arguments":{"bytes":70000},"_meta":{"progressToken":"p"}}`
	if r := c.callParams(sse).result(t); len(resultText(r)) != 70000 {
		t.Errorf("an SSE answer over the limit: %.300v", r)
	}
	if r := c.callParams(sse).result(t); refusalOf(r) != "response_not_kept" || up.count("big_report") != 2 {
		t.Errorf("the retry of an SSE answer over the limit: %.300v, %d runs", r, up.count("big_report"))
	}

	u, err := NewHTTPUpstream(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstream: u, Guard: guard, MaxMessageBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	s := newStdioClient(t, g)
	params := `{"name":"big_report","arguments":{"bytes":100000}}`
	for i := range 3 {
		m := s.callParams(params)
		r, _ := m["result"].(map[string]any)
		if refusalOf(r) != "response_not_kept" || (i == 0 && !strings.Contains(resultText(r), "The big_report call ran")) {
			t.Errorf("call %d over stdio: %.300v", i, m)
		}
	}
	if n := up.count("big_report"); n != 3 {
		t.Errorf("big_report ran %d times, want 3 (under the limit, over it as SSE, over it as JSON)", n)
	}
}

// TestGateway_StdioUpstream_NoProcessForAnUnidentifiedCaller: with a
// subject header configured, an initialize without a subject (no header,
// or one without a credential) starts no upstream process: it gets 401
// with a challenge and a body that says what to send.
func TestGateway_StdioUpstream_NoProcessForAnUnidentifiedCaller(t *testing.T) {
	g, url, alive := newStdioGatewayServer(t, Config{Guard: newGuard(t)})
	for _, hdr := range []http.Header{nil, {"Authorization": {"Bearer "}}, {"Authorization": {"Basic"}}} {
		for range 5 {
			a := newRawClient(t, url, hdr).initialize()
			if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" || a.header.Get("Mcp-Session-Id") != "" ||
				!hasText(a.body, "Nothing was started") {
				t.Fatalf("an unidentified initialize (%v): %d %v %s", hdr, a.status, a.header, a.body)
			}
		}
	}
	g.mu.Lock()
	open := g.upstreams
	g.mu.Unlock()
	if n := alive(); n != 0 || open != 0 {
		t.Fatalf("%d upstream processes (%d counted) for unidentified callers, want none", n, open)
	}
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	if r := c.call("issue_refund", map[string]any{"order_id": "o-1"}).result(t); !strings.HasPrefix(resultText(r), "refund issued for o-1") {
		t.Errorf("an identified caller's call: %v", r)
	}
	if n := alive(); n != 1 {
		t.Errorf("%d upstream processes for one identified session, want 1", n)
	}
}

// TestGateway_UpstreamCaps: upstream processes are capped per subject
// (429) and in total (503), with answers that say what to do; nothing
// starts beyond a cap, and a slot comes back when a session ends.
func TestGateway_UpstreamCaps(t *testing.T) {
	_, url, alive := newStdioGatewayServer(t, Config{Guard: newGuard(t), MaxUpstreams: 3, MaxUpstreamsPerSubject: 2})
	client := func(tok string) *rawClient {
		return newRawClient(t, url, http.Header{"Authorization": {"Bearer " + tok}})
	}
	a1, a2, b1 := client("a"), client("a"), client("b")
	a1.mustInitialize()
	a2.mustInitialize()
	if got := client("a").initialize(); got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") == "" ||
		!hasText(got.body, "--max-upstreams-per-subject 2") || !hasText(got.body, "DELETE") {
		t.Errorf("a subject's third session: %d %s, want 429", got.status, got.body)
	}
	b1.mustInitialize()
	if got := client("c").initialize(); got.status != http.StatusServiceUnavailable || !hasText(got.body, "--max-upstreams 3; each is a server process") {
		t.Errorf("a session over the total: %d %s, want 503", got.status, got.body)
	}
	if n := alive(); n != 3 {
		t.Errorf("%d upstream processes, want 3 (the caps)", n)
	}
	if got := a1.send(http.MethodDelete, ""); got.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", got.status, got.body)
	}
	client("c").mustInitialize()
	if !eventually(func() bool { return alive() == 3 }) {
		t.Errorf("%d upstream processes after one ended and another began, want 3", alive())
	}
}

// TestGateway_IdleSessionsAreReaped: a session nobody uses (the TypeScript
// SDK's Client.close() sends no DELETE) is closed after the idle timeout,
// and its upstream process ends; its next request gets 404.
func TestGateway_IdleSessionsAreReaped(t *testing.T) {
	g, url, alive := newStdioGatewayServer(t, Config{Guard: newGuard(t), SessionIdleTimeout: 50 * time.Millisecond})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	if n := alive(); n != 1 {
		t.Fatalf("%d upstream processes, want 1", n)
	}
	if !eventually(func() bool { return alive() == 0 }) {
		t.Fatalf("the idle session's upstream process is still alive")
	}
	slots := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.upstreams
	}
	// The slot comes back once the gateway has reaped the process.
	if !eventually(func() bool { return slots() == 0 }) {
		t.Errorf("%d upstream slots still taken", slots())
	}
	if a := c.call("issue_refund", map[string]any{"order_id": "o-1"}); a.status != http.StatusNotFound {
		t.Errorf("a request on a reaped session: %d %s, want 404", a.status, a.body)
	}
}

// TestGateway_SlowBodyIsCutOff: a client that sends its body slower than
// the read timeout gets 408 and its connection closed, instead of holding
// the connection for as long as it likes.
func TestGateway_SlowBodyIsCutOff(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), ReadTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Content-Length: 1000\r\n\r\n{\"jsonrpc\":"); err != nil {
		t.Fatal(err)
	}
	// The test's own bound, far above the timeout: no claim on timing.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "--read-timeout") {
		t.Errorf("a stalled body: %d %s, want 408", resp.StatusCode, body)
	}
}

// authUpstream is a real mcp-go server behind bearer-token authentication
// that can revoke a token: a request with a token it does not accept gets
// 401 and an OAuth challenge, one with a token it forbids 403.
type authUpstream struct {
	*upstreamServer
	valid     sync.Map // token -> true
	forbidden sync.Map // token -> true
}

const authChallenge = `Bearer resource_metadata="http://upstream.example/.well-known/oauth-protected-resource", error="invalid_token"`

func newAuthUpstream(t *testing.T, tokens ...string) *authUpstream {
	t.Helper()
	inner := newUpstream(t)
	a := &authUpstream{upstreamServer: &upstreamServer{}}
	for _, tok := range tokens {
		a.valid.Store(tok, true)
	}
	target, err := neturl.Parse(inner.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, ok := a.forbidden.Load(tok); ok {
			http.Error(w, "forbidden: this token may not use this server", http.StatusForbidden)
			return
		}
		if _, ok := a.valid.Load(tok); !ok {
			w.Header().Set("WWW-Authenticate", authChallenge)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_token"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	a.upstreamServer = inner
	a.URL = hs.URL + "/mcp"
	return a
}

// TestGateway_UpstreamAuthIsPassedThrough: the upstream's 401 (with its
// WWW-Authenticate challenge, which MCP's OAuth discovery reads) and 403
// reach the client as they are, on initialize, on a call and on the GET
// stream, instead of HTTP 200 with a JSON-RPC error.
func TestGateway_UpstreamAuthIsPassedThrough(t *testing.T) {
	up := newAuthUpstream(t, "tok", "soon-forbidden")
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t)})

	a := newRawClient(t, url, http.Header{"Authorization": {"Bearer nope"}}).initialize()
	if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != authChallenge || string(a.body) != `{"error":"invalid_token"}` ||
		a.header.Get("Mcp-Session-Id") != "" {
		t.Errorf("initialize with a token the upstream rejects: %d %v %s, want its 401 and challenge", a.status, a.header, a.body)
	}
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer soon-forbidden"}})
	c.mustInitialize()
	up.forbidden.Store("soon-forbidden", true)
	if a := c.call("lookup", map[string]any{}); a.status != http.StatusForbidden || !hasText(a.body, "may not use this server") {
		t.Errorf("a call the upstream forbids: %d %s, want its 403", a.status, a.body)
	}
	if a := c.send(http.MethodGet, ""); a.status != http.StatusForbidden {
		t.Errorf("GET the upstream forbids: %d %s, want 403", a.status, a.body)
	}
	if a := c.post(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`); a.status != http.StatusForbidden {
		t.Errorf("a notification the upstream forbids: %d %s, want 403", a.status, a.body)
	}
	if n := up.count("lookup"); n != 0 {
		t.Errorf("a forbidden call ran %d times", n)
	}
}

// TestGateway_RevokedTokenGetsNoReplay: a replay is served only to a
// caller the upstream accepts now. After the upstream revokes a token, a
// retry of that token's completed call gets the upstream's 401, not the
// stored result, and nothing runs.
func TestGateway_RevokedTokenGetsNoReplay(t *testing.T) {
	up := newAuthUpstream(t, "tok")
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t)})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}})
	c.mustInitialize()
	args := map[string]any{"order_id": "o-1", "amount_cents": 5}
	if r := c.call("issue_refund", args).result(t); resultText(r) != "refund issued for o-1" {
		t.Fatalf("the first call: %v", r)
	}
	if r := c.call("issue_refund", args).result(t); !replayed(r) {
		t.Fatalf("a retry by an accepted caller: %v, want a replay", r)
	}
	up.valid.Delete("tok")
	// The same token on the same session and on a new one (initialize is
	// the upstream's to refuse).
	for range 2 {
		a := c.call("issue_refund", args)
		if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != authChallenge || hasText(a.body, "refund issued") {
			t.Errorf("a retry with a revoked token: %d %v %s, want the upstream's 401 and no result", a.status, a.header, a.body)
		}
	}
	if a := newRawClient(t, url, http.Header{"Authorization": {"Bearer tok"}}).initialize(); a.status != http.StatusUnauthorized {
		t.Errorf("a new session with a revoked token: %d %s", a.status, a.body)
	}
	if n := up.count("issue_refund"); n != 1 {
		t.Errorf("the refund ran %d times, want 1", n)
	}
	// The token is accepted again: so is the replay.
	up.valid.Store("tok", true)
	if r := c.call("issue_refund", args).result(t); !replayed(r) || up.count("issue_refund") != 1 {
		t.Errorf("a retry once the token is accepted again: %v, %d runs", r, up.count("issue_refund"))
	}
}
