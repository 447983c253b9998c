package mcpcall

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

const refundResult = `{"content":[{"type":"text","text":"Refunded o-1"}],"structuredContent":{"refund_id":"re_1","amount":1.0}}`

func subjectAlice(context.Context) string { return "alice" }

func withSubject(fn func(context.Context) string) func(*Config) {
	return func(c *Config) { c.Subject = fn }
}

func TestCallTool_ReplayIsTheStoredResultPlusTheMarker(t *testing.T) {
	r := newRig(t, rigConfig{cfg: withSubject(subjectAlice), session: "s-1"})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	tool.run = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		RecordWrite(ctx, "re_1")
		return json.RawMessage(refundResult), nil
	}
	args := `{"order_id":"o-1","amount_cents":1250}`
	first := result(t, r.call("refund", args, nil))
	second := result(t, r.call("refund", `{"amount_cents":1250.0,"order_id":"o-1"}`, nil)) // same canonical arguments
	if n := tool.count(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(refundResult), &want)
	if !reflect.DeepEqual(first, want) {
		t.Errorf("first result %v, want the upstream's %v", first, want)
	}
	marker := metaOf(second, sc.ReplayMetaKey)
	if !reflect.DeepEqual(marker, map[string]any{"replayed": true, "attempt": float64(1), "write_id": "re_1"}) {
		t.Errorf("marker %v", marker)
	}
	delete(second, "_meta")
	if !reflect.DeepEqual(second, want) {
		t.Errorf("replay minus marker %v, want %v", second, want)
	}

	spans := r.spans("tools/call refund")
	if len(spans) != 2 {
		t.Fatalf("%d spans named tools/call refund", len(spans))
	}
	k, _ := idemkit.NewKey("alice", "refund", []byte(args), nil)
	base := func(id, outcome string) map[string]any {
		return map[string]any{
			sc.MCPMethodName: "tools/call", sc.GenAIOperationName: "execute_tool", sc.GenAIToolName: "refund",
			sc.JSONRPCRequestID: id, sc.MCPSessionID: hashkey.Hasher{}.SessionHash("s-1"), sc.MCPProtocolVersion: "2025-11-25", sc.NetworkTransport: "pipe",
			sc.ArgsHash: k.ArgsHash()[:32], sc.KeyHash: k.Hash(), sc.KeySource: "derived",
			sc.SubjectHash: clip.Hash("alice"), sc.Outcome: outcome, sc.Attempt: int64(1), sc.WriteID: "re_1",
		}
	}
	assertAttrs(t, spans[0], base("1", "executed"))
	assertAttrs(t, spans[1], base("2", "replayed"))
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindServer || s.Status().Code != codes.Unset {
			t.Errorf("kind %v status %v", s.SpanKind(), s.Status())
		}
		if s.InstrumentationScope().Name != ScopeName || s.InstrumentationScope().SchemaURL != schemaURL {
			t.Errorf("scope %+v", s.InstrumentationScope())
		}
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
	if got := histCounts(t, ms[sc.MetricClaimDuration]); !reflect.DeepEqual(got, map[string]uint64{key(sc.GenAIToolName, "refund"): 2}) {
		t.Errorf("%s = %v", sc.MetricClaimDuration, got)
	}
	if got := histCounts(t, ms["mcp.server.operation.duration"]); !reflect.DeepEqual(got, map[string]uint64{
		key(sc.MCPMethodName, "tools/call", sc.GenAIOperationName, "execute_tool", sc.GenAIToolName, "refund",
			sc.MCPProtocolVersion, "2025-11-25", sc.NetworkTransport, "pipe"): 2,
	}) {
		t.Errorf("mcp.server.operation.duration = %v", got)
	}
}

func TestCallTool_ConcurrentDuplicatesRunOnce(t *testing.T) {
	r := newRig(t, rigConfig{local: true, guard: &idemkit.Config{Lease: time.Minute}})
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	tool := r.tool("export", ToolInfo{StatusTool: "export_status"}, "")
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		once.Do(func() { close(started) })
		<-release
		return json.RawMessage(`{"content":[]}`), nil
	}
	done := make(chan map[string]any, 1)
	go func() { done <- r.call("export", `{"n":1}`, nil) }()
	<-started
	var wg sync.WaitGroup
	answers := make([]map[string]any, 8)
	for i := range answers {
		wg.Go(func() { answers[i] = r.call("export", `{"n":1}`, nil) })
	}
	wg.Wait()
	close(release)
	if res := result(t, <-done); isError(res) {
		t.Fatalf("first call %v", res)
	}
	if n := tool.count(); n != 1 {
		t.Fatalf("upstream ran %d times", n)
	}
	for _, a := range answers {
		res := result(t, a)
		m := metaOf(res, sc.RefusalMetaKey)
		if !isError(res) || m["reason"] != "in_progress" || m["status_tool"] != "export_status" || m["attempt"] != float64(1) {
			t.Errorf("duplicate answer %v", res)
		}
		if ms, _ := m["retry_after_ms"].(float64); ms <= 0 || ms > 60000 {
			t.Errorf("retry_after_ms %v", m["retry_after_ms"])
		}
		if !strings.Contains(text(res), "Call export_status") {
			t.Errorf("in-progress text %q", text(res))
		}
	}
	ms := r.metrics()
	if got := sums(t, ms[sc.MetricToolCalls])[key(sc.GenAIToolName, "export", sc.Outcome, "in_progress", sc.RefusalReason, "in_progress")]; got != 8 {
		t.Errorf("in-progress calls %d", got)
	}
	if got := sums(t, ms[sc.MetricInProgress])[key(sc.GenAIToolName, "export")]; got != 8 {
		t.Errorf("%s %d", sc.MetricInProgress, got)
	}
}

func TestCallTool_StatusToolPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guard *idemkit.Config
		cfg   map[string]string
		info  string
		want  string
	}{
		{"guard config first", &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"t": {StatusTool: "from_guard"}}}, map[string]string{"t": "from_option"}, "from_meta", "from_guard"},
		{"then the option", nil, map[string]string{"t": "from_option"}, "from_meta", "from_option"},
		{"then the tool's _meta", nil, nil, "from_meta", "from_meta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigConfig{local: true, guard: tc.guard, cfg: func(c *Config) { c.StatusTools = tc.cfg }})
			release, started := make(chan struct{}), make(chan struct{})
			tool := r.tool("t", ToolInfo{StatusTool: tc.info}, "")
			tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
				close(started)
				<-release
				return json.RawMessage(`{"content":[]}`), nil
			}
			done := make(chan struct{})
			go func() { defer close(done); r.call("t", "", nil) }()
			<-started
			res := result(t, r.call("t", "", nil))
			close(release)
			<-done
			if got := metaOf(res, sc.RefusalMetaKey)["status_tool"]; got != tc.want || !strings.Contains(text(res), "Call "+tc.want) {
				t.Errorf("status tool %v in %q, want %s", got, text(res), tc.want)
			}
		})
	}
}

func TestCallTool_ExplicitKeyReusedWithOtherArgumentsIsRejected(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	if res := result(t, r.call("refund", `{"order":"o-1","idempotency_key":"k-1"}`, nil)); isError(res) {
		t.Fatal(res)
	}
	res := result(t, r.call("refund", `{"order":"o-2"}`, map[string]any{sc.KeyMetaKey: "k-1"}))
	if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != "mismatch" || !strings.Contains(text(res), "already used for a call with different arguments") {
		t.Errorf("mismatch answer %v", res)
	}
	if tool.count() != 1 {
		t.Errorf("upstream ran %d times", tool.count())
	}
	a := r.last()
	if a[sc.Outcome] != "mismatch" || a[sc.RefusalReason] != "mismatch" || a[sc.ErrorType] != "tool_error" || a[sc.KeySource] != "explicit" {
		t.Errorf("span %v", a)
	}
	// The same key with the same arguments replays, whichever way it is sent.
	res = result(t, r.call("refund", `{"order":"o-1"}`, map[string]any{sc.KeyArgument: "k-1"}))
	if metaOf(res, sc.ReplayMetaKey) == nil || tool.count() != 1 {
		t.Errorf("replay by _meta key %v", res)
	}
}

func TestCallTool_UnidentifiedCallersAreRefusedAndLoggedOncePerTool(t *testing.T) {
	r := newRig(t, rigConfig{session: "forged-or-unvalidated"}) // a session ID the server does not vouch for
	refund := r.tool("refund", ToolInfo{}, refundResult)
	export := r.tool("export", ToolInfo{}, refundResult)
	lookup := r.tool("lookup", ToolInfo{ReadOnlyHint: true}, refundResult)
	for range 3 {
		res := result(t, r.call("refund", `{"order":"o-1","idempotency_key":"k"}`, nil))
		if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != "unscoped" || !strings.Contains(text(res), "nothing was done") {
			t.Fatalf("refusal %v", res)
		}
	}
	result(t, r.call("export", `{}`, nil))
	if res := result(t, r.call("lookup", `{}`, nil)); isError(res) {
		t.Errorf("a read-only tool was refused: %v", res)
	}
	if refund.count() != 0 || export.count() != 0 || lookup.count() != 1 {
		t.Errorf("runs: refund %d export %d lookup %d", refund.count(), export.count(), lookup.count())
	}
	log := r.logged()
	if strings.Count(log, "tool=refund") != 1 || strings.Count(log, "tool=export") != 1 || strings.Contains(log, "tool=lookup") {
		t.Errorf("log lines:\n%s", log)
	}
	if !strings.Contains(log, "instrument.WithSubject") || !strings.Contains(log, "level=ERROR") {
		t.Errorf("the log line does not say what to configure:\n%s", log)
	}
	a := attrMap(r.spans("tools/call refund")[0])
	if a[sc.RefusalReason] != "unscoped" || a[sc.ErrorType] != "tool_error" || a[sc.KeyHash] != nil || a[sc.Outcome] != nil {
		t.Errorf("refused span %v", a)
	}
	if in := r.srv.in; in.AdvertisesKey("refund", ToolInfo{}, Scope{}) || in.Protects("refund", ToolInfo{}, Scope{}) {
		t.Error("a tool whose calls are refused is advertised as protected")
	}
	if got := sums(t, r.metrics()[sc.MetricToolCalls])[key(sc.GenAIToolName, "refund", sc.RefusalReason, "unscoped")]; got != 3 {
		t.Errorf("refused calls %d", got)
	}
}

func TestCallTool_UnscopedOptIns(t *testing.T) {
	t.Run("share", func(t *testing.T) {
		r := newRig(t, rigConfig{cfg: func(c *Config) { c.Unscoped = UnscopedShare }})
		tool := r.tool("refund", ToolInfo{}, refundResult)
		r.call("refund", `{"a":1}`, nil)
		res := result(t, r.call("refund", `{"a":1}`, nil))
		if tool.count() != 1 || metaOf(res, sc.ReplayMetaKey) == nil {
			t.Errorf("runs %d, %v", tool.count(), res)
		}
		if a := r.last(); a[sc.SubjectHash] != nil || a[sc.Outcome] != "replayed" {
			t.Errorf("span %v", a)
		}
		if !r.srv.in.AdvertisesKey("refund", ToolInfo{}, Scope{}) {
			t.Error("shared-scope calls are protected: the key should be advertised")
		}
	})
	t.Run("bypass", func(t *testing.T) {
		r := newRig(t, rigConfig{cfg: func(c *Config) { c.Unscoped = UnscopedBypass }})
		tool := r.tool("refund", ToolInfo{}, refundResult)
		r.call("refund", `{"a":1}`, nil)
		r.call("refund", `{"a":1}`, nil)
		if tool.count() != 2 {
			t.Errorf("runs %d", tool.count())
		}
		if a := r.last(); a[sc.Outcome] != "bypassed" || a[sc.BypassReason] != "unscoped" || a[sc.KeyHash] == nil {
			t.Errorf("span %v", a)
		}
		if r.logged() != "" {
			t.Errorf("logged %q", r.logged())
		}
	})
}

func TestScopeOf_Rules(t *testing.T) {
	in := New(nil, DefaultConfig())
	subj := New(nil, Config{Subject: subjectAlice})
	empty := New(nil, Config{Subject: func(context.Context) string { return "" }})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		in   *Instrumenter
		sid  string
		t    Transport
		want Scope
	}{
		{"a subject wins", subj, "s", Transport{AuthenticSessions: true}, Scope{ScopeSubject, "alice"}},
		{"local transport", in, "", Transport{Local: true}, Scope{ScopeLocal, ""}},
		{"authentic session", empty, "s", Transport{AuthenticSessions: true}, Scope{ScopeSession, sessionScopePrefix + "s"}},
		{"unvalidated session", in, "s", Transport{}, Scope{}},
		{"nothing", in, "", Transport{Network: "tcp"}, Scope{}},
	} {
		if got := tc.in.ScopeOf(ctx, tc.sid, &tc.t); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCallTool_SessionsScopeKeys(t *testing.T) {
	r := newRig(t, rigConfig{session: "s-1", authentc: true})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	r.call("refund", `{"a":1}`, nil)
	r.call("refund", `{"a":1}`, nil)
	r.srv.session = "s-2"
	r.call("refund", `{"a":1}`, nil)
	if tool.count() != 2 {
		t.Errorf("runs %d: one per session", tool.count())
	}
	if a := r.last(); a[sc.SubjectHash] != clip.Hash(sessionScopePrefix+"s-2") {
		t.Errorf("subject hash %v", a[sc.SubjectHash])
	}
}

func TestCallTool_SubjectHashesAreKeyed(t *testing.T) {
	r := newRig(t, rigConfig{cfg: func(c *Config) {
		c.Subject = func(context.Context) string { return "alice@example.com" }
		c.HashKey = []byte("k")
	}})
	r.tool("t", ToolInfo{}, refundResult)
	r.call("t", "", nil)
	mac := func(s string) string {
		m := hmac.New(sha256.New, []byte("k"))
		m.Write([]byte(s))
		return hex.EncodeToString(m.Sum(nil))[:32]
	}
	a := r.last()
	k, _ := idemkit.NewKey("alice@example.com", "t", nil, nil)
	if a[sc.SubjectHash] != mac("alice@example.com") || a[sc.KeyHash] != mac(k.ID()) || a[sc.KeyHash] == k.Hash() {
		t.Errorf("hashes %v %v", a[sc.SubjectHash], a[sc.KeyHash])
	}
	if _, ok := a[sc.Subject]; ok {
		t.Error("raw subject without opt-in")
	}
}

func TestCallTool_MalformedRequestsAreRejectedBeforeTheClaim(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	tool.schema = json.RawMessage(`{"type":"object","properties":{"amount_cents":{"type":"integer"}},"required":["amount_cents"]}`)
	for _, tc := range []struct {
		args   string
		meta   map[string]any
		reason string
	}{
		{`{"amount_cents":"100"}`, nil, "invalid_arguments"},
		{`{"amount_cents":12.5}`, nil, "invalid_arguments"},
		{`{}`, nil, "invalid_arguments"},
		{`{"amount_cents":1,"idempotency_key":5}`, nil, "invalid_key"},
		{`{"amount_cents":1,"idempotency_key":""}`, nil, "invalid_key"},
		{`{"amount_cents":1}`, map[string]any{sc.KeyMetaKey: 7}, "invalid_key"},
		{`{"amount_cents":1,"idempotency_key":"a"}`, map[string]any{sc.KeyMetaKey: "b"}, "invalid_key"},
	} {
		res := result(t, r.call("refund", tc.args, tc.meta))
		if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != tc.reason || !strings.Contains(text(res), "rejected and nothing was done") {
			t.Errorf("%s %v: %v", tc.args, tc.meta, res)
		}
		a := r.last()
		if a[sc.RefusalReason] != tc.reason || a[sc.Outcome] != nil || a[sc.ErrorType] != "tool_error" {
			t.Errorf("%s: span %v", tc.args, a)
		}
	}
	if tool.count() != 0 {
		t.Errorf("upstream ran %d times", tool.count())
	}
	if _, ok := r.metrics()[sc.MetricClaimDuration]; ok {
		t.Error("a malformed call was claimed")
	}
	// 1250 and 1250.0 are one integer: accepted, one run.
	r.call("refund", `{"amount_cents":1250}`, nil)
	r.call("refund", `{"amount_cents":1250.0}`, nil)
	if tool.count() != 1 {
		t.Errorf("runs %d", tool.count())
	}
}

func TestCallTool_InputRoundsAreNotStoredAndContinuationsAreMarked(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	tool := r.tool("book", ToolInfo{}, "")
	tool.run = func(_ context.Context, args json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"resultType":"input_required","inputRequests":{"q":{}},"requestState":"st"}`), nil
	}
	res := result(t, r.call("book", `{"a":1}`, nil))
	if res["resultType"] != "input_required" {
		t.Fatalf("first round %v", res)
	}
	a := r.last()
	if a[sc.InputRequested] != true || a[sc.Outcome] != "executed" || a[sc.InputContinuation] != nil {
		t.Errorf("first round span %v", a)
	}
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(refundResult), nil
	}
	res = result(t, r.send("tools/call", map[string]any{"name": "book", "arguments": map[string]any{"a": 1}, "requestState": "st"}))
	if isError(res) || metaOf(res, sc.ReplayMetaKey) != nil {
		t.Fatalf("continuation %v", res)
	}
	a = r.last()
	if a[sc.InputContinuation] != true || a[sc.InputRequested] != nil || a[sc.Attempt] != int64(2) {
		t.Errorf("continuation span %v", a)
	}
	if res := result(t, r.call("book", `{"a":1}`, nil)); metaOf(res, sc.ReplayMetaKey) == nil {
		t.Errorf("the completed call is not replayed: %v", res)
	}
	if tool.count() != 2 {
		t.Errorf("runs %d", tool.count())
	}
}

func TestCallTool_ResponsesTooLargeToKeep(t *testing.T) {
	r := newRig(t, rigConfig{local: true, guard: &idemkit.Config{MaxResponseBytes: 16}})
	tool := r.tool("t", ToolInfo{}, refundResult)
	first := result(t, r.call("t", "", nil))
	if isError(first) || text(first) != "Refunded o-1" {
		t.Fatalf("the first caller must get the work's result: %v", first)
	}
	s := r.spans("tools/call t")[0]
	a := attrMap(s)
	if s.Status().Code != codes.Unset || a[sc.ErrorType] != nil || a[sc.Outcome] != "executed" || a[sc.FinishError] != "response_too_large" {
		t.Errorf("first span: status %v, attrs %v (a delivered response never gets an ERROR status)", s.Status(), a)
	}
	dup := result(t, r.call("t", "", nil))
	if !isError(dup) || metaOf(dup, sc.RefusalMetaKey)["reason"] != "response_not_kept" || !strings.Contains(text(dup), "Do not call it again") {
		t.Errorf("duplicate %v", dup)
	}
	if tool.count() != 1 {
		t.Errorf("runs %d", tool.count())
	}
	if got := sums(t, r.metrics()[sc.MetricFinishErrors]); !reflect.DeepEqual(got, map[string]int64{key(sc.GenAIToolName, "t", sc.FinishError, "response_too_large"): 1}) {
		t.Errorf("%s %v", sc.MetricFinishErrors, got)
	}
}

// lossyStore fails every finish.
type lossyStore struct{ idemkit.MemoryStore }

func (*lossyStore) Finish(context.Context, idemstore.FinishRequest) error {
	return errors.New("disk full")
}

func TestCallTool_AFailedFinishStillDeliversTheResult(t *testing.T) {
	r := newRig(t, rigConfig{local: true, store: &lossyStore{}})
	r.tool("t", ToolInfo{}, refundResult)
	res := result(t, r.call("t", "", nil))
	if isError(res) || text(res) != "Refunded o-1" {
		t.Fatalf("%v", res)
	}
	s := r.sr.Ended()[0]
	a := attrMap(s)
	if s.Status().Code != codes.Unset || a[sc.FinishError] != "store_error" || a[sc.Outcome] != "executed" {
		t.Errorf("status %v attrs %v", s.Status(), a)
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("events %v", ev)
	}
}

// TestCallTool_AFailedReleaseIsRecordedBesideTheWorksError: the work
// failed with a Go error and releasing its claim failed too; the work's
// error is returned as it is, and the failed release is recorded on the
// span and in idemkit.finish.errors (duplicates are told "in progress"
// until the lease runs out).
func TestCallTool_AFailedReleaseIsRecordedBesideTheWorksError(t *testing.T) {
	r := newRig(t, rigConfig{local: true, store: &lossyStore{}})
	tool := r.tool("t", ToolInfo{}, refundResult)
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &rpcError{code: -32603, msg: "the database is down"}
	}
	resp := r.call("t", "", nil)
	if e, _ := resp["error"].(map[string]any); e == nil || e["message"] != "the database is down" {
		t.Fatalf("the work's error was not returned as it is: %v", resp)
	}
	a := r.last()
	if a[sc.FinishError] != "store_error" || a[sc.Outcome] != "executed" || a[sc.ErrorType] != "-32603" {
		t.Errorf("span %v", dump(a))
	}
	if got := sums(t, r.metrics()[sc.MetricFinishErrors]); !reflect.DeepEqual(got, map[string]int64{key(sc.GenAIToolName, "t", sc.FinishError, "store_error"): 1}) {
		t.Errorf("%s %v", sc.MetricFinishErrors, got)
	}
}

// deadStore fails every claim.
type deadStore struct{ idemkit.MemoryStore }

func (*deadStore) Claim(context.Context, idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, errors.New("connection refused")
}

func TestCallTool_AnUnreachableStoreFailsClosed(t *testing.T) {
	r := newRig(t, rigConfig{local: true, store: &deadStore{}})
	tool := r.tool("t", ToolInfo{}, refundResult)
	res := result(t, r.call("t", "", nil))
	if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != "store_unavailable" || !strings.Contains(text(res), "Nothing was done") {
		t.Errorf("%v", res)
	}
	if tool.count() != 0 {
		t.Error("the tool ran unprotected")
	}
	if a := r.last(); a[sc.RefusalReason] != "store_unavailable" || a[sc.KeyHash] == nil {
		t.Errorf("span %v", a)
	}
}

func TestCallTool_UnreadableStoredResult(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	r.tool("t", ToolInfo{}, `"not an object"`)
	r.call("t", "", nil)
	res := result(t, r.call("t", "", nil))
	if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != "result_unreadable" {
		t.Errorf("%v", res)
	}
	if a := r.last(); a[sc.Outcome] != "replayed" || a[sc.RefusalReason] != "result_unreadable" {
		t.Errorf("span %v", a)
	}
}

func TestCallTool_UpstreamErrorsPassThroughAndAreNotStored(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	tool := r.tool("t", ToolInfo{}, "")
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &rpcError{code: -32603, msg: "gateway down"}
	}
	for range 2 {
		resp := r.call("t", "", nil)
		if e, _ := resp["error"].(map[string]any); e["code"] != int64(-32603) {
			t.Fatalf("%v", resp)
		}
	}
	if tool.count() != 2 {
		t.Errorf("runs %d: an error is never replayed", tool.count())
	}
	s := r.sr.Ended()[1]
	a := attrMap(s)
	if a[sc.ErrorType] != "-32603" || a[sc.RPCResponseStatusCode] != "-32603" || a[sc.Outcome] != "takeover" || a[sc.Attempt] != int64(2) {
		t.Errorf("attrs %v", a)
	}
	if s.Status().Code != codes.Error || s.Status().Description != "gateway down" {
		t.Errorf("status %v", s.Status())
	}
}

func TestCallTool_APanicEndsTheSpanAndReleasesTheClaim(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	tool := r.tool("t", ToolInfo{}, "")
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) { panic("boom") }
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		r.call("t", "", nil)
	}()
	if s := r.sr.Ended(); len(s) != 1 || s[0].Status().Code != codes.Error || attrMap(s[0])[sc.ErrorType] != "_OTHER" {
		t.Fatalf("spans %v", s)
	}
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(refundResult), nil
	}
	if res := result(t, r.call("t", "", nil)); isError(res) {
		t.Errorf("retry after a panic: %v", res)
	}
	if a := r.last(); a[sc.Outcome] != "takeover" {
		t.Errorf("outcome %v", a[sc.Outcome])
	}
}

func TestCallTool_ObserveOnlyRecordsTheHashesOfWriteTools(t *testing.T) {
	r := newRig(t, rigConfig{noGuard: true, session: "s"})
	w := r.tool("refund", ToolInfo{}, refundResult)
	ro := r.tool("lookup", ToolInfo{ReadOnlyHint: true}, refundResult)
	r.call("refund", `{"a":1}`, nil)
	r.call("refund", `{"a":1}`, nil)
	r.call("lookup", `{"a":1}`, nil)
	if w.count() != 2 || ro.count() != 1 {
		t.Errorf("runs %d %d", w.count(), ro.count())
	}
	spans := r.spans("tools/call refund")
	if a := attrMap(spans[1]); a[sc.Outcome] != "bypassed" || a[sc.BypassReason] != "no_guard" || a[sc.KeyHash] == nil {
		t.Errorf("write tool span %v", a)
	}
	if a := r.last(); a[sc.BypassReason] != "unprotected" || a[sc.KeyHash] != nil {
		t.Errorf("read tool span %v", a)
	}
}

func TestCallTool_RecordsArgumentsAndResultsOnlyOnRequest(t *testing.T) {
	r := newRig(t, rigConfig{local: true, cfg: func(c *Config) { c.ArgumentsCap, c.ResultCap = 8, 1<<10 }})
	r.tool("t", ToolInfo{}, refundResult)
	r.call("t", `{"order_id":"o-1"}`, nil)
	r.call("t", `{"order_id":"o-1"}`, nil)
	for _, s := range r.sr.Ended() {
		a := attrMap(s)
		if a[sc.GenAIToolCallArguments] != `{"order_` {
			t.Errorf("arguments %v", a[sc.GenAIToolCallArguments])
		}
		if res, _ := a[sc.GenAIToolCallResult].(string); !strings.Contains(res, `"Refunded o-1"`) {
			t.Errorf("result %v", a[sc.GenAIToolCallResult])
		}
	}
}

func TestOp_SpanShapePerMethodAndErrorClass(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	r.tool("t", ToolInfo{ReadOnlyHint: true}, `{"content":[],"isError":true}`)
	r.send("initialize", map[string]any{})
	r.send("ping", nil)
	r.send("tools/list", nil)
	r.send("prompts/get", map[string]any{"name": "summarise"})
	r.send("resources/read", map[string]any{"uri": "file:///a.txt"})
	r.send("no/such/method", nil)
	r.call("t", "", nil)
	r.call("missing", "", nil)
	type want struct {
		name   string
		attrs  map[string]any
		status codes.Code
		desc   string
	}
	common := map[string]any{sc.MCPProtocolVersion: "2025-11-25", sc.NetworkTransport: "pipe"}
	with := func(id string, kv ...any) map[string]any {
		m := map[string]any{sc.JSONRPCRequestID: id}
		for k, v := range common {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	wants := []want{
		{"initialize", with("1", sc.MCPMethodName, "initialize"), codes.Unset, ""},
		{"ping", with("2", sc.MCPMethodName, "ping"), codes.Unset, ""},
		{"tools/list", with("3", sc.MCPMethodName, "tools/list"), codes.Unset, ""},
		{"prompts/get summarise", with("4", sc.MCPMethodName, "prompts/get", sc.GenAIPromptName, "summarise"), codes.Unset, ""},
		{"resources/read", with("5", sc.MCPMethodName, "resources/read", sc.MCPResourceURI, "file:///a.txt"), codes.Unset, ""},
		{"_OTHER", with("6", sc.MCPMethodName, "_OTHER", sc.ErrorType, "-32601", sc.RPCResponseStatusCode, "-32601"), codes.Error, "Method no/such/method not found"},
		{"tools/call t", with("7", sc.MCPMethodName, "tools/call", sc.GenAIOperationName, "execute_tool", sc.GenAIToolName, "t",
			sc.Outcome, "bypassed", sc.BypassReason, "unprotected", sc.ErrorType, "tool_error"), codes.Error, "tool_error"},
		{"tools/call missing", with("8", sc.MCPMethodName, "tools/call", sc.GenAIOperationName, "execute_tool", sc.GenAIToolName, "missing",
			sc.ErrorType, "-32602", sc.RPCResponseStatusCode, "-32602"), codes.Error, "unknown tool missing"},
	}
	spans := r.sr.Ended()
	if len(spans) != len(wants) {
		t.Fatalf("%d spans, want %d", len(spans), len(wants))
	}
	for i, w := range wants {
		s := spans[i]
		if s.Name() != w.name || s.SpanKind() != trace.SpanKindServer || s.Status().Code != w.status || s.Status().Description != w.desc {
			t.Errorf("span %d: %q %v %v, want %q SERVER %v %q", i, s.Name(), s.SpanKind(), s.Status(), w.name, w.status, w.desc)
		}
		assertAttrs(t, s, w.attrs)
	}
	got := histCounts(t, r.metrics()["mcp.server.operation.duration"])
	for _, k := range []string{
		key(sc.MCPMethodName, "initialize", sc.MCPProtocolVersion, "2025-11-25", sc.NetworkTransport, "pipe"),
		key(sc.MCPMethodName, "prompts/get", sc.GenAIPromptName, "summarise", sc.MCPProtocolVersion, "2025-11-25", sc.NetworkTransport, "pipe"),
		key(sc.MCPMethodName, "_OTHER", sc.ErrorType, "-32601", sc.RPCResponseStatusCode, "-32601", sc.MCPProtocolVersion, "2025-11-25", sc.NetworkTransport, "pipe"),
		key(sc.MCPMethodName, "tools/call", sc.GenAIOperationName, "execute_tool", sc.GenAIToolName, "t", sc.ErrorType, "tool_error", sc.MCPProtocolVersion, "2025-11-25", sc.NetworkTransport, "pipe"),
	} {
		if got[k] != 1 {
			t.Errorf("no operation duration for %s in %v", k, got)
		}
	}
}

func TestOp_TraceContextFromMetaWithTheAmbientSpanLinked(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	r.tool("t", ToolInfo{ReadOnlyHint: true}, refundResult)
	remote := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp := r.sr
	_ = tp
	ambientTracer := r.srv.in.tracer
	actx, ambient := ambientTracer.Start(context.Background(), "POST")
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": "t", "_meta": map[string]any{"traceparent": remote}}})
	r.srv.handle(actx, string(b))
	ambient.End()
	s := r.spans("tools/call t")[0]
	if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
		t.Errorf("parent %v", s.Parent())
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != ambient.SpanContext().SpanID() {
		t.Errorf("links %v", l)
	}
}

func TestFormatRequestID(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
		ok   bool
	}{
		{"abc", "abc", true}, {"", "", true}, {float64(7), "7", true}, {float64(1e15), "1000000000000000", true},
		{1e21, "1000000000000000000000", true}, {-3.0, "-3", true}, {1.5, "1.5", true}, {int64(42), "42", true},
		{uint64(18446744073709551615), "18446744073709551615", true},
		{json.Number("12345678901234567890"), "12345678901234567890", true}, {json.Number("1e3"), "1000", true},
		{json.RawMessage(`"x"`), "x", true}, {json.RawMessage(`1e21`), "1000000000000000000000", true},
		{json.RawMessage(`12345678901234567890`), "12345678901234567890", true},
		{json.RawMessage(`null`), "", false}, {json.RawMessage(nil), "", false}, {json.RawMessage(`{}`), "", false},
		{nil, "", false}, {struct{}{}, "", false},
	} {
		got, ok := FormatRequestID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FormatRequestID(%#v) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCapture_CutsOnRuneBoundaries(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"hello", 10, "hello"}, {"hello", 3, "hel"}, {"héllo", 2, "h"}, {"héllo", 3, "hé"}, {"日本語", 4, "日"}} {
		if got := capture([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("capture(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestExplicitKey(t *testing.T) {
	for _, tc := range []struct {
		meta     map[string]any
		stripped string
		want     string
		err      bool
	}{
		{nil, "", "", false},
		{map[string]any{"progressToken": 1}, "", "", false},
		{map[string]any{sc.KeyMetaKey: "k"}, "", "k", false},
		{map[string]any{sc.KeyArgument: "k"}, "", "k", false},
		{map[string]any{sc.KeyMetaKey: "k", sc.KeyArgument: "k"}, `"k"`, "k", false},
		{nil, `"k"`, "k", false},
		{nil, `null`, "", false},
		{map[string]any{sc.KeyMetaKey: "k", sc.KeyArgument: "j"}, "", "", true},
		{map[string]any{sc.KeyMetaKey: "k"}, `"j"`, "", true},
		{map[string]any{sc.KeyMetaKey: 5}, "", "", true},
		{nil, `5`, "", true},
		{map[string]any{sc.KeyMetaKey: ""}, "", "", true},
		{map[string]any{sc.KeyMetaKey: "bad\nkey"}, "", "", true},
	} {
		got, err := explicitKey(tc.meta, json.RawMessage(tc.stripped))
		if got != tc.want || (err != nil) != tc.err || (err != nil && !errors.Is(err, idemkit.ErrInvalidKey)) {
			t.Errorf("explicitKey(%v, %s) = %q, %v", tc.meta, tc.stripped, got, err)
		}
	}
}

func TestKeyParameterHelpers(t *testing.T) {
	s, ok := RawSchemaWithKey(json.RawMessage(`{"properties":{"a":{"type":"integer"}},"additionalProperties":false}`))
	var m map[string]any
	_ = json.Unmarshal(s, &m)
	if !ok || !SchemaDeclaresKey(m) || m["type"] != "object" || m["additionalProperties"] != false {
		t.Errorf("schema %s", s)
	}
	if _, ok := RawSchemaWithKey(json.RawMessage(`[1]`)); ok {
		t.Error("a non-object schema was decorated")
	}
	args, key := StripKeyArgument(json.RawMessage(`{"a":1,"idempotency_key":"k"}`))
	if string(args) != `{"a":1}` || string(key) != `"k"` {
		t.Errorf("%s %s", args, key)
	}
	if args, key := StripKeyArgument(json.RawMessage(`{"a":1}`)); string(args) != `{"a":1}` || key != nil {
		t.Errorf("%s %s", args, key)
	}
	if d := DescribeKey(DescribeKey("Refunds.")); strings.Count(d, KeyDescription) != 1 || !strings.HasPrefix(d, "Refunds.\n\n") {
		t.Errorf("%q", d)
	}
}

// TestKeyTexts_SayWhatARetryNeedsInFewBytes keeps the two sentences every
// tools/list answer carries per protected tool short (their bytes were about
// half of what advertising the key added to a listing, BenchmarkListTools)
// without losing what a model must be told: retries are safe, the same key
// on every retry, a new one for a new action.
func TestKeyTexts_SayWhatARetryNeedsInFewBytes(t *testing.T) {
	for _, want := range []string{"Retries are safe", "first call's result", "same idempotency_key on every retry", "a new one for a new action"} {
		if !strings.Contains(KeyDescription, want) {
			t.Errorf("KeyDescription %q does not say %q", KeyDescription, want)
		}
	}
	if !strings.HasPrefix(KeyParameterDescription, "Optional") || !strings.Contains(KeyParameterDescription, "per intended action") {
		t.Errorf("KeyParameterDescription %q", KeyParameterDescription)
	}
	if n := len(KeyDescription) + len(KeyParameterDescription); n > 240 {
		t.Errorf("the advertised texts are %d bytes, over the 240 budget", n)
	}
	if p, _ := KeyParameterSchema()["description"].(string); p != KeyParameterDescription {
		t.Errorf("the key's schema describes it as %q", p)
	}
}

func TestRawCodec(t *testing.T) {
	var c RawCodec
	in := json.RawMessage(`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1.0,"big":12345678901234567890}}`)
	out := c.WithMeta(in, sc.ReplayMetaKey, map[string]any{"replayed": true})
	if !strings.Contains(string(out), `"structuredContent":{"n":1.0,"big":12345678901234567890}`) ||
		!strings.Contains(string(out), `"_meta":{"io.idemkit/replay":{"replayed":true}}`) {
		t.Errorf("WithMeta must keep the other members byte for byte: %s", out)
	}
	if string(in) != `{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1.0,"big":12345678901234567890}}` {
		t.Error("WithMeta modified its input")
	}
	out = c.WithMeta(json.RawMessage(`{"_meta":{"a":1},"content":[]}`), "b", 2)
	if string(out) != `{"_meta":{"a":1,"b":2},"content":[]}` {
		t.Errorf("%s", out)
	}
	e := c.ErrorResult("no")
	if !c.IsError(e) || c.IsError(in) || c.NeedsInput(in) || !c.NeedsInput(json.RawMessage(`{"resultType":"input_required"}`)) {
		t.Error("flags")
	}
	for doc, want := range map[string]bool{
		`{"content":[],"isError":true}`:                  true,
		`{"content":[],"isError":false}`:                 false,
		`{"content":[],"\u0069sError":true}`:             true, // an escaped member name
		`{"content":[{"type":"text","text":"isError"}]}`: false,
	} {
		if c.IsError(json.RawMessage(doc)) != want {
			t.Errorf("IsError(%s) = %v", doc, !want)
		}
	}
	if !c.NeedsInput(json.RawMessage(`{"inputRequests":{"a":{}}}`)) || c.NeedsInput(json.RawMessage(`{"inputRequests":null}`)) {
		t.Error("NeedsInput with inputRequests")
	}
	if _, err := c.Unmarshal([]byte(`[1]`)); err == nil {
		t.Error("a non-object result decoded")
	}
	if _, err := c.Marshal(nil); err == nil {
		t.Error("an empty result encoded")
	}
}

func TestSchemaValidator(t *testing.T) {
	v, err := NewSchemaValidator(map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}})
	if err != nil {
		t.Fatal(err)
	}
	for args, ok := range map[string]bool{`{"n":1}`: true, `{"n":1.0}`: true, `{"n":"1"}`: false, `{"n":1.5}`: false, ``: true, `{`: false} {
		if err := v.Validate(json.RawMessage(args)); (err == nil) != ok || (err != nil && !errors.Is(err, idemkit.ErrInvalidArguments)) {
			t.Errorf("%s: %v", args, err)
		}
	}
	if _, err := NewSchemaValidator(nil); err == nil {
		t.Error("nil schema")
	}
}

// TestConfigFrom_AppliesOptionsWithoutPackageInstrument: the adapters'
// options reach a Config through ordinary values, without package
// instrument installing anything first (it did so from its init function).
func TestConfigFrom_AppliesOptionsWithoutPackageInstrument(t *testing.T) {
	c := ConfigFrom([]Option{nil, OptionFunc(func(c *Config) { c.ResultCap = 7 }), OptionFunc(func(c *Config) { c.ResultCap *= 2 })})
	if c.ResultCap != 14 || !c.AdvertiseKey || !c.StripKey || c.Unscoped != UnscopedRefuse {
		t.Errorf("%+v", c)
	}
}
