package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/idemkit-mcp/idemkit/spancontract/canonjson"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Replay_SecondIdenticalCallGetsTheFirstResultPlusTheMarker", testReplay},
		{"ConcurrentDuplicates_RunOnceAndTheOthersAreToldItIsInProgress", testConcurrentDuplicates},
		{"ExplicitKey_ReusedWithOtherArgumentsIsRejected", testMismatch},
		{"Subjects_TwoBearerTokensNeverShareAResult", testSubjects},
		{"Subjects_ProtectCallsWithoutValidatedSessions", testSubjectsWithoutSessions},
		{"Sessions_ScopeCallsWithoutASubject", testSessions},
		{"Sessions_AStrangerWithAnotherClientsSessionIDGetsNoStoredResult", testStranger},
		{"Sessions_BoundToTheSubjectThatInitializedThem", testSessionBinding},
		{"FailClosed_UnidentifiedCallersAreRefusedWithALogLinePerTool", testUnscopedRefused},
		{"FailClosed_OptIns", testUnscopedOptIns},
		{"RequestIDs_EachSpanCarriesItsCallsIDUnderConcurrency", testRequestIDs},
		{"Progress_NotifiesTheClientAndKeepsTheClaim", testProgress},
		{"Jobs_ReplicasShareOneDurableJob", testJobs},
		{"CallStatusTool_AnswersTheCallersOwnRecordWithoutClaiming", testCallStatus},
		{"Tasks_DuplicatesShareOneDurableTask", testTasks},
		{"TxTool_ClaimWritesAndOutcomeCommitTogether", testTxTool},
		{"PhasedTool_ExternalOutsideAnyTransactionThenWritesAndOutcomeTogether", testPhasedTool},
		{"MalformedInput_IsRejectedAndRunsNothing", testMalformed},
		{"KeyArgument_IsStrippedBeforeStrictSchemasAndHandlers", testKeyStripped},
		{"SpanShape_PerMethodAndErrorClass", testSpanShape},
		{"TraceContext_FromParamsMeta", testTraceContext},
		{"Store_AnUnreachableStoreFailsClosed", testStoreDown},
		{"Store_ADamagedRecordIsRefusedAsAlreadyRun", testDamagedRecord},
		{"Telemetry_HashKeyKeysEveryHashAndSessionIDsAreHashed", testHashKeyOnSpans},
		{"Store_AFullMemoryStoreRefusesNewCallsAndRunsNothing", testStoreFull},
		{"HTTP_SessionCapRefusesANewSessionReadably", testHTTPSessionCap},
		{"HTTP_IdleSessionsAreEndedAndFreeTheirPlace", testHTTPIdleSessions},
		{"HTTP_AbandonedSessionsGiveTheirMemoryBack", testHTTPEndedSessionsFreeMemory},
		{"HTTP_AGETOpensNoSessionOfItsOwn", testHTTPGETNeedsASession},
		{"HTTP_AnOversizedBodyIsRefusedUnread", testHTTPBodyLimit},
		{"HTTP_ASlowBodyIsCutByTheReadTimeout", testHTTPSlowBody},
		{"Metrics_SessionDuration", testSessionDuration},
		{"ObserveOnly_WithoutAGuard", testObserveOnly},
		{"Elicitation_TheClaimOutlivesItsLeaseWhileTheUserAnswers", testElicitationKeepsTheLease},
		{"HumanGate_AsksOnceInsideTheClaimAndDeclineRunsNothing", testHumanGate},
		{"Policies_RequiredKeyToolVersionAndPoisonCalls", testPolicies},
		{"Policies_NestedExcludesAndRoundedTimestamps", testKeyFields},
		{"Arguments_CaseVariantNamesAreRefused", testCaseVariantNames},
		{"Arguments_IntegersAreExact", testInexactIntegers},
		{"KeyArgument_AdvertisedWithTheServersBounds", testKeyAdvertisedBounds},
		{"InProgress_RetryHintIsTheExpectedRemainingTime", testRetryHint},
		{"Results_AnUnencodableResultIsRecordedAndNeverRerun", testUnencodableResult},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// refundTool is an unannotated (protected) tool that records a write ID per
// run and answers with several content items and structured content.
func refundTool(runs *counter) Tool {
	return Tool{
		Name: "refund",
		Schema: map[string]any{"type": "object", "properties": map[string]any{
			"order_id": map[string]any{"type": "string"}, "amount_cents": map[string]any{"type": "integer"},
		}},
		Run: func(ctx context.Context, args map[string]any) (Result, error) {
			n := runs.inc()
			id := fmt.Sprintf("re_%d", n)
			instrument.RecordWrite(ctx, id)
			return Result{
				Text:       []string{fmt.Sprintf("Refunded order %v", args["order_id"]), fmt.Sprintf("run %d", n)},
				Structured: map[string]any{"refund_id": id, "amount_cents": args["amount_cents"], "detail": map[string]any{"lines": []any{1, 2.5, "x"}}},
			}, nil
		},
	}
}

func call(t *testing.T, c Client, tool string, args, meta map[string]any) map[string]any {
	t.Helper()
	res, err := c.CallTool(context.Background(), tool, args, meta)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// wireIDs returns the jsonrpc.request.id form of the IDs of the recorded
// tools/call requests, in order.
func wireIDs(t *testing.T, w *Wire) []string {
	t.Helper()
	var out []string
	for _, m := range w.Messages("tools/call") {
		out = append(out, formatID(t, m.ID))
	}
	return out
}

func formatID(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		t.Fatalf("request ID %s", raw)
	}
	return n.String()
}

func testReplay(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	wire := &Wire{}
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol, Wire: wire})
	args := map[string]any{"order_id": "o-1", "amount_cents": 1250}
	first := call(t, c, "refund", args, nil)
	second := call(t, c, "refund", args, nil)
	if n := runs.get(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	if isError(first) || isError(second) || marker(first, sc.ReplayMetaKey) != nil {
		t.Fatalf("first %v, second %v", first, second)
	}
	if got, want := marker(second, sc.ReplayMetaKey), map[string]any{"replayed": true, "attempt": float64(1), "write_id": "re_1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("marker %v, want %v", got, want)
	}
	if got := withoutMarker(second, sc.ReplayMetaKey); !reflect.DeepEqual(got, first) {
		t.Errorf("the replay minus its marker differs from the first result:\n first %v\nreplay %v", first, got)
	}
	if !strings.Contains(text(first), "Refunded order o-1") {
		t.Errorf("first result %v", first)
	}

	spans := r.waitSpans("tools/call refund", 2)
	ids := wireIDs(t, wire)
	k, _ := idemkit.NewKey("alice", "refund", []byte(`{"order_id":"o-1","amount_cents":1250}`), nil)
	for i, s := range spans {
		outcome := []string{"executed", "replayed"}[i]
		if s.SpanKind() != trace.SpanKindServer || s.Status().Code != codes.Unset {
			t.Errorf("span %d: kind %v, status %v", i, s.SpanKind(), s.Status())
		}
		if s.InstrumentationScope().Name != instrument.ScopeName || s.InstrumentationScope().SchemaURL != semconv.SchemaURL {
			t.Errorf("scope %+v", s.InstrumentationScope())
		}
		if d := hasAttrs(s, map[string]any{
			string(semconv.McpMethodNameKey): "tools/call", string(semconv.GenAIOperationNameKey): "execute_tool",
			string(semconv.GenAIToolNameKey): "refund", string(semconv.JSONRPCRequestIDKey): ids[i],
			string(semconv.McpSessionIDKey): exportedSessionID(c.SessionID()), string(semconv.McpProtocolVersionKey): LegacyProtocol,
			string(semconv.NetworkTransportKey): "tcp", string(semconv.NetworkProtocolNameKey): "http",
			string(semconv.NetworkProtocolVersionKey): "1.1", string(semconv.ClientAddressKey): "127.0.0.1",
			sc.ArgsHash: k.ArgsHash()[:32], sc.KeyHash: k.Hash(), sc.KeySource: "derived",
			sc.SubjectHash: clip.Hash("alice"), sc.Outcome: outcome, sc.Attempt: int64(1), sc.WriteID: "re_1",
			string(semconv.ErrorTypeKey): absent, sc.Subject: absent, string(semconv.GenAIToolCallArgumentsKey): absent,
		}); d != "" {
			t.Errorf("span %d (%s): %s", i, outcome, d)
		}
		if p, ok := attrs(s)[string(semconv.ClientPortKey)].(int64); !ok || p <= 0 {
			t.Errorf("client.port %v", attrs(s)[string(semconv.ClientPortKey)])
		}
	}
	if len(r.spans("execute_tool refund")) != 0 {
		t.Error("a second, INTERNAL span per call: one span per call")
	}

	ms := r.metrics()
	if got, want := sums(t, ms[sc.MetricToolCalls]), map[string]int64{
		key(sc.GenAIToolName, "refund", sc.Outcome, "executed"): 1,
		key(sc.GenAIToolName, "refund", sc.Outcome, "replayed"): 1,
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", sc.MetricToolCalls, got, want)
	}
	if got := sums(t, ms[sc.MetricReplays]); !reflect.DeepEqual(got, map[string]int64{key(sc.GenAIToolName, "refund"): 1}) {
		t.Errorf("%s = %v", sc.MetricReplays, got)
	}
	var calls uint64
	for _, p := range histPoints(t, ms[sc.MetricOperationDuration]) {
		if p.attrs[sc.MCPMethodName] == "tools/call" {
			calls += p.count
			if p.attrs[sc.GenAIToolName] != "refund" || p.attrs[sc.GenAIOperationName] != "execute_tool" ||
				p.attrs[sc.NetworkTransport] != "tcp" || p.attrs[sc.MCPProtocolVersion] != LegacyProtocol {
				t.Errorf("operation duration attributes %v", p.attrs)
			}
		}
	}
	if calls != 2 {
		t.Errorf("%d tools/call operation durations, want 2", calls)
	}
}

func testConcurrentDuplicates(t *testing.T, h Harness) {
	var runs counter
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	slow := Tool{Name: "export", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		runs.inc()
		once.Do(func() { close(started) })
		<-release
		return Result{Text: []string{"exported"}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{slow},
		opts: []instrument.Option{instrument.WithStatusTool("export", "export_status")}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	first := make(chan map[string]any, 1)
	go func() { first <- call(t, c, "export", map[string]any{"n": 1}, nil) }()
	<-started
	const n = 9
	answers := make([]map[string]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = call(t, c, "export", map[string]any{"n": 1}, nil) })
	}
	wg.Wait()
	close(release)
	if res := <-first; isError(res) || text(res) != "exported" {
		t.Fatalf("first %v", res)
	}
	if got := runs.get(); got != 1 {
		t.Fatalf("the tool ran %d times, want 1", got)
	}
	for _, a := range answers {
		m := marker(a, sc.RefusalMetaKey)
		if !isError(a) || m["reason"] != "in_progress" || m["status_tool"] != "export_status" || m["attempt"] != float64(1) {
			t.Errorf("duplicate answer %v", a)
		}
		if !strings.Contains(text(a), "Call export_status") || !strings.Contains(text(a), "Do not call it again now") {
			t.Errorf("in-progress text %q", text(a))
		}
	}
	if res := call(t, c, "export", map[string]any{"n": 1}, nil); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("after the first finished: %v", res)
	}
	spans := r.waitSpans("tools/call export", n+2)
	outcomes := map[string]int{}
	for _, s := range spans {
		a := attrs(s)
		outcomes[fmt.Sprint(a[sc.Outcome])]++
		if a[sc.Outcome] == "in_progress" && (a[sc.RefusalReason] != "in_progress" || a[sc.ErrorType] != "tool_error" || s.Status().Code != codes.Error) {
			t.Errorf("in-progress span %v %v", a, s.Status())
		}
	}
	if !reflect.DeepEqual(outcomes, map[string]int{"executed": 1, "in_progress": n, "replayed": 1}) {
		t.Errorf("outcomes %v", outcomes)
	}
	if got := sums(t, r.metrics()[sc.MetricInProgress]); !reflect.DeepEqual(got, map[string]int64{key(sc.GenAIToolName, "export"): n}) {
		t.Errorf("%s = %v", sc.MetricInProgress, got)
	}
}

func testMismatch(t *testing.T, h Harness) {
	var runs counter
	var sawKey bool
	tool := refundTool(&runs)
	inner := tool.Run
	tool.Run = func(ctx context.Context, args map[string]any) (Result, error) {
		if _, ok := args[sc.KeyArgument]; ok {
			sawKey = true
		}
		return inner(ctx, args)
	}
	r := start(t, h, setup{transport: InProcess, tools: []Tool{tool}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	first := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100, "idempotency_key": "k-1"}, nil)
	if isError(first) {
		t.Fatal(first)
	}
	res := call(t, c, "refund", map[string]any{"order_id": "o-2", "amount_cents": 100, "idempotency_key": "k-1"}, nil)
	if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != "mismatch" ||
		!strings.Contains(text(res), "already used for a call with different arguments") {
		t.Errorf("mismatch answer %v", res)
	}
	// The same key in params._meta, with the first arguments: the replay.
	res = call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100}, map[string]any{sc.KeyMetaKey: "k-1"})
	if marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("replay by _meta key %v", res)
	}
	if runs.get() != 1 || sawKey {
		t.Errorf("runs %d, the handler saw the key: %v", runs.get(), sawKey)
	}
	spans := r.waitSpans("tools/call refund", 3)
	if d := hasAttrs(spans[1], map[string]any{sc.Outcome: "mismatch", sc.RefusalReason: "mismatch", sc.KeySource: "explicit", sc.ErrorType: "tool_error"}); d != "" {
		t.Error(d)
	}
}

func testSubjects(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	alice := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	bob := r.connect(ClientConfig{Token: "token-bob", Protocol: LegacyProtocol})
	args := map[string]any{"order_id": "o-1", "amount_cents": 1}
	a := call(t, alice, "refund", args, nil)
	b := call(t, bob, "refund", args, nil)
	a2 := call(t, alice, "refund", args, nil)
	if runs.get() != 2 || marker(b, sc.ReplayMetaKey) != nil || marker(a2, sc.ReplayMetaKey) == nil {
		t.Errorf("runs %d; bob %v; alice again %v", runs.get(), b, a2)
	}
	if !strings.Contains(text(b), "run 2") || !strings.Contains(text(a), "run 1") {
		t.Errorf("bob got %q, alice %q", text(b), text(a))
	}
	spans := r.waitSpans("tools/call refund", 3)
	if attrs(spans[0])[sc.SubjectHash] == attrs(spans[1])[sc.SubjectHash] {
		t.Error("two subjects, one subject hash")
	}
	// An unknown token is refused before any MCP request.
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer nope")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown token: %s", resp.Status)
	}
}

// testSubjectsWithoutSessions: a subject is enough; calls are protected,
// and the listing says so, on a server whose sessions are not validated
// and for a client without a session.
func testSubjectsWithoutSessions(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTPUnvalidated, bearer: true, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Token: "token-alice"})
	tools, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !advertisesKey(tools, "refund") {
		t.Errorf("tools/list does not offer the key to an authenticated caller: %v", tools)
	}
	call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
	if res := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("%v", res)
	}
	if runs.get() != 1 || strings.Contains(r.log.String(), "refused") {
		t.Errorf("runs %d, log %s", runs.get(), r.log.String())
	}
}

func testSessions(t *testing.T, h Harness) {
	for _, tr := range []Transport{HTTP, InProcess} {
		t.Run(tr.String(), func(t *testing.T) {
			var runs counter
			r := start(t, h, setup{transport: tr, tools: []Tool{refundTool(&runs)}})
			c1 := r.connect(ClientConfig{Protocol: LegacyProtocol})
			c2 := r.connect(ClientConfig{Protocol: LegacyProtocol})
			args := map[string]any{"order_id": "o-1", "amount_cents": 1}
			call(t, c1, "refund", args, nil)
			res := call(t, c1, "refund", args, nil)
			if marker(res, sc.ReplayMetaKey) == nil {
				t.Errorf("same session: %v", res)
			}
			if res := call(t, c2, "refund", args, nil); marker(res, sc.ReplayMetaKey) != nil || isError(res) {
				t.Errorf("another session got the first session's result: %v", res)
			}
			if runs.get() != 2 {
				t.Errorf("runs %d, want 2 (one per session)", runs.get())
			}
			spans := r.waitSpans("tools/call refund", 3)
			if s1, s2 := attrs(spans[0])[sc.SubjectHash], attrs(spans[2])[sc.SubjectHash]; s1 == nil || s1 == s2 {
				t.Errorf("subject hashes of the two sessions' spans %v %v", s1, s2)
			}
			if s1, s2 := attrs(spans[0])[sc.MCPSessionID], attrs(spans[2])[sc.MCPSessionID]; tr == HTTP && (s1 == nil || s1 == s2) {
				t.Errorf("session IDs on the spans %v %v", s1, s2)
			}
			// The key is advertised: these callers' calls are protected.
			tools, err := c1.ListTools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !advertisesKey(tools, "refund") {
				t.Errorf("tools/list %v", tools)
			}
		})
	}
}

func advertisesKey(tools []map[string]any, name string) bool {
	for _, tl := range tools {
		if tl["name"] != name {
			continue
		}
		schema, _ := tl["inputSchema"].(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		_, ok := props[sc.KeyArgument]
		desc, _ := tl["description"].(string)
		return ok && strings.Contains(desc, "Retries are safe")
	}
	return false
}

// post sends one JSON-RPC message over HTTP with session ID sid.
func post(t *testing.T, url, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", LegacyProtocol)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

func testStranger(t *testing.T, h Harness) {
	const callBody = `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"refund","arguments":{"order_id":"o-1","amount_cents":1}}}`
	t.Run("validated sessions", func(t *testing.T) {
		var runs counter
		r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&runs)}})
		victim := r.connect(ClientConfig{Protocol: LegacyProtocol})
		call(t, victim, "refund", map[string]any{"order_id": "o-1", "amount_cents": 1}, nil)
		sid := victim.SessionID()
		if err := victim.Close(); err != nil {
			t.Fatal(err)
		}
		// A terminated session's ID, and a well-formed ID the server never
		// issued, are refused before any tool runs.
		for _, id := range []string{sid, forgedLike(sid)} {
			resp, body := post(t, r.srv.URL(), id, callBody)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("session %q: %s %s, want 404", id, resp.Status, body)
			}
			if strings.Contains(body, "Refunded") {
				t.Errorf("the stranger got a stored result: %s", body)
			}
		}
		if runs.get() != 1 {
			t.Errorf("runs %d", runs.get())
		}
	})
	t.Run("unvalidated sessions", func(t *testing.T) {
		var runs counter
		r := start(t, h, setup{transport: HTTPUnvalidated, tools: []Tool{refundTool(&runs)}})
		victim := r.connect(ClientConfig{Protocol: LegacyProtocol})
		res := call(t, victim, "refund", map[string]any{"order_id": "o-1", "amount_cents": 1}, nil)
		// The server does not vouch for its session IDs: the victim's own
		// call is refused, never run unprotected, and nothing is stored for
		// a stranger to get.
		if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != "unscoped" {
			t.Errorf("victim %v", res)
		}
		_, body := post(t, r.srv.URL(), victim.SessionID(), callBody)
		if strings.Contains(body, "Refunded") || strings.Contains(body, sc.ReplayMetaKey) {
			t.Errorf("the stranger got a stored result: %s", body)
		}
		if runs.get() != 0 {
			t.Errorf("runs %d", runs.get())
		}
	})
}

// forgedLike returns a session ID of the same shape as sid that no server
// issued: its hex digits are changed.
func forgedLike(sid string) string {
	b := []byte(sid)
	for i := len(b) - 1; i >= 0; i-- {
		c := b[i]
		if (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') {
			if c == '0' {
				b[i] = '1'
			} else {
				b[i] = '0'
			}
			if i < len(b)-4 {
				break
			}
		}
	}
	return string(b)
}

func testUnscopedRefused(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name      string
		transport Transport
		protocol  string
	}{
		{"sessionless client (default protocol)", HTTPUnvalidated, ""},
		{"unvalidated sessions", HTTPUnvalidated, LegacyProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs, reads counter
			lookup := Tool{Name: "lookup", ReadOnly: true, Run: func(context.Context, map[string]any) (Result, error) {
				reads.inc()
				return Result{Text: []string{"ok"}}, nil
			}}
			r := start(t, h, setup{transport: tc.transport, tools: []Tool{refundTool(&runs), lookup}})
			c := r.connect(ClientConfig{Protocol: tc.protocol})
			for i := range 13 {
				args := map[string]any{"order_id": "o-1", "amount_cents": 1}
				if i%2 == 1 {
					args["idempotency_key"] = "k-1"
				}
				res := call(t, c, "refund", args, nil)
				if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != "unscoped" || !strings.Contains(text(res), "nothing was done") {
					t.Fatalf("call %d: %v", i, res)
				}
			}
			if res := call(t, c, "lookup", nil, nil); isError(res) {
				t.Errorf("a read-only tool was refused: %v", res)
			}
			if runs.get() != 0 || reads.get() != 1 {
				t.Errorf("runs: refund %d (want 0), lookup %d", runs.get(), reads.get())
			}
			log := r.log.String()
			if strings.Count(log, "tool=refund") != 1 || strings.Contains(log, "tool=lookup") || !strings.Contains(log, "instrument.WithSubject") {
				t.Errorf("want one log line naming refund and what to configure, got:\n%s", log)
			}
			tools, err := c.ListTools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if advertisesKey(tools, "refund") {
				t.Error("tools/list says retries are safe for calls that are refused")
			}
			spans := r.waitSpans("tools/call refund", 13)
			if d := hasAttrs(spans[0], map[string]any{sc.RefusalReason: "unscoped", sc.ErrorType: "tool_error", sc.Outcome: absent, sc.KeyHash: absent}); d != "" {
				t.Error(d)
			}
		})
	}
}

func testUnscopedOptIns(t *testing.T, h Harness) {
	t.Run("shared scope", func(t *testing.T) {
		var runs counter
		r := start(t, h, setup{transport: HTTPUnvalidated, tools: []Tool{refundTool(&runs)},
			opts: []instrument.Option{instrument.WithUnscopedCalls(instrument.UnscopedShare)}})
		c1, c2 := r.connect(ClientConfig{}), r.connect(ClientConfig{})
		call(t, c1, "refund", map[string]any{"order_id": "o-1"}, nil)
		if res := call(t, c2, "refund", map[string]any{"order_id": "o-1"}, nil); marker(res, sc.ReplayMetaKey) == nil {
			t.Errorf("shared scope: %v", res)
		}
		tools, _ := c1.ListTools(context.Background())
		if runs.get() != 1 || !advertisesKey(tools, "refund") {
			t.Errorf("runs %d, tools %v", runs.get(), tools)
		}
	})
	t.Run("bypass", func(t *testing.T) {
		var runs counter
		r := start(t, h, setup{transport: HTTPUnvalidated, tools: []Tool{refundTool(&runs)},
			opts: []instrument.Option{instrument.WithUnscopedCalls(instrument.UnscopedBypass)}})
		c := r.connect(ClientConfig{})
		call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
		call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
		tools, _ := c.ListTools(context.Background())
		if runs.get() != 2 || advertisesKey(tools, "refund") {
			t.Errorf("runs %d; advertised %v", runs.get(), advertisesKey(tools, "refund"))
		}
		spans := r.waitSpans("tools/call refund", 2)
		if d := hasAttrs(spans[1], map[string]any{sc.Outcome: "bypassed", sc.BypassReason: "unscoped"}); d != "" || attrs(spans[1])[sc.KeyHash] == nil {
			t.Errorf("%s; %v", d, attrs(spans[1]))
		}
	})
}

func testRequestIDs(t *testing.T, h Harness) {
	for _, tr := range []Transport{HTTP, Stdio} {
		t.Run(tr.String(), func(t *testing.T) {
			echo := Tool{Name: "echo", ReadOnly: true, Run: func(_ context.Context, args map[string]any) (Result, error) {
				n, _ := args["n"].(float64)
				time.Sleep(time.Duration(int(n)%4) * time.Millisecond) // interleave
				return Result{Text: []string{strconv.Itoa(int(n))}}, nil
			}}
			r := start(t, h, setup{transport: tr, tools: []Tool{echo}, opts: []instrument.Option{instrument.WithRecordArguments(0)}})
			wire := &Wire{}
			c := r.connect(ClientConfig{Protocol: LegacyProtocol, Wire: wire})
			const n = 32
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					res, err := c.CallTool(context.Background(), "echo", map[string]any{"n": i}, nil)
					if err != nil || text(res) != strconv.Itoa(i) {
						t.Errorf("call %d: %v %v", i, err, res)
					}
				})
			}
			wg.Wait()
			want := map[string]string{} // arguments -> request ID on the wire
			for _, m := range wire.Messages("tools/call") {
				var p struct {
					Arguments json.RawMessage `json:"arguments"`
				}
				_ = json.Unmarshal(m.Params, &p)
				want[canonical(t, p.Arguments)] = formatID(t, m.ID)
			}
			if len(want) != n {
				t.Fatalf("%d distinct calls on the wire, want %d", len(want), n)
			}
			seen := map[string]bool{}
			for _, s := range r.waitSpans("tools/call echo", n) {
				a := attrs(s)
				args, _ := a[sc.GenAIToolCallArguments].(string)
				id, ok := want[canonical(t, json.RawMessage(args))]
				if !ok {
					t.Fatalf("span with arguments %q not on the wire", args)
				}
				if a[sc.JSONRPCRequestID] != id {
					t.Errorf("arguments %s: jsonrpc.request.id %v, want %q", args, a[sc.JSONRPCRequestID], id)
				}
				seen[id] = true
				if tr == Stdio && (a[sc.NetworkTransport] != "pipe" || a[sc.MCPSessionID] != nil) {
					t.Errorf("stdio span: network.transport %v, mcp.session.id %v (want pipe, absent)", a[sc.NetworkTransport], a[sc.MCPSessionID])
				}
			}
			if len(seen) != n {
				t.Errorf("%d distinct request IDs on %d spans", len(seen), n)
			}
		})
	}
}

func canonical(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	b, err := canonjson.Transform(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return string(b)
}

func testProgress(t *testing.T, h Harness) {
	var runs counter
	var progressErrs []error
	var mu sync.Mutex
	release := make(chan struct{})
	reported := make(chan struct{})
	tool := Tool{Name: "export", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		runs.inc()
		for i := range 3 {
			err := instrument.Progress(ctx, float64(i+1), 3, "step")
			mu.Lock()
			progressErrs = append(progressErrs, err)
			mu.Unlock()
		}
		close(reported)
		<-release
		return Result{Text: []string{"done"}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{tool}})
	var got []float64
	var gotMu sync.Mutex
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol, OnProgress: func(p float64) {
		gotMu.Lock()
		got = append(got, p)
		gotMu.Unlock()
	}})
	done := make(chan map[string]any, 1)
	go func() { done <- call(t, c, "export", nil, map[string]any{"progressToken": "tok-1"}) }()
	<-reported
	// Wait for the three notifications before sending the duplicate: mcp-go
	// queues a session's notifications on one channel that every open POST
	// stream of the session drains, so a notification still queued when the
	// duplicate's request opens may be delivered on the duplicate's stream,
	// out of order. The order asserted is one stream's.
	deadline := time.Now().Add(5 * time.Second)
	for {
		gotMu.Lock()
		n := len(got)
		gotMu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	dup := call(t, c, "export", nil, nil)
	close(release)
	if res := <-done; text(res) != "done" {
		t.Fatalf("%v", res)
	}
	if marker(dup, sc.RefusalMetaKey)["reason"] != "in_progress" || runs.get() != 1 {
		t.Errorf("duplicate during the work: %v (runs %d)", dup, runs.get())
	}
	for _, err := range progressErrs {
		if err != nil {
			t.Errorf("Progress: %v", err)
		}
	}
	gotMu.Lock()
	defer gotMu.Unlock()
	if !reflect.DeepEqual(got, []float64{1, 2, 3}) {
		t.Errorf("progress notifications %v, want [1 2 3]", got)
	}
}

// Jobs live in the Guard's store: two replicas sharing it start the work
// once (the duplicate start call on the other replica gets the same job
// ID, replayed), and either reports the job.
func testJobs(t *testing.T, h Harness) {
	store := &idemkit.MemoryStore{}
	var runs counter
	release := make(chan struct{})
	work := Tool{Name: "export", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		n := runs.inc()
		if err := instrument.Progress(ctx, 1, 3, "copying"); err != nil {
			return Result{}, err
		}
		<-release
		instrument.RecordWrite(ctx, "exp_1")
		return Result{Text: []string{fmt.Sprintf("exported %v (run %d)", args["what"], n)}}, nil
	}}
	cfg := &jobs.Config{Lease: 2 * time.Second, Heartbeat: 50 * time.Millisecond}
	a := start(t, h, setup{transport: HTTP, bearer: true, store: store, jobTools: []Tool{work}, jobsCfg: cfg})
	b := start(t, h, setup{transport: HTTP, bearer: true, store: store, jobTools: []Tool{work}, jobsCfg: cfg})
	ca := a.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	cb := b.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	first := call(t, ca, "export", map[string]any{"what": "orders"}, nil)
	second := call(t, cb, "export", map[string]any{"what": "orders"}, nil)
	sc1, _ := first["structuredContent"].(map[string]any)
	sc2, _ := second["structuredContent"].(map[string]any)
	jobID, _ := sc1["job_id"].(string)
	if !strings.HasPrefix(jobID, "job_") || sc2["job_id"] != jobID || marker(second, sc.ReplayMetaKey) == nil {
		t.Fatalf("start answers %v / %v: want one job, the other replica's answer replayed", first, second)
	}
	if sc1["status_tool"] != "export_status" || !strings.Contains(text(first), "call export_status") {
		t.Errorf("start answer %v", first)
	}
	// The other replica reports the running job, with its progress.
	deadline := time.Now().Add(5 * time.Second)
	var running map[string]any
	for {
		running = call(t, cb, "export_status", map[string]any{"job_id": jobID}, nil)
		if strings.Contains(text(running), "1 of 3 (copying)") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if marker(running, sc.JobMetaKey)["state"] != "running" || !strings.Contains(text(running), "is still running: 1 of 3 (copying)") {
		t.Errorf("running status on the other replica %v", running)
	}
	close(release)
	var status map[string]any
	for {
		status = call(t, cb, "export_status", map[string]any{"job_id": jobID}, nil)
		if marker(status, sc.JobMetaKey)["state"] == "succeeded" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if text(status) != "exported orders (run 1)" || marker(status, sc.JobMetaKey)["job_id"] != jobID {
		t.Errorf("final status %v", status)
	}
	if runs.get() != 1 {
		t.Errorf("the work ran %d times", runs.get())
	}
	// Another caller cannot read the job, on either replica.
	for _, r := range []*rig{a, b} {
		bob := r.connect(ClientConfig{Token: "token-bob", Protocol: LegacyProtocol})
		if res := call(t, bob, "export_status", map[string]any{"job_id": jobID}, nil); !isError(res) || !strings.Contains(text(res), "No job") {
			t.Errorf("another subject read the job: %v", res)
		}
	}
	tools, err := ca.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if tl["name"] == "export" {
			meta, _ := tl["_meta"].(map[string]any)
			if meta[sc.StatusToolMetaKey] != "export_status" {
				t.Errorf("the start tool's _meta %v", tl["_meta"])
			}
		}
	}
}

func testMalformed(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	for _, tc := range []struct {
		args   map[string]any
		meta   map[string]any
		reason string
	}{
		{map[string]any{"order_id": "o-1", "amount_cents": "100"}, nil, "invalid_arguments"},
		{map[string]any{"order_id": "o-1", "amount_cents": 12.5}, nil, "invalid_arguments"},
		{map[string]any{"order_id": "o-1", "amount_cents": 1, "idempotency_key": 5}, nil, "invalid_key"},
		{map[string]any{"order_id": "o-1", "amount_cents": 1, "idempotency_key": strings.Repeat("k", 300)}, nil, "invalid_key"},
		{map[string]any{"order_id": "o-1", "amount_cents": 1}, map[string]any{sc.KeyMetaKey: 7}, "invalid_key"},
		{map[string]any{"order_id": "o-1", "amount_cents": 1, "idempotency_key": "a"}, map[string]any{sc.KeyMetaKey: "b"}, "invalid_key"},
	} {
		res := call(t, c, "refund", tc.args, tc.meta)
		if !isError(res) {
			t.Errorf("%v %v accepted: %v", tc.args, tc.meta, res)
			continue
		}
		if m := marker(res, sc.RefusalMetaKey); m["reason"] != tc.reason || !strings.Contains(text(res), "nothing was done") {
			t.Errorf("%v %v: refusal %v (%q), want reason %s", tc.args, tc.meta, m, text(res), tc.reason)
		}
	}
	if runs.get() != 0 {
		t.Errorf("the tool ran %d times on malformed calls", runs.get())
	}
	spans := r.waitSpans("tools/call refund", 6)
	for i, s := range spans {
		a := attrs(s)
		if a[sc.ErrorType] != "tool_error" || a[sc.Outcome] != nil || a[sc.RefusalReason] == nil || s.Status().Code != codes.Error {
			t.Errorf("span %d: %v %v", i, a, s.Status())
		}
	}
	if _, ok := r.metrics()[sc.MetricClaimDuration]; ok {
		t.Error("a malformed call was claimed")
	}
	// A retry typed correctly runs once; 1250 and 1250.0 are the same call.
	call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 1250}, nil)
	if res := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 1250.0}, nil); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("1250.0 after 1250: %v", res)
	}
	if runs.get() != 1 {
		t.Errorf("runs %d", runs.get())
	}
}

func testKeyStripped(t *testing.T, h Harness) {
	var runs counter
	var seen []map[string]any
	strict := Tool{Name: "strict",
		Schema: map[string]any{"type": "object", "additionalProperties": false,
			"properties": map[string]any{"a": map[string]any{"type": "integer"}}},
		Run: func(_ context.Context, args map[string]any) (Result, error) {
			runs.inc()
			seen = append(seen, args)
			return Result{Text: []string{"ok"}}, nil
		}}
	declares := Tool{Name: "declares",
		Schema: map[string]any{"type": "object", "properties": map[string]any{sc.KeyArgument: map[string]any{"type": "string"}}},
		Run: func(_ context.Context, args map[string]any) (Result, error) {
			seen = append(seen, args)
			return Result{Text: []string{"ok"}}, nil
		}}
	// A property of that name inside another property is an ordinary
	// argument: the tool's own schema does not declare the key.
	var nestedRuns counter
	var nestedSeen []map[string]any
	nested := Tool{Name: "nested",
		Schema: map[string]any{"type": "object", "properties": map[string]any{"order": map[string]any{
			"type": "object", "properties": map[string]any{sc.KeyArgument: map[string]any{"type": "string"}}}}},
		Run: func(_ context.Context, args map[string]any) (Result, error) {
			nestedRuns.inc()
			nestedSeen = append(nestedSeen, args)
			return Result{Text: []string{"ok"}}, nil
		}}
	r := start(t, h, setup{transport: InProcess, tools: []Tool{strict, declares, nested}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	tools, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !advertisesKey(tools, "strict") {
		t.Errorf("tools/list %v", tools)
	}
	if !advertisesKey(tools, "nested") {
		t.Errorf("a tool with a nested %s property must be advertised the key: %v", sc.KeyArgument, tools)
	}
	nestedArgs := map[string]any{"order": map[string]any{sc.KeyArgument: "inner"}, sc.KeyArgument: "k3"}
	call(t, c, "nested", nestedArgs, nil)
	if res := call(t, c, "nested", nestedArgs, nil); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("the nested tool's duplicate was not replayed: %v", res)
	}
	if nestedRuns.get() != 1 || len(nestedSeen) != 1 {
		t.Fatalf("the nested tool ran %d times, seen %v", nestedRuns.get(), nestedSeen)
	}
	if _, ok := nestedSeen[0][sc.KeyArgument]; ok || !reflect.DeepEqual(nestedSeen[0]["order"], map[string]any{sc.KeyArgument: "inner"}) {
		t.Errorf("the nested tool's handler got %v: the top-level key must be stripped, the nested property kept", nestedSeen[0])
	}
	if res := call(t, c, "strict", map[string]any{"a": 1, "idempotency_key": "k"}, nil); isError(res) {
		t.Fatalf("a strict schema rejected the advertised key: %v", res)
	}
	if res := call(t, c, "strict", map[string]any{"a": 1, "idempotency_key": "k"}, nil); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("%v", res)
	}
	call(t, c, "declares", map[string]any{"idempotency_key": "k2"}, nil)
	if runs.get() != 1 || len(seen) != 2 {
		t.Fatalf("runs %d, seen %v", runs.get(), seen)
	}
	if _, ok := seen[0][sc.KeyArgument]; ok {
		t.Errorf("the handler saw the key: %v", seen[0])
	}
	if seen[1][sc.KeyArgument] != "k2" {
		t.Errorf("a tool that declares the key did not get it: %v", seen[1])
	}
}

func testSpanShape(t *testing.T, h Harness) {
	boom := errors.New("boom")
	tools := []Tool{
		{Name: "ok", ReadOnly: true, Run: func(context.Context, map[string]any) (Result, error) { return Result{Text: []string{"ok"}}, nil }},
		{Name: "fails", ReadOnly: true, Run: func(context.Context, map[string]any) (Result, error) {
			return Result{Text: []string{"no"}, IsError: true}, nil
		}},
		{Name: "errs", ReadOnly: true, Run: func(context.Context, map[string]any) (Result, error) { return Result{}, boom }},
		// Declared idempotent, so not protected: it may still write, and
		// its span carries the hashes that show a leaked duplicate.
		{Name: "set_status", Idempotent: true, Run: func(context.Context, map[string]any) (Result, error) { return Result{Text: []string{"set"}}, nil }},
	}
	r := start(t, h, setup{transport: HTTP, tools: tools, prompts: []string{"summarise"}, resources: []string{"file:///notes.txt"}})
	wire := &Wire{}
	c := r.connect(ClientConfig{Protocol: LegacyProtocol, Wire: wire})
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Ping(ctx))
	_, err := c.ListTools(ctx)
	must(err)
	must(c.ListPrompts(ctx))
	must(c.GetPrompt(ctx, "summarise"))
	must(c.ListResources(ctx))
	must(c.ReadResource(ctx, "file:///notes.txt"))
	call(t, c, "ok", map[string]any{"q": "x"}, nil)
	call(t, c, "set_status", map[string]any{"order_id": "o-1", "status": "shipped"}, nil)
	call(t, c, "fails", nil, nil)
	// A notification the SDK client has no method for.
	if resp, body := post(t, r.srv.URL(), c.SessionID(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999,"reason":"user"}}`); resp.StatusCode >= 300 {
		t.Fatalf("notifications/cancelled: HTTP %d %s", resp.StatusCode, body)
	}
	_, errsErr := c.CallTool(ctx, "errs", nil, nil)
	_, missingErr := c.CallTool(ctx, "missing", nil, nil)

	base := map[string]any{
		string(semconv.McpSessionIDKey): exportedSessionID(c.SessionID()), string(semconv.McpProtocolVersionKey): c.ProtocolVersion(),
		string(semconv.NetworkTransportKey): "tcp", string(semconv.NetworkProtocolNameKey): "http",
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	noTool := []any{string(semconv.GenAIOperationNameKey), absent, string(semconv.GenAIToolNameKey), absent, string(semconv.ErrorTypeKey), absent}
	for _, tc := range []struct {
		name  string
		attrs map[string]any
	}{
		{"initialize", with(append([]any{string(semconv.McpMethodNameKey), "initialize"}, noTool...)...)},
		{"ping", with(append([]any{string(semconv.McpMethodNameKey), "ping"}, noTool...)...)},
		{"tools/list", with(append([]any{string(semconv.McpMethodNameKey), "tools/list"}, noTool...)...)},
		{"prompts/list", with(string(semconv.McpMethodNameKey), "prompts/list")},
		{"prompts/get summarise", with(string(semconv.McpMethodNameKey), "prompts/get", string(semconv.GenAIPromptNameKey), "summarise")},
		{"resources/list", with(string(semconv.McpMethodNameKey), "resources/list")},
		{"resources/read", with(string(semconv.McpMethodNameKey), "resources/read", string(semconv.McpResourceURIKey), "file:///notes.txt")},
		{"tools/call ok", with(string(semconv.McpMethodNameKey), "tools/call", string(semconv.GenAIOperationNameKey), "execute_tool",
			string(semconv.GenAIToolNameKey), "ok", string(semconv.ErrorTypeKey), absent, sc.Outcome, "bypassed", sc.BypassReason, "unprotected",
			sc.ArgsHash, absent, sc.KeyHash, absent)},
		{"tools/call set_status", with(string(semconv.McpMethodNameKey), "tools/call", string(semconv.GenAIToolNameKey), "set_status",
			sc.Outcome, "bypassed", sc.BypassReason, "unprotected", sc.ArgsHash, present, sc.KeyHash, present, sc.KeySource, "derived")},
		// Notifications: named after the method, no request ID.
		{"notifications/initialized", with(append([]any{string(semconv.McpMethodNameKey), "notifications/initialized",
			string(semconv.JSONRPCRequestIDKey), absent}, noTool...)...)},
		{"notifications/cancelled", with(append([]any{string(semconv.McpMethodNameKey), "notifications/cancelled",
			string(semconv.JSONRPCRequestIDKey), absent}, noTool...)...)},
	} {
		spans := r.waitSpans(tc.name, 1)
		s := spans[0]
		if s.SpanKind() != trace.SpanKindServer || s.Status().Code != codes.Unset {
			t.Errorf("%s: kind %v status %v", tc.name, s.SpanKind(), s.Status())
		}
		if d := hasAttrs(s, tc.attrs); d != "" {
			t.Errorf("%s: %s", tc.name, d)
		}
		if tc.name != "initialize" && !strings.HasPrefix(tc.name, "notifications/") && attrs(s)[string(semconv.JSONRPCRequestIDKey)] == nil {
			t.Errorf("%s: no jsonrpc.request.id", tc.name)
		}
	}
	init := r.waitSpans("initialize", 1)[0]
	if ids := wire.Messages("initialize"); len(ids) != 1 || attrs(init)[sc.JSONRPCRequestID] != formatID(t, ids[0].ID) {
		t.Errorf("initialize request ID %v, wire %v", attrs(init)[sc.JSONRPCRequestID], ids)
	}

	// Error classes: an isError result, a handler's Go error (the
	// JSON-RPC error the SDK sends), an unknown tool.
	fails := r.waitSpans("tools/call fails", 1)[0]
	if d := hasAttrs(fails, map[string]any{string(semconv.ErrorTypeKey): "tool_error", string(semconv.RPCResponseStatusCodeKey): absent}); d != "" || fails.Status().Code != codes.Error {
		t.Errorf("isError: %s %v", d, fails.Status())
	}
	for _, tc := range []struct {
		span string
		err  error
	}{{"tools/call errs", errsErr}, {"tools/call missing", missingErr}} {
		var rpcErr *RPCError
		if !errors.As(tc.err, &rpcErr) {
			t.Errorf("%s: the client got %v, not a JSON-RPC error", tc.span, tc.err)
			continue
		}
		s := r.waitSpans(tc.span, 1)[0]
		code := strconv.FormatInt(rpcErr.Code, 10)
		if d := hasAttrs(s, map[string]any{string(semconv.ErrorTypeKey): code, string(semconv.RPCResponseStatusCodeKey): code,
			string(semconv.GenAIOperationNameKey): "execute_tool"}); d != "" {
			t.Errorf("%s: %s", tc.span, d)
		}
		if s.Status().Code != codes.Error || s.Status().Description != rpcErr.Message {
			t.Errorf("%s: status %v, want Error %q", tc.span, s.Status(), rpcErr.Message)
		}
	}

	// Every method's duration, by the conventions' attributes.
	methods := map[string]uint64{}
	for _, p := range histPoints(t, r.metrics()[sc.MetricOperationDuration]) {
		m, _ := p.attrs[sc.MCPMethodName].(string)
		methods[m] += p.count
		if p.attrs[sc.NetworkTransport] != "tcp" {
			t.Errorf("operation duration without network.transport: %v", p.attrs)
		}
		if p.attrs[sc.MCPSessionID] != nil || p.attrs[sc.JSONRPCRequestID] != nil {
			t.Errorf("high-cardinality attribute on a metric: %v", p.attrs)
		}
	}
	for _, m := range []string{"initialize", "ping", "tools/list", "prompts/list", "prompts/get", "resources/list", "resources/read",
		"notifications/initialized", "notifications/cancelled"} {
		if methods[m] != 1 {
			t.Errorf("%s: %d operation durations (all: %v)", m, methods[m], methods)
		}
	}
	if methods["tools/call"] != 5 {
		t.Errorf("tools/call: %d operation durations", methods["tools/call"])
	}
}

func testTraceContext(t *testing.T, h Harness) {
	tool := Tool{Name: "echo", ReadOnly: true, Run: func(ctx context.Context, _ map[string]any) (Result, error) {
		return Result{Text: []string{trace.SpanContextFromContext(ctx).SpanID().String()}}, nil
	}}
	r := start(t, h, setup{transport: InProcess, tools: []Tool{tool}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	res := call(t, c, "echo", nil, map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	s := r.waitSpans("tools/call echo", 1)[0]
	if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("parent %v", s.Parent())
	}
	if text(res) != s.SpanContext().SpanID().String() {
		t.Errorf("the handler's span is %s, want the request span %s", text(res), s.SpanContext().SpanID())
	}
}

// deadStore fails every claim.
type deadStore struct{ idemkit.MemoryStore }

func (*deadStore) Claim(context.Context, idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, errors.New("connection refused")
}

func testStoreDown(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: InProcess, store: &deadStore{}, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	res := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
	if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != "store_unavailable" || runs.get() != 0 {
		t.Errorf("%v (runs %d)", res, runs.get())
	}
}

func testSessionDuration(t *testing.T, h Harness) {
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&counter{})}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n uint64
		points := histPoints(t, r.metrics()[sc.MetricSessionDuration])
		for _, p := range points {
			n += p.count
		}
		if n == 1 {
			if p := points[0].attrs; p[sc.NetworkTransport] != "tcp" || p[sc.MCPProtocolVersion] != LegacyProtocol {
				t.Errorf("session duration attributes %v", p)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session durations after the session ended, want 1", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testObserveOnly(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: InProcess, noGuard: true, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
	call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil)
	tools, _ := c.ListTools(context.Background())
	if runs.get() != 2 || advertisesKey(tools, "refund") {
		t.Errorf("runs %d, advertised %v", runs.get(), advertisesKey(tools, "refund"))
	}
	spans := r.waitSpans("tools/call refund", 2)
	if d := hasAttrs(spans[1], map[string]any{sc.Outcome: "bypassed", sc.BypassReason: "no_guard"}); d != "" || attrs(spans[1])[sc.KeyHash] == nil {
		t.Errorf("%s %v", d, attrs(spans[1]))
	}
}
