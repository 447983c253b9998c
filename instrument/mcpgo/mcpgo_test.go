package mcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mark3labs/mcp-go/tracing"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// rig is an instrumented mcp-go server with a span recorder and a log.
type rig struct {
	sr  *tracetest.SpanRecorder
	log *bytes.Buffer
	srv *server.MCPServer
}

func newRig(t *testing.T, before, after []server.ServerOption) *rig {
	t.Helper()
	return newRigWith(t, before, after)
}

// newRigWith is newRig with more instrumentation options.
func newRigWith(t *testing.T, before, after []server.ServerOption, extra ...instrument.Option) *rig {
	t.Helper()
	r := &rig{sr: tracetest.NewSpanRecorder(), log: &bytes.Buffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := append([]instrument.Option{instrument.WithTracerProvider(tp), instrument.WithLogger(slog.New(slog.NewTextHandler(r.log, nil)))}, extra...)
	opts := append(append(append([]server.ServerOption(nil), before...), ServerOptions(g, in...)...), after...)
	r.srv = server.NewMCPServer("test", "1", opts...)
	return r
}

func (r *rig) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(r.srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

func refundServer(r *rig, runs *int, mu *sync.Mutex) {
	r.srv.AddTool(mcp.NewTool("refund", mcp.WithString("order_id")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		*runs++
		mu.Unlock()
		return mcp.NewToolResultText("refunded"), nil
	})
}

func hasKey(tools []mcp.Tool, name string) bool {
	for _, tl := range tools {
		if tl.Name == name {
			_, ok := tl.InputSchema.Properties[sc.KeyArgument]
			return ok && strings.Contains(tl.Description, "Retries are safe")
		}
	}
	return false
}

// TestServerOptions_OrderDoesNotMatter: a server.WithHooks after
// ServerOptions replaces the Hooks it installed; the key is still
// advertised, request IDs still recorded, the user's hooks still run.
func TestServerOptions_OrderDoesNotMatter(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after bool
	}{{"hooks before", true, false}, {"hooks after", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			userHooks := &server.Hooks{}
			var seen int
			userHooks.AddBeforeCallTool(func(context.Context, any, *mcp.CallToolRequest) { seen++ })
			var before, after []server.ServerOption
			if tc.before {
				before = append(before, server.WithHooks(userHooks))
			} else {
				after = append(after, server.WithHooks(userHooks))
			}
			r := newRig(t, before, after)
			var runs int
			var mu sync.Mutex
			refundServer(r, &runs, &mu)
			c := r.client(t)
			ctx := context.Background()
			tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasKey(tools.Tools, "refund") {
				t.Errorf("idempotency_key not advertised: %+v", tools.Tools)
			}
			var req mcp.CallToolRequest
			req.Params.Name = "refund"
			req.Params.Arguments = map[string]any{"order_id": "o-1"}
			for range 2 {
				if _, err := c.CallTool(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if runs != 1 || seen != 2 {
				t.Errorf("runs %d (want 1), the user's hook ran %d times (want 2)", runs, seen)
			}
			spans := r.spans("tools/call refund")
			if len(spans) != 2 || attrOf(spans[0], sc.JSONRPCRequestID) == nil || attrOf(spans[1], sc.Outcome) != "replayed" {
				t.Errorf("spans %v", spans)
			}
			warned := strings.Contains(r.log.String(), "server.WithHooks replaced")
			if warned != tc.after {
				t.Errorf("session-duration warning logged: %v, want %v (%s)", warned, tc.after, r.log)
			}
		})
	}
}

// TestServerOptions_AnotherTracerLeavesToolCallsProtectedAndTraced: a
// server.WithTracer after ServerOptions replaces the request spans; tool
// calls still get theirs, and are still protected.
func TestServerOptions_AnotherTracerLeavesToolCallsProtectedAndTraced(t *testing.T) {
	r := newRig(t, nil, []server.ServerOption{server.WithTracer(tracing.NoopTracer())})
	var runs int
	var mu sync.Mutex
	refundServer(r, &runs, &mu)
	c := r.client(t)
	var req mcp.CallToolRequest
	req.Params.Name = "refund"
	for range 2 {
		if _, err := c.CallTool(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 || len(r.spans("tools/call refund")) != 2 || len(r.spans("initialize")) != 0 {
		t.Errorf("runs %d, spans %v", runs, r.sr.Ended())
	}
	if !strings.Contains(r.log.String(), "another server.WithTracer") {
		t.Errorf("no warning: %s", r.log)
	}
}

func TestRequestIDs_ThroughTheWire(t *testing.T) {
	r := newRig(t, nil, nil)
	r.srv.AddTool(mcp.NewTool("echo", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	})
	ids := []string{`1e21`, `123456789012`, `"abc"`, `-5`, `1.5`, `null`}
	want := []any{"1000000000000000000000", "123456789012", "abc", "-5", "1.5", nil}
	for _, id := range ids {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo"}}`, id)
		r.srv.HandleMessage(context.Background(), json.RawMessage(msg))
	}
	spans := r.spans("tools/call echo")
	if len(spans) != len(ids)-1 { // mcp-go treats an id of null as a notification
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans {
		if got := attrOf(s, sc.JSONRPCRequestID); got != want[i] {
			t.Errorf("id %s: %v, want %v", ids[i], got, want[i])
		}
	}
}

func TestToolsList_FollowsReRegistration(t *testing.T) {
	r := newRig(t, nil, nil)
	h := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	}
	r.srv.AddTool(mcp.NewTool("send", mcp.WithDescription("First.")), h)
	c := r.client(t)
	list := func() mcp.Tool {
		res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil || len(res.Tools) != 1 {
			t.Fatal(err, res)
		}
		return res.Tools[0]
	}
	if d := list().Description; !strings.HasPrefix(d, "First.\n\nRetries are safe") {
		t.Errorf("%q", d)
	}
	r.srv.AddTool(mcp.NewTool("send", mcp.WithDescription("Second."), mcp.WithString("to")), h)
	tl := list()
	if !strings.HasPrefix(tl.Description, "Second.") || tl.InputSchema.Properties["to"] == nil || tl.InputSchema.Properties[sc.KeyArgument] == nil {
		t.Errorf("%+v", tl)
	}
	r.srv.AddTool(mcp.NewTool("send", mcp.WithDescription("Third."), mcp.WithReadOnlyHintAnnotation(true)), h)
	if tl := list(); tl.Description != "Third." || tl.InputSchema.Properties[sc.KeyArgument] != nil {
		t.Errorf("a read-only tool was decorated: %+v", tl)
	}
}

func TestRequireBearerToken(t *testing.T) {
	verify := func(_ context.Context, token string, _ *http.Request) (string, error) {
		switch token {
		case "good":
			return "alice", nil
		case "broken":
			return "", errors.New("verifier down")
		}
		return "", ErrInvalidToken
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "subject="+TokenSubject(r.Context())) })
	for _, tc := range []struct {
		opts      *BearerOptions
		header    string
		status    int
		body      string
		challenge string
	}{
		{nil, "", 401, "", `Bearer realm="mcp"`},
		{nil, "Basic x", 401, "", `Bearer realm="mcp"`},
		{nil, "Bearer nope", 401, "", `Bearer realm="mcp", error="invalid_token"`},
		{nil, "Bearer broken", 500, "", ""},
		{nil, "Bearer good", 200, "subject=alice", ""},
		{&BearerOptions{Optional: true, Realm: "desk"}, "", 200, "subject=", ""},
		{&BearerOptions{Optional: true, Realm: "desk"}, "Bearer nope", 401, "", `Bearer realm="desk", error="invalid_token"`},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		RequireBearerToken(verify, tc.opts)(echo).ServeHTTP(rec, req)
		if rec.Code != tc.status || (tc.body != "" && rec.Body.String() != tc.body) || rec.Header().Get("WWW-Authenticate") != tc.challenge {
			t.Errorf("%+v %q: %d %q %q", tc.opts, tc.header, rec.Code, rec.Body, rec.Header().Get("WWW-Authenticate"))
		}
	}
}

// TestKeyArgument_PassesMCPGosOwnStrictValidation: with mcp-go's own
// argument validation on and a strict schema, a call that carries the
// advertised idempotency_key is accepted (the hook removes it from the
// arguments mcp-go validates), and a mistyped one is still rejected.
func TestKeyArgument_PassesMCPGosOwnStrictValidation(t *testing.T) {
	r := newRig(t, []server.ServerOption{server.WithInputSchemaValidation()}, nil)
	var runs int
	r.srv.AddTool(mcp.NewTool("send", mcp.WithInteger("n", mcp.Required()), mcp.WithSchemaAdditionalProperties(false)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs++
			if _, ok := req.GetArguments()[sc.KeyArgument]; ok {
				return nil, errors.New("the handler saw the key")
			}
			return mcp.NewToolResultText("sent"), nil
		})
	c := r.client(t)
	var req mcp.CallToolRequest
	req.Params.Name = "send"
	for _, args := range []map[string]any{{"n": 1, sc.KeyArgument: "k"}, {"n": 1, sc.KeyArgument: "k"}, {"n": "1"}} {
		req.Params.Arguments = args
		res, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, isStr := args["n"].(string); isStr != res.IsError {
			t.Errorf("%v: %+v", args, res)
		}
	}
	if runs != 1 {
		t.Errorf("runs %d", runs)
	}
}

// TestPanic_TheSpanSaysSoAndTheClaimIsReleased: mcp-go without
// server.WithRecovery lets a handler's panic unwind through the
// dispatcher, which ends the request span on its way.
func TestPanic_TheSpanSaysSoAndTheClaimIsReleased(t *testing.T) {
	r := newRig(t, nil, nil)
	boom := true
	r.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if boom {
			panic("boom")
		}
		return mcp.NewToolResultText("sent"), nil
	})
	c := r.client(t)
	var req mcp.CallToolRequest
	req.Params.Name = "send"
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_, _ = c.CallTool(context.Background(), req) // the in-process transport calls the server in this goroutine
	}()
	spans := r.spans("tools/call send")
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || attrOf(spans[0], sc.ErrorType) != "_OTHER" || attrOf(spans[0], sc.Outcome) != "executed" {
		t.Fatalf("spans %v %v %v", spans, spans[0].Status(), spans[0].Attributes())
	}
	boom = false
	if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if s := r.spans("tools/call send"); attrOf(s[len(s)-1], sc.Outcome) == "replayed" {
		t.Error("a panicked call was stored")
	}
}

// The decorated listing carries its input schema pre-encoded: its JSON is
// byte for byte what mcp-go writes for the structured schema.
func TestToolsList_PreEncodedSchemaWritesWhatMCPGoWrites(t *testing.T) {
	ordered := mcp.NewTool("ordered", mcp.WithString("z_last", mcp.Required()), mcp.WithNumber("a_first"))
	ordered.InputSchema.PropertyOrder = []string{"z_last", "a_first"}
	strict := mcp.NewTool("strict", mcp.WithDescription("Sends <b>mail</b> & more."),
		mcp.WithString("to", mcp.Required(), mcp.Enum("a&b", "<c>")), mcp.WithObject("opts", mcp.Properties(map[string]any{"cc": map[string]any{"type": "string"}})))
	strict.InputSchema.AdditionalProperties = false
	strict.InputSchema.Defs = map[string]any{"addr": map[string]any{"type": "string", "format": "email"}}
	for _, tool := range []mcp.Tool{mcp.NewTool("bare"), mcp.NewTool("plain", mcp.WithString("x")), ordered, strict} {
		decorated := withKeyParameter(tool)
		want, err := json.Marshal(decorated)
		if err != nil {
			t.Fatal(err)
		}
		pre := preEncoded(decorated)
		if pre.RawInputSchema == nil {
			t.Fatalf("%s: the schema was not pre-encoded", tool.Name)
		}
		got, err := json.Marshal(pre)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", tool.Name, got, want)
		}
	}
}
