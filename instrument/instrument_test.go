package instrument

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/spancontract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSpanContract_BorrowedKeysMatchSemconv catches drift between the span
// contract and the OpenTelemetry semantic conventions it borrows from.
func TestSpanContract_BorrowedKeysMatchSemconv(t *testing.T) {
	for _, tc := range []struct {
		ours string
		kv   attribute.Key
	}{
		{spancontract.GenAIOperationName, semconv.GenAIOperationNameKey},
		{spancontract.GenAIToolName, semconv.GenAIToolNameKey},
		{spancontract.GenAIToolCallID, semconv.GenAIToolCallIDKey},
		{spancontract.GenAIToolCallArguments, semconv.GenAIToolCallArgumentsKey},
		{spancontract.GenAIToolCallResult, semconv.GenAIToolCallResultKey},
		{spancontract.GenAIConversationID, semconv.GenAIConversationIDKey},
		{spancontract.MCPMethodName, semconv.McpMethodNameKey},
		{spancontract.MCPSessionID, semconv.McpSessionIDKey},
		{spancontract.MCPProtocolVersion, semconv.McpProtocolVersionKey},
		{spancontract.JSONRPCRequestID, semconv.JSONRPCRequestIDKey},
		{spancontract.ErrorType, semconv.ErrorTypeKey},
	} {
		if tc.ours != string(tc.kv) {
			t.Errorf("spancontract has %q, semconv v1.41.0 has %q", tc.ours, tc.kv)
		}
	}
	for _, tc := range []struct {
		ours string
		kv   attribute.KeyValue
	}{
		{spancontract.OperationExecuteTool, semconv.GenAIOperationNameExecuteTool},
		{spancontract.OperationChat, semconv.GenAIOperationNameChat},
		{spancontract.MethodToolsCall, semconv.McpMethodNameToolsCall},
	} {
		if tc.ours != tc.kv.Value.AsString() {
			t.Errorf("spancontract has %q, semconv v1.41.0 has %q for %s", tc.ours, tc.kv.Value.AsString(), tc.kv.Key)
		}
	}
}

func TestFormatRequestID(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
		ok   bool
	}{
		{"abc", "abc", true},
		{"", "", true},
		{float64(7), "7", true},
		{float64(1e15), "1000000000000000", true},
		{float64(1 << 53), "9007199254740992", true},
		{1e21, "1000000000000000000000", true},
		{-3.0, "-3", true},
		{1.5, "1.5", true},
		{int64(42), "42", true},
		{uint64(18446744073709551615), "18446744073709551615", true},
		{json.Number("12345678901234567890"), "12345678901234567890", true},
		{json.Number("1e3"), "1000", true},
		{nil, "", false},
		{struct{}{}, "", false},
		{[]int{1}, "", false},
	} {
		got, ok := FormatRequestID(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FormatRequestID(%#v) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if strings.ContainsAny(got, "eE+") && tc.in != "abc" {
			t.Errorf("%#v formatted with an exponent: %q", tc.in, got)
		}
	}
}

type typedErr struct{}

func (typedErr) Error() string { return "typed" }

type namedErr struct{}

func (namedErr) Error() string     { return "named" }
func (namedErr) ErrorType() string { return "custom.type" }

func TestErrorType(t *testing.T) {
	base := typedErr{}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{base, "github.com/idemkit/idemkit/instrument.typedErr"},
		{fmt.Errorf("ctx: %w", base), "github.com/idemkit/idemkit/instrument.typedErr"},
		{fmt.Errorf("%w: op: %w", idemkit.ErrStore, base), "github.com/idemkit/idemkit/instrument.typedErr"},
		{namedErr{}, "custom.type"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "context.deadlineExceededError"},
	} {
		if got := errorType(tc.err); got != tc.want {
			t.Errorf("errorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestCapture_CutsOnRuneBoundaries(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"},
		{"héllo", 3, "hé"},
		{"日本語", 4, "日"},
	} {
		if got := capture([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("capture(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestExplicitKeyFromMeta(t *testing.T) {
	for _, tc := range []struct {
		meta map[string]any
		want string
		err  bool
	}{
		{nil, "", false},
		{map[string]any{"progressToken": 1}, "", false},
		{map[string]any{KeyMetaKey: "k"}, "k", false},
		{map[string]any{KeyArgument: "k"}, "k", false},
		{map[string]any{KeyMetaKey: "k", KeyArgument: "k"}, "k", false},
		{map[string]any{KeyMetaKey: "k", KeyArgument: "j"}, "", true},
		{map[string]any{KeyMetaKey: 5}, "", true},
		{map[string]any{KeyMetaKey: ""}, "", true},
		{map[string]any{KeyMetaKey: "bad\nkey"}, "", true},
	} {
		got, err := explicitKey(tc.meta)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("explicitKey(%v) = %q, %v", tc.meta, got, err)
		}
		if err != nil && !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("error %v does not match ErrInvalidKey", err)
		}
	}
}

// rig is an Instrumenter with recorders, driven through Handle directly.
type rig struct {
	sr    *tracetest.SpanRecorder
	in    *Instrumenter
	guard *idemkit.Guard
}

func newRig(t *testing.T, store idemkit.Store, cfg *idemkit.Config, opts ...Option) *rig {
	t.Helper()
	r := &rig{sr: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	if store == nil {
		store = &idemkit.MemoryStore{}
	}
	g, err := idemkit.NewGuard(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.guard = g
	r.in = New(g, append([]Option{WithTracerProvider(tp), WithMeterProvider(mp)}, opts...)...)
	return r
}

func (r *rig) call(t *testing.T, call ToolCall, next func(context.Context) (*string, error)) (string, error) {
	t.Helper()
	res, err := Handle(context.Background(), r.in, &call, stringCodec{}, next)
	if res == nil {
		return "", err
	}
	return *res, err
}

func (r *rig) last(t *testing.T) map[string]any {
	t.Helper()
	spans := r.sr.Ended()
	if len(spans) == 0 {
		t.Fatal("no span")
	}
	m := map[string]any{}
	for _, kv := range spans[len(spans)-1].Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func result(s string) func(context.Context) (*string, error) {
	return func(context.Context) (*string, error) { return &s, nil }
}

func TestScope_Rules(t *testing.T) {
	args := []byte(`{"a":1}`)
	for _, tc := range []struct {
		name    string
		opts    []Option
		call    ToolCall
		runs    int32
		outcome string
		subject string // expected subject hash input, "" for none
	}{
		{"local transport needs no subject", nil, ToolCall{Tool: "t", Arguments: args, Local: true}, 1, "replayed", ""},
		{"session scopes calls without a subject", nil, ToolCall{Tool: "t", Arguments: args, SessionID: "s1"}, 1, "replayed", sessionScopePrefix + "s1"},
		{"unscoped calls are bypassed", nil, ToolCall{Tool: "t", Arguments: args}, 2, "bypassed", ""},
		{"unscoped calls shared on request", []Option{WithUnscopedCalls(UnscopedShare)}, ToolCall{Tool: "t", Arguments: args}, 1, "replayed", ""},
		{"subject wins over session", []Option{WithSubject(func(context.Context) string { return "alice" })}, ToolCall{Tool: "t", Arguments: args, SessionID: "s1"}, 1, "replayed", "alice"},
		{"empty subject falls back", []Option{WithSubject(func(context.Context) string { return "" })}, ToolCall{Tool: "t", Arguments: args}, 2, "bypassed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, nil, tc.opts...)
			var runs atomic.Int32
			next := func(context.Context) (*string, error) { runs.Add(1); s := "ok"; return &s, nil }
			for range 2 {
				if _, err := r.call(t, tc.call, next); err != nil {
					t.Fatal(err)
				}
			}
			if runs.Load() != tc.runs {
				t.Errorf("ran %d times, want %d", runs.Load(), tc.runs)
			}
			a := r.last(t)
			if a[spancontract.Outcome] != tc.outcome {
				t.Errorf("outcome %v, want %s", a[spancontract.Outcome], tc.outcome)
			}
			if got, want := a[spancontract.SubjectHash], tc.subject; (want == "" && got != nil) || (want != "" && got != idemkit.ShortHash(want)) {
				t.Errorf("subject hash %v, want hash of %q", got, want)
			}
			if a[spancontract.KeyHash] == nil {
				t.Error("no key hash on a protected tool's span")
			}
		})
	}
}

func TestSubjectHash_HMAC(t *testing.T) {
	r := newRig(t, nil, nil, WithSubject(func(context.Context) string { return "alice@example.com" }), WithSubjectHashKey([]byte("k")))
	if _, err := r.call(t, ToolCall{Tool: "t"}, result("ok")); err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte("k"))
	mac.Write([]byte("alice@example.com"))
	want := hex.EncodeToString(mac.Sum(nil))[:32]
	if got := r.last(t)[spancontract.SubjectHash]; got != want {
		t.Errorf("subject hash %v, want %s", got, want)
	}
	if _, ok := r.last(t)[spancontract.Subject]; ok {
		t.Error("raw subject without opt-in")
	}
	// The key hash is keyed too: it is derived from the subject.
	key, err := idemkit.NewKey("alice@example.com", "t", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mac = hmac.New(sha256.New, []byte("k"))
	mac.Write([]byte(key.ID()))
	if got, want := r.last(t)[spancontract.KeyHash], hex.EncodeToString(mac.Sum(nil))[:32]; got != want || got == key.Hash() {
		t.Errorf("key hash %v, want the HMAC %s (plain %s)", got, want, key.Hash())
	}
}

func TestHandle_InvalidArgumentsAreRejectedBeforeTheClaim(t *testing.T) {
	r := newRig(t, nil, nil)
	var runs atomic.Int32
	next := func(context.Context) (*string, error) { runs.Add(1); s := "ok"; return &s, nil }
	for _, args := range []string{`{"a":`, `{"idempotency_key":5}`, `{"idempotency_key":""}`, `{"a":1,"a":2}`} {
		got, err := r.call(t, ToolCall{Tool: "t", Arguments: []byte(args), Local: true}, next)
		if err != nil || !strings.HasPrefix(got, "!The t call was rejected and nothing was done: ") {
			t.Errorf("%s: %q %v", args, got, err)
		}
		a := r.last(t)
		if _, ok := a[spancontract.Outcome]; ok || a[spancontract.ErrorType] != "tool_error" {
			t.Errorf("%s: attrs %v", args, a)
		}
	}
	if runs.Load() != 0 {
		t.Error("the handler ran")
	}
}

func TestHandle_NeedsInputIsNotStored(t *testing.T) {
	r := newRig(t, nil, nil)
	var runs atomic.Int32
	next := func(context.Context) (*string, error) {
		if runs.Add(1) == 1 {
			s := "?"
			return &s, nil
		}
		s := "done"
		return &s, nil
	}
	call := ToolCall{Tool: "t", Local: true}
	if got, _ := r.call(t, call, next); got != "?" {
		t.Fatalf("first %q", got)
	}
	if got, _ := r.call(t, call, next); got != "done" {
		t.Fatalf("retry %q", got)
	}
	if got, _ := r.call(t, call, next); got != "done|"+ReplayMetaKey {
		t.Fatalf("third %q", got)
	}
	if runs.Load() != 2 {
		t.Errorf("runs %d", runs.Load())
	}
}

func TestHandle_TooLargeResponses(t *testing.T) {
	r := newRig(t, nil, &idemkit.Config{MaxResponseBytes: 4})
	var runs atomic.Int32
	next := func(context.Context) (*string, error) { runs.Add(1); s := "0123456789"; return &s, nil }
	call := ToolCall{Tool: "t", Local: true}
	first, err := r.call(t, call, next)
	if err != nil || first != "0123456789" {
		t.Fatalf("first %q %v: the first caller gets the work's result", first, err)
	}
	if a := r.last(t); a[spancontract.Outcome] != "executed" || a[spancontract.ErrorType] != "*idemkit.ResponseTooLargeError" {
		t.Errorf("first span %v", a)
	}
	dup, err := r.call(t, call, next)
	if err != nil || !strings.HasPrefix(dup, "!") || !strings.Contains(dup, "Do not call it again") {
		t.Errorf("duplicate %q %v", dup, err)
	}
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
}

// corruptStore stores bodies that cannot be decoded.
type corruptCodec struct{ stringCodec }

func (corruptCodec) Unmarshal([]byte) (*string, error) { return nil, errors.New("corrupt") }

func TestHandle_UnreadableStoredResult(t *testing.T) {
	r := newRig(t, nil, nil)
	call := ToolCall{Tool: "t", Local: true}
	for range 2 {
		if _, err := Handle(context.Background(), r.in, &call, corruptCodec{}, result("ok")); err != nil {
			t.Fatal(err)
		}
	}
	a := r.last(t)
	if a[spancontract.Outcome] != "replayed" || a[spancontract.ErrorType] != "*errors.errorString" {
		t.Errorf("attrs %v", a)
	}
	if s := r.sr.Ended()[1].Status(); s.Code != codes.Error {
		t.Errorf("status %v", s)
	}
}

// lossyStore fails every finish.
type lossyStore struct{ idemkit.MemoryStore }

func (*lossyStore) Finish(context.Context, idemkit.FinishRequest) error {
	return errors.New("disk full")
}

func TestHandle_FinishFailureStillReturnsTheWork(t *testing.T) {
	r := newRig(t, &lossyStore{}, nil)
	got, err := r.call(t, ToolCall{Tool: "t", Local: true}, result("ok"))
	if err != nil || got != "ok" {
		t.Fatalf("%q %v", got, err)
	}
	a := r.last(t)
	if a[spancontract.Outcome] != "executed" || a[spancontract.ErrorType] != "*idemkit.FinishError" {
		t.Errorf("attrs %v", a)
	}
	if ev := r.sr.Ended()[0].Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("events %v", ev)
	}
}

func TestHandle_StatusToolFromGuardConfigWins(t *testing.T) {
	r := newRig(t, nil, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"t": {StatusTool: "from_guard"}}}, WithStatusTool("t", "from_option"))
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.call(t, ToolCall{Tool: "t", Local: true}, func(context.Context) (*string, error) {
			close(started)
			<-release
			s := "ok"
			return &s, nil
		})
	}()
	<-started
	got, _ := r.call(t, ToolCall{Tool: "t", Local: true}, result("dup"))
	close(release)
	<-done
	if !strings.Contains(got, "Call from_guard") {
		t.Errorf("in-progress text %q", got)
	}
}

func TestHandle_PanicEndsTheSpanAndReleasesTheClaim(t *testing.T) {
	r := newRig(t, nil, nil)
	call := ToolCall{Tool: "t", Local: true}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_, _ = r.call(t, call, func(context.Context) (*string, error) { panic("boom") })
	}()
	spans := r.sr.Ended()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error {
		t.Fatalf("spans %v", spans)
	}
	if got, err := r.call(t, call, result("ok")); err != nil || got != "ok" {
		t.Errorf("retry after a panic: %q %v", got, err)
	}
	if a := r.last(t); a[spancontract.Outcome] != "takeover" {
		t.Errorf("outcome %v", a[spancontract.Outcome])
	}
}
