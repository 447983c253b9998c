package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gatewayconfig"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// configParityYAML is the gateway's configuration file of the parity test;
// configParityMiddleware is what the middleware is given for the same
// settings, written by hand from the middleware's own options.
const configParityYAML = `
defaults:
  failure_policy: release
call_status_tool:
  enabled: true
tools:
  issue_refund:
    window: 1m
    exclude: [nonce]
  declined:
    failure_policy: store
  lookup:
    protect: true
  send:
    protect: false
  hold:
    lease: 45s
    status_tool: hold_status
  hold_wait:
    wait: 1h
  transfer:
    require_key: true
    version: "2"
  flaky:
    max_attempts: 2
  stamp:
    exclude: [/order/requested_at, /items/*/nonce]
    round:
      /sent_at: 1m
`

func configParityMiddleware() []instrument.Option {
	return []instrument.Option{
		instrument.WithExclude("issue_refund", "nonce"),
		instrument.WithProtect("lookup"),
		instrument.WithBypass("send"),
		instrument.WithStatusTool("hold", "hold_status"),
		instrument.WithCallStatusTool(""),
		instrument.WithRequireKey("transfer"),
		instrument.WithToolVersion("transfer", "2"),
		instrument.WithExclude("stamp", "/order/requested_at", "/items/*/nonce"),
		instrument.WithRound("stamp", "/sent_at", time.Minute),
	}
}

var configParityGuardTools = map[string]idemkit.ToolConfig{
	"issue_refund": {Window: time.Minute},
	"declined":     {FailurePolicy: idemkit.StoreToolErrors},
	"hold":         {Lease: 45 * time.Second},
	"hold_wait":    {Wait: time.Hour},
	"flaky":        {MaxAttempts: 2},
}

// configParityServer is the server both sides run: one tool per setting,
// counting its runs.
type configParityServer struct {
	parityServer
	waitHolding chan struct{}
	waitRelease chan struct{}
}

func newConfigParityServer() *configParityServer {
	return &configParityServer{parityServer: *newParityServer(), waitHolding: make(chan struct{}, 1), waitRelease: make(chan struct{})}
}

func (p *configParityServer) register(s *server.MCPServer) {
	text := func(t string) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p.ran(req.Params.Name)
			return mcp.NewToolResultText(fmt.Sprintf("%s %d", t, p.count(req.Params.Name))), nil
		}
	}
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id"), mcp.WithString("nonce")), text("refund"))
	s.AddTool(mcp.NewTool("declined", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("declined")
		return mcp.NewToolResultError("card declined"), nil
	})
	s.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true), mcp.WithString("x")), text("paid"))
	s.AddTool(mcp.NewTool("send", mcp.WithString("x")), text("sent"))
	s.AddTool(mcp.NewTool("hold", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("hold")
		p.holding <- struct{}{}
		<-p.release
		return mcp.NewToolResultText("held"), nil
	})
	s.AddTool(mcp.NewTool("transfer", mcp.WithString("to")), text("transferred"))
	s.AddTool(mcp.NewTool("stamp"), text("stamped"))
	s.AddTool(mcp.NewTool("flaky", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("flaky")
		return nil, errors.New("the payment provider timed out")
	})
	s.AddTool(mcp.NewTool("hold_wait", mcp.WithString("x")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.ran("hold_wait")
		p.waitHolding <- struct{}{}
		<-p.waitRelease
		return mcp.NewToolResultText("waited for"), nil
	})
}

// busySignalStore tells, on busy, that a claim found its key in progress.
type busySignalStore struct {
	idemkit.MemoryStore
	busy chan string // tool
}

func (s *busySignalStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	cr, err := s.MemoryStore.Claim(ctx, req)
	if err == nil && cr.Status == idemstore.ClaimBusy {
		select {
		case s.busy <- req.Tool:
		default:
		}
	}
	return cr, err
}

// fakeClock is the clock both sides' Guards and stores share, so that
// windows run out without waiting.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration)      { c.ns.Add(int64(d)) }
func newFakeClock() *fakeClock                    { c := &fakeClock{}; c.ns.Store(time.Now().UnixNano()); return c }
func (c *fakeClock) guardConfig() *idemkit.Config { return &idemkit.Config{Now: c.now} }

// exerciseConfig makes the same calls to a server at url, one group per
// setting, and returns the answers whose bytes both sides must agree on.
func exerciseConfig(t *testing.T, url string, p *configParityServer, st *busySignalStore, clock *fakeClock) map[string]map[string]any {
	t.Helper()
	ctx := context.Background()
	c := parityClient(t, url, "tok")
	defer c.Close()
	answers := map[string]map[string]any{}
	call := func(label, tool string, args map[string]any) {
		t.Helper()
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = tool, args
		res, err := c.CallTool(ctx, r)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		a := resultJSON(t, res)
		if meta, ok := a["_meta"].(map[string]any); ok {
			if st, ok := meta[spancontract.CallStatusMetaKey].(map[string]any); ok {
				delete(st, "started") // the shared clock moved on between the sides
			}
		}
		answers[label] = a
	}
	lr, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := json.Marshal(lr.Tools)
	var tools []map[string]any
	if err := json.Unmarshal(listed, &tools); err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		answers["listed "+tl["name"].(string)] = tl
	}
	status := func(label string, args map[string]any) {
		t.Helper()
		call(label, mcpcall.DefaultCallStatusTool, args)
	}
	status("status before the refund", map[string]any{"tool": "issue_refund", "arguments": map[string]any{"order_id": "o-1", "nonce": "z"}})
	// exclude: a retry with another nonce is the same call.
	call("refund", "issue_refund", map[string]any{"order_id": "o-1", "nonce": "a"})
	call("refund, another nonce", "issue_refund", map[string]any{"order_id": "o-1", "nonce": "b"})
	// The call status tool finds it by its arguments, nonce excluded.
	status("status of the refund", map[string]any{"tool": "issue_refund", "arguments": map[string]any{"order_id": "o-1", "nonce": "z"}})
	// failure_policy store: the isError answer is kept and replayed.
	call("declined", "declined", map[string]any{"x": "1"})
	call("declined again", "declined", map[string]any{"x": "1"})
	status("status of declined", map[string]any{"tool": "declined", "arguments": map[string]any{"x": "1"}})
	// protect: a read-only tool protected, a write tool bypassed.
	call("lookup", "lookup", map[string]any{"x": "1"})
	call("lookup again", "lookup", map[string]any{"x": "1"})
	call("send", "send", map[string]any{"x": "1"})
	call("send again", "send", map[string]any{"x": "1"})
	status("status of send", map[string]any{"tool": "send", "arguments": map[string]any{"x": "1"}})
	status("status of lookup", map[string]any{"tool": "lookup", "arguments": map[string]any{"x": "1"}})
	// lease and status_tool: the in-progress answer of a duplicate names
	// the status tool and the lease left (the clock stands still).
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = "hold", map[string]any{"x": "1"}
		if _, err := c.CallTool(ctx, r); err != nil {
			t.Errorf("hold: %v", err)
		}
	}()
	<-p.holding
	call("hold, in progress", "hold", map[string]any{"x": "1"})
	status("status of hold, in progress", map[string]any{"tool": "hold", "arguments": map[string]any{"x": "1"}})
	close(p.release)
	<-done
	// wait: a duplicate of a running call waits for its result.
	waited := make(chan struct{})
	var waitedFor map[string]any // the duplicate's answer, read after waited
	go func() {
		defer close(waited)
		<-p.waitHolding
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = "hold_wait", map[string]any{"x": "1"}
		res, err := c.CallTool(ctx, r)
		if err != nil {
			t.Errorf("hold_wait duplicate: %v", err)
			return
		}
		waitedFor = resultJSON(t, res)
	}()
	go func() {
		<-st.busy // the duplicate found the call running, and waits
		close(p.waitRelease)
	}()
	call("hold_wait", "hold_wait", map[string]any{"x": "1"})
	<-waited
	answers["hold_wait, waited"] = waitedFor
	// require_key and version: a transfer without a key is refused, one
	// with a key runs (under a key with the version in it) and is
	// replayed.
	call("transfer without a key", "transfer", map[string]any{"to": "acct-1"})
	call("transfer", "transfer", map[string]any{"to": "acct-1", "idempotency_key": "t-1"})
	call("transfer again", "transfer", map[string]any{"to": "acct-1", "idempotency_key": "t-1"})
	// max_attempts: after two failed attempts a retry runs nothing.
	for i := range 2 {
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = "flaky", map[string]any{"x": "1"}
		if _, err := c.CallTool(ctx, r); err == nil {
			t.Errorf("flaky attempt %d: no error", i+1)
		}
	}
	call("flaky, exhausted", "flaky", map[string]any{"x": "1"})
	// exclude by JSON Pointer and round: a retry with other nested
	// nonces and requested_at, and sent_at in the same UTC minute, is the
	// same call; another order, or the next minute, is not; an epoch
	// number where a timestamp is rounded is refused, nothing run.
	stamp := func(order, requestedAt, nonce string, sentAt any) map[string]any {
		return map[string]any{
			"order":   map[string]any{"id": order, "requested_at": requestedAt},
			"items":   []any{map[string]any{"sku": "a", "nonce": nonce}, map[string]any{"sku": "b", "nonce": nonce}},
			"sent_at": sentAt,
		}
	}
	call("stamp", "stamp", stamp("o-1", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:00:05Z"))
	call("stamp, a retry", "stamp", stamp("o-1", "2026-12-02T10:03:00Z", "n2", "2026-12-02T11:00:59.5+01:00"))
	call("stamp, another order", "stamp", stamp("o-2", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:00:05Z"))
	call("stamp, the next minute", "stamp", stamp("o-1", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:01:00Z"))
	call("stamp, not a timestamp", "stamp", stamp("o-1", "2026-12-02T10:00:01Z", "n1", 1764669605))
	// window: past issue_refund's 1m (the default is 10m), it runs again;
	// declined's stored answer (10m) still holds.
	clock.advance(2 * time.Minute)
	call("refund after its window", "issue_refund", map[string]any{"order_id": "o-1", "nonce": "c"})
	call("declined after 2m", "declined", map[string]any{"x": "1"})
	return answers
}

func resultJSON(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProtector_ConfigFileBehavesAsTheMiddlewaresOptions runs the same
// calls against a server behind the mcp-go middleware, configured with
// idemkit.ToolConfig and instrument options, and against a copy behind the
// gateway, configured by a configuration file that says the same: every
// per-tool setting (window, lease, wait, failure policy, status tool,
// exclude, protect and bypass) must make the same calls run, the same
// answers come back, and the same spans and metric points be recorded.
func TestProtector_ConfigFileBehavesAsTheMiddlewaresOptions(t *testing.T) {
	file, err := gatewayconfig.Parse("parity.yaml", []byte(configParityYAML))
	if err != nil {
		t.Fatal(err)
	}
	// The file's status_tool goes to the Guard (idemkit.ToolConfig), the
	// middleware's here through its option; the rest is the same.
	want := maps.Clone(configParityGuardTools)
	want["hold"] = idemkit.ToolConfig{Lease: 45 * time.Second, StatusTool: "hold_status"}
	if got := file.GuardTools(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the file's Guard settings %v, want %v", got, want)
	}
	verify := func(ctx context.Context, token string, r *http.Request) (string, error) {
		return bearerSubject(token), nil
	}
	clock := newFakeClock()

	mw := newTelemetryPair()
	c1 := clock.guardConfig()
	c1.Tools = configParityGuardTools
	st1 := &busySignalStore{busy: make(chan string, 1)}
	g1, err := idemkit.NewGuard(st1, c1)
	if err != nil {
		t.Fatal(err)
	}
	p1 := newConfigParityServer()
	s1 := server.NewMCPServer("refunds", "1", mcpgo.ServerOptions(g1, append([]instrument.Option{
		instrument.WithTracerProvider(mw.tp), instrument.WithMeterProvider(mw.mp),
		instrument.WithSubject(mcpgo.TokenSubject)}, configParityMiddleware()...)...)...)
	p1.register(s1)
	hs1 := httptest.NewServer(mcpgo.RequireBearerToken(verify, &mcpgo.BearerOptions{Optional: true})(
		mcpgo.HTTPHandler(server.NewStreamableHTTPServer(s1, server.WithStateful(true)), false)))
	defer hs1.Close()

	gw := newTelemetryPair()
	c2 := clock.guardConfig()
	c2.Tools = file.GuardTools()
	st2 := &busySignalStore{busy: make(chan string, 1)}
	g2, err := idemkit.NewGuard(st2, c2)
	if err != nil {
		t.Fatal(err)
	}
	p2 := newConfigParityServer()
	s2 := server.NewMCPServer("refunds", "1")
	p2.register(s2)
	hs2 := httptest.NewServer(server.NewStreamableHTTPServer(s2, server.WithStateful(true)))
	defer hs2.Close()
	ic := gw.config()
	file.ApplyInstrumentation(ic)
	ic.CallStatusTool = file.CallStatusToolName("")
	_, gwURL := newGatewayServer(t, hs2.URL+"/mcp", Config{Guard: g2, Instrumentation: ic})

	a1 := exerciseConfig(t, hs1.URL+"/mcp", p1, st1, clock)
	a2 := exerciseConfig(t, gwURL, p2, st2, clock)

	// What each setting must have done, on both sides.
	runs := map[string]int64{"issue_refund": 2, "declined": 1, "lookup": 1, "send": 2, "hold": 1, "hold_wait": 1, "transfer": 1, "flaky": 2, "stamp": 3}
	for tool, want := range runs {
		if a, b := p1.count(tool), p2.count(tool); a != want || b != want {
			t.Errorf("%s ran %d times behind the middleware and %d behind the gateway, want %d", tool, a, b, want)
		}
	}
	replayed := func(res map[string]any) bool {
		meta, _ := res["_meta"].(map[string]any)
		_, ok := meta[spancontract.ReplayMetaKey]
		return ok
	}
	for _, label := range []string{"refund, another nonce", "declined again", "lookup again", "hold_wait, waited", "declined after 2m", "stamp, a retry"} {
		if !replayed(a2[label]) {
			t.Errorf("%s: not replayed behind the gateway: %v", label, a2[label])
		}
	}
	states := map[string]string{"status before the refund": "unknown", "status of send": "not_recorded", "status of lookup": "", "status of hold, in progress": "in_progress",
		"status of the refund": "", "status of declined": ""}
	for label, want := range states {
		meta, _ := a2[label]["_meta"].(map[string]any)
		st, _ := meta[spancontract.CallStatusMetaKey].(map[string]any)
		if got, _ := st["state"].(string); got != want {
			t.Errorf("%s: state %q behind the gateway, want %q: %v", label, got, want, a2[label])
		}
	}
	for _, label := range []string{"status of the refund", "status of declined", "status of lookup"} {
		if !replayed(a2[label]) {
			t.Errorf("%s: not the stored result, replayed: %v", label, a2[label])
		}
	}
	if a2["listed "+mcpcall.DefaultCallStatusTool] == nil {
		t.Errorf("the gateway does not list %s", mcpcall.DefaultCallStatusTool)
	}
	for _, label := range []string{"send again", "refund after its window", "stamp, another order", "stamp, the next minute"} {
		if replayed(a2[label]) {
			t.Errorf("%s: replayed behind the gateway: %v", label, a2[label])
		}
	}
	for label, reason := range map[string]string{"transfer without a key": "missing_key", "flaky, exhausted": "attempts_exhausted", "stamp, not a timestamp": "invalid_arguments"} {
		if got := refusalOf(a2[label]); got != reason {
			t.Errorf("%s: refusal %q behind the gateway, want %q: %v", label, got, reason, a2[label])
		}
	}
	if !replayed(a2["transfer again"]) {
		t.Errorf("transfer again: not replayed: %v", a2["transfer again"])
	}
	inProgress, _ := a2["hold, in progress"]["_meta"].(map[string]any)[spancontract.RefusalMetaKey].(map[string]any)
	// retry_after_ms is the tool's expected remaining time (2 s without a
	// recorded call), bounded by the configured lease of 45 s.
	if ra, _ := inProgress["retry_after_ms"].(float64); inProgress["status_tool"] != "hold_status" || ra <= 0 || ra > 45000 {
		t.Errorf("the in-progress answer's marker %v: want status_tool hold_status and a retry_after_ms within the tool's 45 s lease", inProgress)
	}
	// The answers are the same on both sides, text and markers alike.
	labels := make([]string, 0, len(a1))
	for l := range a1 {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		if !reflect.DeepEqual(a1[l], a2[l]) {
			t.Errorf("%s: middleware %v\n gateway %v", l, a1[l], a2[l])
		}
	}
	if len(a1) != len(a2) {
		t.Errorf("%d answers behind the middleware, %d behind the gateway", len(a1), len(a2))
	}
	sameTelemetry(t, mw, gw, 1)
}

// sameTelemetry checks that two telemetry pairs recorded the same spans (as
// multisets of their views) and the same metric points, once sessions
// sessions have ended on each side.
func sameTelemetry(t *testing.T, mw, gw *telemetryPair, sessions int) {
	t.Helper()
	views := func(p *telemetryPair) map[string]int {
		m := map[string]int{}
		for _, s := range p.spans.Ended() {
			m[viewOf(s).String()]++
		}
		return m
	}
	a, b := views(mw), views(gw)
	var diff []string
	for v, n := range a {
		if b[v] != n {
			diff = append(diff, fmt.Sprintf("middleware %d, gateway %d: %s", n, b[v], v))
		}
	}
	for v, n := range b {
		if _, ok := a[v]; !ok {
			diff = append(diff, fmt.Sprintf("middleware 0, gateway %d: %s", n, v))
		}
	}
	sort.Strings(diff)
	for _, d := range diff {
		t.Error(d)
	}
	deadline := time.Now().Add(5 * time.Second)
	var ma, mb map[string]float64
	for {
		ma, mb = metricPoints(t, mw.reader), metricPoints(t, gw.reader)
		if hasSessions(ma, sessions) && hasSessions(mb, sessions) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ma) == 0 {
		t.Fatal("the middleware recorded no metrics")
	}
	for k, v := range ma {
		if mb[k] != v {
			t.Errorf("%s: middleware %v, gateway %v", k, v, mb[k])
		}
	}
	for k, v := range mb {
		if _, ok := ma[k]; !ok {
			t.Errorf("%s: middleware none, gateway %v", k, v)
		}
	}
}
