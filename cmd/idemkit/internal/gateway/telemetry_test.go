package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// spanText is everything a span exports as text: its name, status,
// attributes and events.
func spanText(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s status=%q\n", s.Name(), s.Status().Description)
	for _, kv := range s.Attributes() {
		fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value.String())
	}
	for _, ev := range s.Events() {
		fmt.Fprintf(&b, "event %s\n", ev.Name)
		for _, kv := range ev.Attributes {
			fmt.Fprintf(&b, "  %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	return b.String()
}

// An upstream answer the gateway cannot read (JSON that is not JSON-RPC,
// or a body of another content type) is described by its size: none of
// its bytes, which may be a tool's result or echo the arguments, reach the
// gateway's log, the span's status or its exception event.
func TestGateway_UnreadableUpstreamAnswerExportsNoPayloadBytes(t *testing.T) {
	const secret = "SECRET-card-4242-4242-ord_1012"
	up := newUpstream(t)
	target, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	answers := map[string]struct{ contentType, body string }{
		"json_not_rpc": {"application/json", `{"refund":{"card":"` + secret + `","amount_cents":250}}`},
		"plain_text":   {"text/plain", "refund issued with " + secret},
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for tool, a := range answers {
			if bytes.Contains(body, []byte(`"name":"`+tool+`"`)) {
				w.Header().Set("Content-Type", a.contentType)
				_, _ = io.WriteString(w, a.body)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(broken.Close)

	tel := newTelemetryPair()
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, gw := newGatewayServer(t, broken.URL+target.Path, Config{Guard: newGuard(t), Instrumentation: tel.config(), Logger: log})
	c := mcpClient(t, gw, "tok")
	for tool, a := range answers {
		var req mcp.CallToolRequest
		req.Params.Name = tool
		req.Params.Arguments = map[string]any{"order_id": "ord_1012"}
		_, err := c.CallTool(context.Background(), req)
		if err == nil {
			t.Fatalf("%s: the client got a result from an answer that is not JSON-RPC", tool)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the client's error repeats the upstream's bytes: %v", tool, err)
		}
		size := fmt.Sprintf("%d bytes", len(a.body))
		if !strings.Contains(err.Error(), size) {
			t.Errorf("%s: the error %q does not give the answer's size (%s)", tool, err, size)
		}
	}
	var exported strings.Builder
	for _, s := range tel.spans.Ended() {
		exported.WriteString(spanText(s))
	}
	if strings.Contains(exported.String(), secret) {
		t.Errorf("the spans carry the upstream's answer bytes:\n%s", exported.String())
	}
	if !strings.Contains(exported.String(), "not a JSON-RPC response (") {
		t.Errorf("the spans do not say the answer was not JSON-RPC:\n%s", exported.String())
	}
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "request failed") {
		t.Errorf("the gateway's log (want the failures, without the answer's bytes):\n%s", logs.String())
	}
}

// With a hash key, two gateway replicas export the same keyed hashes for
// the same call, none of them the plain SHA-256; the gateway's session ID,
// which grants its session, is exported only as its hash.
func TestGateway_HashKeyKeysEveryExportedHash(t *testing.T) {
	key := []byte("gateway-replicas-share-this-key!")
	up := newUpstream(t)
	store := &idemkit.MemoryStore{}
	replica := func(hashKey []byte) (map[string]any, string) {
		tel := newTelemetryPair()
		cfg := tel.config()
		cfg.HashKey = hashKey
		g, err := idemkit.NewGuard(store, &idemkit.Config{HashKey: hashKey})
		if err != nil {
			t.Fatal(err)
		}
		_, gw := newGatewayServer(t, up.URL, Config{Guard: g, Instrumentation: cfg})
		c := mcpClient(t, gw, "tok")
		callTool(t, c, "issue_refund", map[string]any{"order_id": fmt.Sprintf("ord_%d", len(hashKey))})
		spans := tel.toolSpans("issue_refund")
		if len(spans) != 1 {
			t.Fatalf("%d spans", len(spans))
		}
		return spans[0], c.GetSessionId()
	}
	a, sidA := replica(key)
	b, sidB := replica(key)
	plain, sidPlain := replica(nil)
	for _, name := range []string{"idemkit.args.hash", "idemkit.key.hash", "idemkit.subject.hash"} {
		if a[name] == nil || a[name] != b[name] {
			t.Errorf("%s: %v and %v on two replicas with one key", name, a[name], b[name])
		}
	}
	if a["idemkit.subject.hash"] == subjectHash("tok") || plain["idemkit.subject.hash"] != subjectHash("tok") {
		t.Errorf("subject hash keyed %v, plain %v (the plain SHA-256 is %s)", a["idemkit.subject.hash"], plain["idemkit.subject.hash"], subjectHash("tok"))
	}
	for sid, sp := range map[string]map[string]any{sidA: a, sidB: b, sidPlain: plain} {
		if sid == "" || sp["mcp.session.id"] == nil || sp["mcp.session.id"] == sid {
			t.Errorf("mcp.session.id %v for the session %q: want its hash", sp["mcp.session.id"], sid)
		}
	}
	if a["mcp.session.id"] == b["mcp.session.id"] {
		t.Errorf("two sessions, one mcp.session.id %v", a["mcp.session.id"])
	}
}

// A stdio upstream's line that is not JSON-RPC is logged by its size,
// never its bytes.
func TestStdioUpstream_UnreadableLineIsLoggedWithoutItsBytes(t *testing.T) {
	const secret = "SECRET-card-4242-4242-ord_1012"
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	u, err := NewStdioUpstream([]string{"sh", "-c", "printf 'refund issued with " + secret + "\\n'"}, nil, io.Discard, log)
	if err != nil {
		t.Fatal(err)
	}
	c, err := u.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	_ = c.Close(context.Background())
	want := fmt.Sprintf("bytes=%d", len("refund issued with "+secret+"\n"))
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "not a JSON-RPC message") || !strings.Contains(logs.String(), want) {
		t.Errorf("the log (want the line's size, %s, never its bytes):\n%s", want, logs.String())
	}
}
