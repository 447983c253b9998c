package mcpgo

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

// refundTool registers an unannotated (hence protected) tool whose result
// has several content items and structured content, and that records a
// write ID per run.
func refundTool(h *harness, runs *counter) {
	h.srv.AddTool(mcp.NewTool("refund",
		mcp.WithDescription("Refund an order."),
		mcp.WithString("order_id", mcp.Required()),
		mcp.WithNumber("amount_cents", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := runs.inc("refund")
		id := fmt.Sprintf("re_%d", n)
		instrument.RecordWrite(ctx, id)
		return &mcp.CallToolResult{
			Content: []mcp.Content{
				mcp.NewTextContent("Refunded order " + req.GetString("order_id", "")),
				mcp.NewTextContent(fmt.Sprintf("run %d", n)),
				mcp.NewImageContent("aGVsbG8=", "image/png"),
			},
			StructuredContent: map[string]any{
				"refund_id":    id,
				"amount_cents": req.GetInt("amount_cents", 0),
				"detail":       map[string]any{"currency": "EUR", "lines": []any{1, 2.5, "x"}},
			},
		}, nil
	})
}

func TestReplay_SecondIdenticalCallReturnsFirstResultPlusMarker(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{instrument.WithSubject(userFrom), instrument.WithOperationDuration()}})
	var runs counter
	refundTool(h, &runs)
	c := h.client()
	ctx := ctxWithUser(context.Background(), "alice@example.com")
	args := map[string]any{"order_id": "o-1", "amount_cents": 1250}

	first, err := c.CallTool(ctx, callReq("refund", args))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.CallTool(ctx, callReq("refund", args))
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.get("refund"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}

	// The replay is the first result plus the marker, field for field.
	if second.IsError || first.IsError {
		t.Fatalf("isError: first %v, second %v", first.IsError, second.IsError)
	}
	if !reflect.DeepEqual(first.Content, second.Content) {
		t.Errorf("content differs:\n first %#v\nsecond %#v", first.Content, second.Content)
	}
	if len(second.Content) != 3 {
		t.Errorf("replay has %d content items, want 3", len(second.Content))
	}
	if !reflect.DeepEqual(first.StructuredContent, second.StructuredContent) {
		t.Errorf("structuredContent differs:\n first %#v\nsecond %#v", first.StructuredContent, second.StructuredContent)
	}
	if first.Meta != nil {
		t.Errorf("first result has _meta %#v, want none", first.Meta)
	}
	if second.Meta == nil {
		t.Fatal("replay has no _meta")
	}
	wantMarker := map[string]any{"replayed": true, "attempt": float64(1), "write_id": "re_1"}
	if got := second.Meta.AdditionalFields[instrument.ReplayMetaKey]; !reflect.DeepEqual(got, wantMarker) {
		t.Errorf("marker = %#v, want %#v", got, wantMarker)
	}
	firstJSON, secondJSON := toJSON(t, first), toJSON(t, second)
	meta := secondJSON["_meta"].(map[string]any)
	delete(meta, instrument.ReplayMetaKey)
	if len(meta) == 0 {
		delete(secondJSON, "_meta")
	}
	if !reflect.DeepEqual(firstJSON, secondJSON) {
		t.Errorf("replay minus marker differs from the first result:\n first %v\nsecond %v", firstJSON, secondJSON)
	}

	// Spans: one per call, the contract's attributes exactly.
	spans := h.toolSpans("refund")
	if len(spans) != 2 {
		t.Fatalf("%d refund spans, want 2", len(spans))
	}
	argsJSON, _ := json.Marshal(args)
	k, err := idemkit.NewKey("alice@example.com", "refund", argsJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := attrMap(spans[0])[spancontract.MCPSessionID].(string)
	if sid == "" {
		t.Fatal("no mcp.session.id on the span")
	}
	base := func(reqID, outcome string) map[string]any {
		return map[string]any{
			spancontract.GenAIOperationName: spancontract.OperationExecuteTool,
			spancontract.GenAIToolName:      "refund",
			spancontract.MCPMethodName:      spancontract.MethodToolsCall,
			spancontract.MCPSessionID:       sid,
			spancontract.JSONRPCRequestID:   reqID,
			spancontract.MCPProtocolVersion: mcp.LATEST_LEGACY_PROTOCOL_VERSION,
			spancontract.ArgsHash:           k.ArgsHash()[:32],
			spancontract.KeyHash:            k.Hash(),
			spancontract.KeySource:          spancontract.KeySourceDerived,
			spancontract.SubjectHash:        idemkit.ShortHash("alice@example.com"),
			spancontract.Outcome:            outcome,
			spancontract.Attempt:            int64(1),
			spancontract.WriteID:            "re_1",
		}
	}
	// The in-process client numbers requests from 1 (initialize).
	assertAttrs(t, spans[0], base("2", spancontract.OutcomeExecuted))
	assertAttrs(t, spans[1], base("3", spancontract.OutcomeReplayed))
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("span kind %v, want internal", s.SpanKind())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("status %v, want unset", s.Status())
		}
		if s.InstrumentationScope().Name != instrument.ScopeName {
			t.Errorf("scope %q", s.InstrumentationScope().Name)
		}
	}

	// Metrics.
	ms := h.collect()
	wantCalls := map[string]int64{
		key(spancontract.GenAIToolName, "refund", spancontract.Outcome, "executed"): 1,
		key(spancontract.GenAIToolName, "refund", spancontract.Outcome, "replayed"): 1,
	}
	if got := sumByAttrs(t, ms[instrument.MetricToolCalls]); !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("%s = %v, want %v", instrument.MetricToolCalls, got, wantCalls)
	}
	if got := sumByAttrs(t, ms[instrument.MetricReplays]); !reflect.DeepEqual(got, map[string]int64{key(spancontract.GenAIToolName, "refund"): 1}) {
		t.Errorf("%s = %v", instrument.MetricReplays, got)
	}
	if _, ok := ms[instrument.MetricInProgress]; ok {
		t.Errorf("%s recorded without an in-progress answer", instrument.MetricInProgress)
	}
	if got := histCounts(t, ms[instrument.MetricClaimDuration]); !reflect.DeepEqual(got, map[string]uint64{key(spancontract.GenAIToolName, "refund"): 2}) {
		t.Errorf("%s counts = %v", instrument.MetricClaimDuration, got)
	}
	if got := histCounts(t, ms["mcp.server.operation.duration"]); !reflect.DeepEqual(got, map[string]uint64{
		key(spancontract.MCPMethodName, "tools/call", spancontract.GenAIToolName, "refund"): 2,
	}) {
		t.Errorf("mcp.server.operation.duration counts = %v", got)
	}
}

func TestReplay_DifferentSubjectsNeverShareAResult(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{instrument.WithSubject(userFrom)}})
	var runs counter
	h.srv.AddTool(mcp.NewTool("send", mcp.WithString("text")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		user := userFrom(ctx)
		runs.inc(user)
		return mcp.NewToolResultText("sent by " + user), nil
	})
	c := h.client()
	args := map[string]any{"text": "hello"}
	got := map[string][]string{}
	for _, user := range []string{"alice", "bob", "alice", "bob", "carol"} {
		r, err := c.CallTool(ctxWithUser(context.Background(), user), callReq("send", args))
		if err != nil {
			t.Fatal(err)
		}
		got[user] = append(got[user], resultText(r))
	}
	for _, user := range []string{"alice", "bob", "carol"} {
		if n := runs.get(user); n != 1 {
			t.Errorf("%s: handler ran %d times, want 1", user, n)
		}
		for _, text := range got[user] {
			if text != "sent by "+user {
				t.Errorf("%s got %q", user, text)
			}
		}
	}
	keys := map[string]bool{}
	for _, s := range h.toolSpans("send") {
		keys[attrMap(s)[spancontract.KeyHash].(string)] = true
	}
	if len(keys) != 3 {
		t.Errorf("%d distinct key hashes over 3 subjects, want 3", len(keys))
	}
}

func TestReplay_ExplicitKeyReusedWithOtherArgumentsIsRejected(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var runs counter
	var seenArgs []map[string]any
	h.srv.AddTool(mcp.NewTool("charge", mcp.WithString("order_id")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc("charge")
		seenArgs = append(seenArgs, req.GetArguments())
		var raw map[string]any
		_ = json.Unmarshal(req.Params.RawArguments, &raw)
		seenArgs = append(seenArgs, raw)
		return mcp.NewToolResultText("charged " + req.GetString("order_id", "")), nil
	})
	c := h.client()
	ctx := context.Background()

	r1, err := c.CallTool(ctx, callReq("charge", map[string]any{"order_id": "o-1", "idempotency_key": "k-1"}))
	if err != nil || r1.IsError {
		t.Fatalf("first: %v %v", err, resultText(r1))
	}
	r2, err := c.CallTool(ctx, callReq("charge", map[string]any{"order_id": "o-2", "idempotency_key": "k-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if !r2.IsError || resultText(r2) != (&idemkit.MismatchError{Tool: "charge"}).Error() {
		t.Errorf("reused key: isError %v, text %q", r2.IsError, resultText(r2))
	}
	// The same key with the same arguments is a replay, also from _meta.
	req := callReq("charge", map[string]any{"order_id": "o-1"})
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{instrument.KeyMetaKey: "k-1"}}
	r3, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r3.IsError || resultText(r3) != "charged o-1" || r3.Meta == nil || r3.Meta.AdditionalFields[instrument.ReplayMetaKey] == nil {
		t.Errorf("same key via _meta: %#v", r3)
	}
	// Two different keys in one request are rejected before any claim.
	req = callReq("charge", map[string]any{"order_id": "o-9", "idempotency_key": "k-9"})
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{instrument.KeyMetaKey: "k-8"}}
	r4, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !r4.IsError {
		t.Errorf("two keys accepted: %q", resultText(r4))
	}
	if n := runs.get("charge"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	for _, a := range seenArgs {
		if _, ok := a[instrument.KeyArgument]; ok {
			t.Errorf("handler saw the key argument: %v", a)
		}
	}

	spans := h.toolSpans("charge")
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	wantOutcome := []any{"executed", "mismatch", "replayed", nil}
	wantErrorType := []any{nil, spancontract.ErrorTypeToolError, nil, spancontract.ErrorTypeToolError}
	for i, s := range spans {
		a := attrMap(s)
		if a[spancontract.Outcome] != wantOutcome[i] || a[spancontract.ErrorType] != wantErrorType[i] {
			t.Errorf("span %d: outcome %v error.type %v, want %v %v", i, a[spancontract.Outcome], a[spancontract.ErrorType], wantOutcome[i], wantErrorType[i])
		}
		if i < 3 && a[spancontract.KeySource] != spancontract.KeySourceExplicit {
			t.Errorf("span %d key source %v", i, a[spancontract.KeySource])
		}
	}
	if _, ok := attrMap(spans[3])[spancontract.KeyHash]; ok {
		t.Error("a rejected key has a key hash")
	}
	if a := attrMap(spans[0]); a[spancontract.KeyHash] != attrMap(spans[2])[spancontract.KeyHash] {
		t.Errorf("argument key and _meta key hash differently")
	}
}

func TestReplay_HandlerGoErrorPassesThroughAndIsNotStored(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var runs counter
	h.srv.AddTool(mcp.NewTool("pay"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if runs.inc("pay") == 1 {
			return nil, fmt.Errorf("gateway: %w", errGateway)
		}
		return mcp.NewToolResultText("paid"), nil
	})
	c := h.client()
	if _, err := c.CallTool(context.Background(), callReq("pay", nil)); err == nil {
		t.Fatal("the handler's error did not reach the client")
	}
	r, err := c.CallTool(context.Background(), callReq("pay", nil))
	if err != nil || resultText(r) != "paid" {
		t.Fatalf("retry: %v %q", err, resultText(r))
	}
	if n := runs.get("pay"); n != 2 {
		t.Errorf("handler ran %d times, want 2 (a failed attempt is not stored)", n)
	}
	spans := h.toolSpans("pay")
	a0, a1 := attrMap(spans[0]), attrMap(spans[1])
	if a0[spancontract.ErrorType] != "github.com/idemkit/idemkit/instrument/mcpgo.gatewayError" || spans[0].Status().Code != codes.Error {
		t.Errorf("error span: error.type %v status %v", a0[spancontract.ErrorType], spans[0].Status())
	}
	if a0[spancontract.Outcome] != "executed" || a1[spancontract.Outcome] != "takeover" || a1[spancontract.Attempt] != int64(2) {
		t.Errorf("outcomes %v/%v attempt %v", a0[spancontract.Outcome], a1[spancontract.Outcome], a1[spancontract.Attempt])
	}
}

type gatewayError struct{}

func (gatewayError) Error() string { return "unavailable" }

var errGateway = gatewayError{}

func TestReplay_ToolErrorResults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy idemkit.FailurePolicy
		runs   int
		second string
	}{
		{"released by default", 0, 2, "takeover"},
		{"stored with StoreToolErrors", idemkit.StoreToolErrors, 1, "replayed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{guard: &idemkit.Config{FailurePolicy: tc.policy}})
			var runs counter
			h.srv.AddTool(mcp.NewTool("decline"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				runs.inc("x")
				return mcp.NewToolResultError("card declined"), nil
			})
			c := h.client()
			for i := 0; i < 2; i++ {
				r, err := c.CallTool(context.Background(), callReq("decline", nil))
				if err != nil || !r.IsError || resultText(r) != "card declined" {
					t.Fatalf("call %d: %v %#v", i, err, r)
				}
			}
			if n := runs.get("x"); n != tc.runs {
				t.Errorf("handler ran %d times, want %d", n, tc.runs)
			}
			spans := h.toolSpans("decline")
			for _, s := range spans {
				if attrMap(s)[spancontract.ErrorType] != spancontract.ErrorTypeToolError || s.Status().Code != codes.Error {
					t.Errorf("span: error.type %v status %v", attrMap(s)[spancontract.ErrorType], s.Status())
				}
			}
			if got := attrMap(spans[1])[spancontract.Outcome]; got != tc.second {
				t.Errorf("second outcome %v, want %s", got, tc.second)
			}
		})
	}
}

// failingStore fails every claim.
type failingStore struct{ idemkit.MemoryStore }

func (*failingStore) Claim(context.Context, idemkit.ClaimRequest) (idemkit.ClaimResult, error) {
	return idemkit.ClaimResult{}, errDBDown
}

type dbDownError struct{}

func (dbDownError) Error() string { return "connection refused" }

var errDBDown = dbDownError{}

func TestReplay_StoreFailureFailsClosed(t *testing.T) {
	h := newHarness(t, harnessConfig{store: &failingStore{}})
	var runs counter
	h.srv.AddTool(mcp.NewTool("transfer"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc("x")
		return mcp.NewToolResultText("moved"), nil
	})
	r, err := h.client().CallTool(context.Background(), callReq("transfer", map[string]any{"amount": 5}))
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || resultText(r) != unavailableText("transfer") {
		t.Errorf("result %v %q", r.IsError, resultText(r))
	}
	if runs.get("x") != 0 {
		t.Error("the handler ran without a claim")
	}
	s := h.toolSpans("transfer")[0]
	a := attrMap(s)
	if _, ok := a[spancontract.Outcome]; ok {
		t.Errorf("outcome %v on a call that was never claimed", a[spancontract.Outcome])
	}
	if a[spancontract.ErrorType] != "github.com/idemkit/idemkit/instrument/mcpgo.dbDownError" || s.Status().Code != codes.Error {
		t.Errorf("error.type %v status %v", a[spancontract.ErrorType], s.Status())
	}
	if got := sumByAttrs(t, h.collect()[instrument.MetricToolCalls]); !reflect.DeepEqual(got, map[string]int64{key(spancontract.GenAIToolName, "transfer"): 1}) {
		t.Errorf("calls = %v", got)
	}
}

func unavailableText(tool string) string {
	return "The " + tool + " call was not run: the server could not check whether this request already ran, because its idempotency store is unavailable. " +
		"Nothing was done. Retry the same call in a few seconds."
}

func TestProtection_AnnotationsAndOverrides(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{
		instrument.WithProtect("lookup_forced"),
		instrument.WithBypass("send_bypassed"),
	}})
	var runs counter
	handler := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc(req.Params.Name)
		return mcp.NewToolResultText("ok"), nil
	}
	h.srv.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true)), handler)
	h.srv.AddTool(mcp.NewTool("upsert", mcp.WithIdempotentHintAnnotation(true)), handler)
	h.srv.AddTool(mcp.NewTool("lookup_forced", mcp.WithReadOnlyHintAnnotation(true)), handler)
	h.srv.AddTool(mcp.NewTool("send_bypassed"), handler)
	h.srv.AddTool(mcp.NewTool("send"), handler)
	c := h.client()
	for _, tool := range []string{"lookup", "upsert", "lookup_forced", "send_bypassed", "send"} {
		for i := 0; i < 2; i++ {
			if _, err := c.CallTool(context.Background(), callReq(tool, map[string]any{"q": 1})); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]int{"lookup": 2, "upsert": 2, "lookup_forced": 1, "send_bypassed": 2, "send": 1}
	for tool, n := range want {
		if got := runs.get(tool); got != n {
			t.Errorf("%s ran %d times, want %d", tool, got, n)
		}
		spans := h.toolSpans(tool)
		if len(spans) != 2 {
			t.Fatalf("%s: %d spans", tool, len(spans))
		}
		a := attrMap(spans[1])
		if n == 2 {
			if a[spancontract.Outcome] != "bypassed" || a["idemkit.bypass.reason"] != "unprotected" {
				t.Errorf("%s: outcome %v reason %v", tool, a[spancontract.Outcome], a["idemkit.bypass.reason"])
			}
			if _, ok := a[spancontract.KeyHash]; ok {
				t.Errorf("%s: an unprotected call carries a key hash", tool)
			}
		} else if a[spancontract.Outcome] != "replayed" {
			t.Errorf("%s: outcome %v", tool, a[spancontract.Outcome])
		}
	}
}

// Without a Guard nothing is protected, but write tools' spans carry the
// key hashes (bypass reason no_guard), so that the Collector can measure
// the duplicates that leak before protection is turned on. Read-only tools
// carry neither.
func TestProtection_NilGuardObservesOnly(t *testing.T) {
	h := newHarness(t, harnessConfig{noGuard: true})
	var runs counter
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc("x")
		instrument.RecordWrite(ctx, "w-1")
		return mcp.NewToolResultText("ok"), nil
	})
	h.srv.AddTool(mcp.NewTool("look", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("seen"), nil
	})
	c := h.client()
	for i := 0; i < 2; i++ {
		if _, err := c.CallTool(context.Background(), callReq("send", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if runs.get("x") != 2 {
		t.Errorf("ran %d times", runs.get("x"))
	}
	spans := h.toolSpans("send")
	first, second := attrMap(spans[0]), attrMap(spans[1])
	if second[spancontract.Outcome] != "bypassed" || second[spancontract.WriteID] != "w-1" || second[spancontract.BypassReason] != spancontract.BypassNoGuard {
		t.Errorf("attrs %v", sortedDump(second))
	}
	if second[spancontract.KeyHash] == nil || second[spancontract.KeyHash] != first[spancontract.KeyHash] || second[spancontract.ArgsHash] == nil {
		t.Errorf("the two identical calls do not carry one key hash: %v / %v", first[spancontract.KeyHash], second[spancontract.KeyHash])
	}
	if _, err := c.CallTool(context.Background(), callReq("look", nil)); err != nil {
		t.Fatal(err)
	}
	look := attrMap(h.toolSpans("look")[0])
	if look[spancontract.KeyHash] != nil || look[spancontract.BypassReason] != nil {
		t.Errorf("a read-only tool without a Guard: %v", sortedDump(look))
	}
	// The call counter tells observed write calls from read-only ones.
	calls := sumByAttrs(t, h.collect()[instrument.MetricToolCalls])
	want := map[string]int64{
		key(spancontract.GenAIToolName, "send", spancontract.BypassReason, spancontract.BypassNoGuard, spancontract.Outcome, "bypassed"): 2,
		key(spancontract.GenAIToolName, "look", spancontract.Outcome, "bypassed"):                                                        1,
	}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("tool calls %v, want %v", calls, want)
	}
}

// TestUnscoped covers stateless HTTP without a subject: no session in the
// request context.
func TestUnscoped_CallsWithoutSubjectOrSession(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []instrument.Option
		runs    int
		outcome string
	}{
		{"bypassed by default", nil, 2, "bypassed"},
		{"shared when asked", []instrument.Option{instrument.WithUnscopedCalls(instrument.UnscopedShare)}, 1, "replayed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: tc.opts})
			var runs counter
			h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				runs.inc("x")
				return mcp.NewToolResultText("ok"), nil
			})
			for _, id := range []string{`7`, `"b"`} {
				msg := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"send","arguments":{"a":1}}}`
				resp := h.srv.HandleMessage(context.Background(), json.RawMessage(msg))
				if _, ok := resp.(mcp.JSONRPCResponse); !ok {
					t.Fatalf("response %#v", resp)
				}
			}
			if runs.get("x") != tc.runs {
				t.Errorf("ran %d times, want %d", runs.get("x"), tc.runs)
			}
			spans := h.toolSpans("send")
			a0, a1 := attrMap(spans[0]), attrMap(spans[1])
			if a0[spancontract.JSONRPCRequestID] != "7" || a1[spancontract.JSONRPCRequestID] != "b" {
				t.Errorf("request ids %v %v", a0[spancontract.JSONRPCRequestID], a1[spancontract.JSONRPCRequestID])
			}
			if _, ok := a1[spancontract.MCPSessionID]; ok {
				t.Error("session id on a sessionless call")
			}
			if a1[spancontract.Outcome] != tc.outcome {
				t.Errorf("outcome %v, want %s", a1[spancontract.Outcome], tc.outcome)
			}
			if a1[spancontract.KeyHash] == nil || a1[spancontract.KeyHash] != a0[spancontract.KeyHash] {
				t.Errorf("key hashes %v %v: duplicates must stay visible", a0[spancontract.KeyHash], a1[spancontract.KeyHash])
			}
			if tc.outcome == "bypassed" && a1["idemkit.bypass.reason"] != "unscoped" {
				t.Errorf("reason %v", a1["idemkit.bypass.reason"])
			}
		})
	}
}

func TestReplay_SessionScopesCallsWithoutSubject(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var runs counter
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.inc("x")
		return mcp.NewToolResultText("ok"), nil
	})
	a, b := h.client(), h.client()
	for _, c := range []interface {
		CallTool(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error)
	}{a, a, b, b} {
		if _, err := c.CallTool(context.Background(), callReq("send", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if runs.get("x") != 2 {
		t.Errorf("ran %d times over two sessions, want 2", runs.get("x"))
	}
}

func TestSubject_HashKeyAndRawOptIn(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{
		instrument.WithSubject(userFrom),
		instrument.WithSubjectHashKey([]byte("secret")),
		instrument.WithRawSubject(),
		instrument.WithRecordArguments(12),
		instrument.WithRecordResults(0),
	}})
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	if _, err := h.client().CallTool(ctxWithUser(context.Background(), "alice"), callReq("send", map[string]any{"text": "héllo wörld"})); err != nil {
		t.Fatal(err)
	}
	a := attrMap(h.toolSpans("send")[0])
	if a[spancontract.SubjectHash] == idemkit.ShortHash("alice") || len(a[spancontract.SubjectHash].(string)) != 32 {
		t.Errorf("subject hash %v is not keyed", a[spancontract.SubjectHash])
	}
	if a[spancontract.Subject] != "alice" {
		t.Errorf("raw subject %v", a[spancontract.Subject])
	}
	if a[spancontract.GenAIToolCallArguments] != `{"text":"hé` {
		t.Errorf("arguments %q", a[spancontract.GenAIToolCallArguments])
	}
	if a[spancontract.GenAIToolCallResult] != `{"content":[{"type":"text","text":"ok"}]}` {
		t.Errorf("result %q", a[spancontract.GenAIToolCallResult])
	}
}

func TestServerOptions_KeepTheUsersHooks(t *testing.T) {
	userHooks := &server.Hooks{}
	var seen int
	userHooks.AddBeforeCallTool(func(context.Context, any, *mcp.CallToolRequest) { seen++ })
	h := newHarness(t, harnessConfig{srvOpts: []server.ServerOption{server.WithHooks(userHooks)}, optsLast: true})
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	if _, err := h.client().CallTool(context.Background(), callReq("send", nil)); err != nil {
		t.Fatal(err)
	}
	if seen != 1 {
		t.Errorf("the user's hook ran %d times", seen)
	}
	if attrMap(h.toolSpans("send")[0])[spancontract.JSONRPCRequestID] != "2" {
		t.Error("request ID lost")
	}
}
