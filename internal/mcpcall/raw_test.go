package mcpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawServer does with raw JSON-RPC what the idemkit gateway does: it decodes
// a request just enough, serves it through an Op, and relays tools/call to
// an upstream function that answers with raw result bytes, through
// RawCodec. No MCP SDK is involved.
type rawServer struct {
	in        *Instrumenter
	tools     map[string]*rawTool
	session   string
	protocol  string
	transport Transport
	tasks     *Tasks // nil: no task support
}

type rawTool struct {
	info   ToolInfo
	schema json.RawMessage // nil: not validated here
	mu     sync.Mutex      // protects runs
	runs   int
	// run is the upstream: the raw result, or a Go error (a JSON-RPC error).
	run func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

func (t *rawTool) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs
}

// rpcError is a JSON-RPC error an upstream answers with.
type rpcError struct {
	code int64
	msg  string
}

func (e *rpcError) Error() string { return e.msg }

func (s *rawServer) handle(ctx context.Context, msg string) (resp map[string]any) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal([]byte(msg), &req); err != nil {
		panic(err)
	}
	var params struct {
		Name         string          `json:"name"`
		URI          string          `json:"uri"`
		Arguments    json.RawMessage `json:"arguments"`
		Meta         map[string]any  `json:"_meta"`
		RequestState string          `json:"requestState"`
		Task         json.RawMessage `json:"task"`
	}
	_ = json.Unmarshal(req.Params, &params)
	r := Request{Method: req.Method, Meta: params.Meta, SessionID: s.session, ProtocolVersion: s.protocol, Transport: s.transport}
	r.ID, r.HasID = FormatRawRequestID(req.ID)
	switch req.Method {
	case "tools/call", "prompts/get":
		r.Target = params.Name
	case "resources/read":
		r.ResourceURI = params.URI
	}
	_, op := s.in.Start(ctx, &r) // op is the request's context
	var end Response
	defer func() {
		if p := recover(); p != nil {
			op.End(Response{Panicked: true})
			panic(p)
		}
		op.End(end)
	}()
	result := func(v any) map[string]any { return map[string]any{"id": req.ID, "result": v} }
	fail := func(code int64, m string, err error) map[string]any {
		end = Response{HasCode: true, Code: code, Message: m, Err: err}
		return map[string]any{"id": req.ID, "error": map[string]any{"code": code, "message": m}}
	}
	switch req.Method {
	case "initialize", "ping", "tools/list", "prompts/get", "resources/read":
		return result(map[string]any{})
	case "tools/call":
	case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
		if s.tasks == nil {
			return fail(-32601, "Method "+req.Method+" not found", nil)
		}
		out, rerr := s.tasks.Serve(op, req.Method, req.Params)
		if rerr != nil {
			return map[string]any{"id": req.ID, "error": map[string]any{"code": rerr.Code, "message": rerr.Message, "data": rerr.Data}}
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			panic(err)
		}
		return result(v)
	default:
		return fail(-32601, "Method "+req.Method+" not found", nil)
	}
	tool, ok := s.tools[params.Name]
	if !ok {
		return fail(-32602, "unknown tool "+params.Name, nil)
	}
	args, stripped := params.Arguments, json.RawMessage(nil)
	if s.in.StripsKey(params.Name, tool.info) {
		args, stripped = StripKeyArgument(args)
	}
	call := &ToolCall{Tool: params.Name, Arguments: args, StrippedKey: stripped, Meta: params.Meta, Info: tool.info,
		Continuation: params.RequestState != ""}
	if tool.schema != nil {
		v, err := NewSchemaValidator(tool.schema)
		if err != nil {
			panic(err)
		}
		call.Validator = v
	}
	upstream := func(ctx context.Context) (json.RawMessage, error) {
		tool.mu.Lock()
		tool.runs++
		tool.mu.Unlock()
		return tool.run(ctx, args)
	}
	if len(params.Task) > 0 && s.tasks != nil {
		out, rerr := CreateTask(op, s.tasks, call, RawCodec{}, upstream)
		if rerr != nil {
			end = Response{HasCode: true, Code: rerr.Code, Message: rerr.Message}
			return map[string]any{"id": req.ID, "error": map[string]any{"code": rerr.Code, "message": rerr.Message, "data": rerr.Data}}
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			panic(err)
		}
		return result(v)
	}
	out, err := CallTool(op, call, RawCodec{}, upstream)
	if err != nil {
		var re *rpcError
		if errors.As(err, &re) {
			return fail(re.code, re.msg, err)
		}
		return fail(-32603, err.Error(), err)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		panic(err)
	}
	return result(v)
}

// rig is a rawServer with recorders.
type rig struct {
	t      *testing.T
	srv    *rawServer
	sr     *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	store  idemstore.Store
	log    *bytes.Buffer
	nextID int
	mu     sync.Mutex // protects nextID
}

type rigConfig struct {
	store    idemstore.Store
	guard    *idemkit.Config
	noGuard  bool
	cfg      func(*Config)
	session  string
	local    bool
	authentc bool
}

func newRig(t *testing.T, rc rigConfig) *rig {
	t.Helper()
	r := &rig{t: t, sr: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), log: &bytes.Buffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	var g *idemkit.Guard
	if !rc.noGuard {
		r.store = rc.store
		if r.store == nil {
			r.store = &idemkit.MemoryStore{}
		}
		var err error
		if g, err = idemkit.NewGuard(r.store, rc.guard); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.TracerProvider, cfg.MeterProvider, cfg.Propagator = tp, mp, propagation.TraceContext{}
	cfg.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: r.log}, nil))
	if rc.cfg != nil {
		rc.cfg(&cfg)
	}
	r.srv = &rawServer{in: New(g, cfg), tools: map[string]*rawTool{}, session: rc.session, protocol: "2025-11-25",
		transport: Transport{Network: "pipe", Local: rc.local, AuthenticSessions: rc.authentc}}
	return r
}

// syncWriter serialises writes to a buffer read by the test.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (r *rig) logged() string {
	return r.log.String()
}

// tool registers a tool whose upstream answers with result (a JSON object)
// and counts its runs.
func (r *rig) tool(name string, info ToolInfo, result string) *rawTool {
	t := &rawTool{info: info, run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(result), nil
	}}
	r.srv.tools[name] = t
	return t
}

// call sends a tools/call with args and meta (nil: none) and returns the
// response.
func (r *rig) call(tool, args string, meta map[string]any) map[string]any {
	r.t.Helper()
	params := map[string]any{"name": tool}
	if args != "" {
		params["arguments"] = json.RawMessage(args)
	}
	if meta != nil {
		params["_meta"] = meta
	}
	return r.send("tools/call", params)
}

func (r *rig) send(method string, params map[string]any) map[string]any {
	r.t.Helper()
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		r.t.Fatal(err)
	}
	return r.srv.handle(context.Background(), string(b))
}

// result returns a response's result object, failing on an error response.
func result(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	res, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a result: %v", resp)
	}
	return res
}

func isError(res map[string]any) bool { b, _ := res["isError"].(bool); return b }

func text(res map[string]any) string {
	c, _ := res["content"].([]any)
	if len(c) == 0 {
		return ""
	}
	m, _ := c[0].(map[string]any)
	s, _ := m["text"].(string)
	return s
}

func metaOf(res map[string]any, key string) map[string]any {
	m, _ := res["_meta"].(map[string]any)
	v, _ := m[key].(map[string]any)
	return v
}

// spans returns the ended spans named name, in end order.
func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func (r *rig) last() map[string]any {
	r.t.Helper()
	ended := r.sr.Ended()
	if len(ended) == 0 {
		r.t.Fatal("no span")
	}
	return attrMap(ended[len(ended)-1])
}

func attrMap(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func assertAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	if got := attrMap(s); !reflect.DeepEqual(got, want) {
		t.Errorf("span %q attributes:\n got %v\nwant %v", s.Name(), dump(got), dump(want))
	}
}

func dump(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		b, _ := json.Marshal(v)
		out = append(out, k+"="+string(b))
	}
	sort.Strings(out)
	return out
}

// metrics returns the recorded metrics by name.
func (r *rig) metrics() map[string]metricdata.Metrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[setKey(dp.Attributes)] = dp.Value
	}
	return out
}

func histCounts(t *testing.T, m metricdata.Metrics) map[string]uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	out := map[string]uint64{}
	for _, dp := range h.DataPoints {
		out[setKey(dp.Attributes)] = dp.Count
	}
	return out
}

func setKey(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func key(kv ...string) string {
	parts := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+"="+kv[i+1])
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
