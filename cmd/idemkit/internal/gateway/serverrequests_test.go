package gateway

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Item 6 of issue 19 in the gateway: an upstream tool that asks the client
// (elicitation/create, through the gateway) before its side effect, a
// 500 ms lease, a human who answers after 1.5 s, and a retry sent
// meanwhile. The gateway relays the question and keeps the claim's lease
// while it is open, so the retry is answered in progress: the human is
// asked once, the side effect runs once.

const (
	askLease  = 500 * time.Millisecond
	askAnswer = 1500 * time.Millisecond
)

// wireMoney is the eliciting tool's handler: ask, then (on accept) run the
// side effect.
func wireMoney(effect func()) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second) // a failing test ends
		defer cancel()
		var er mcp.ElicitationRequest
		er.Params = mcp.ElicitationParams{Message: "Wire " + req.GetString("amount", "") + "?", RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}
		res, err := server.ServerFromContext(ctx).RequestElicitation(ctx, er)
		if err != nil {
			return mcp.NewToolResultError("asking failed: " + err.Error()), nil
		}
		if res.Action != mcp.ElicitationResponseActionAccept {
			return mcp.NewToolResultText("not wired"), nil
		}
		effect()
		return mcp.NewToolResultText("wired " + req.GetString("amount", "")), nil
	}
}

func wireMoneyTool() mcp.Tool {
	return mcp.NewTool("wire_money", mcp.WithString("amount", mcp.Required()))
}

// elicitingUpstream is a real mcp-go Streamable HTTP server whose
// wire_money tool elicits; it returns its URL and the side effect's count.
func elicitingUpstream(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	var wired atomic.Int64
	s := server.NewMCPServer("upstream", "1.0.0", server.WithElicitation())
	s.AddTool(wireMoneyTool(), wireMoney(func() { wired.Add(1) }))
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp", &wired
}

// slowHuman is the client's user: counts the questions, answers accept
// after askAnswer.
type slowHuman struct {
	asked atomic.Int64
	first chan struct{} // closed at the first question
	once  sync.Once
	ans   mcp.ElicitationResponseAction
}

func newSlowHuman() *slowHuman {
	return &slowHuman{first: make(chan struct{}), ans: mcp.ElicitationResponseActionAccept}
}

func (h *slowHuman) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked.Add(1)
	h.once.Do(func() { close(h.first) })
	select {
	case <-time.After(askAnswer):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: h.ans}}, nil
}

// leaseGuard is a Guard whose wire_money lease is askLease.
func leaseGuard(t testing.TB) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{
		"wire_money": {Lease: askLease}, "refund": {Lease: askLease},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// elicitingClient returns an initialized mcp-go Streamable HTTP client of
// url whose user is h (declaring the elicitation capability).
func elicitingClient(t testing.TB, url, token string, h client.ElicitationHandler) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	var opts []client.ClientOption
	if h != nil {
		opts = append(opts, client.WithElicitationHandler(h))
	}
	return startClient(t, client.NewClient(tr, opts...))
}

func startClient(t testing.TB, c *client.Client) *client.Client {
	t.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

// askedDuringRetry runs the scenario: first call, the human asked, a retry
// after the lease has run out (from retry, which may be first itself),
// then the first call's answer.
func askedDuringRetry(t *testing.T, tool string, args map[string]any, first, retry *client.Client, h *slowHuman) (firstRes, retryRes *mcp.CallToolResult) {
	t.Helper()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = tool, args
		res, err := first.CallTool(context.Background(), r)
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		done <- res
	}()
	select {
	case <-h.first:
	case <-time.After(10 * time.Second):
		t.Fatal("the user was never asked: the gateway did not relay the question")
	}
	// Twice the lease: without a heartbeat the claim has expired.
	time.Sleep(2 * askLease)
	retryRes = callTool(t, retry, tool, args)
	firstRes = <-done
	if firstRes == nil {
		t.FailNow()
	}
	return firstRes, retryRes
}

func checkAskedOnce(t *testing.T, wired int64, h *slowHuman, firstRes, retryRes *mcp.CallToolResult) {
	t.Helper()
	if wired != 1 || h.asked.Load() != 1 {
		t.Errorf("side effect ran %d times, the user was asked %d times; want 1 and 1", wired, h.asked.Load())
	}
	if !strings.Contains(text(firstRes), "wired") || firstRes.IsError {
		t.Errorf("first call: %q", text(firstRes))
	}
	if got := refusalReason(retryRes); got != spancontract.RefusalInProgress {
		t.Errorf("the retry during the question: reason %q (%q), want %s", got, text(retryRes), spancontract.RefusalInProgress)
	}
}

func TestGateway_UpstreamElicitationKeepsTheLease_HTTP(t *testing.T) {
	url, wired := elicitingUpstream(t)
	_, gw := newGatewayServer(t, url, Config{Guard: leaseGuard(t)})
	h := newSlowHuman()
	a := elicitingClient(t, gw, "tok", h)
	b := elicitingClient(t, gw, "tok", h) // the retry: the same caller, a new session
	firstRes, retryRes := askedDuringRetry(t, "wire_money", map[string]any{"amount": "250.00"}, a, b, h)
	checkAskedOnce(t, wired.Load(), h, firstRes, retryRes)
}

func TestGateway_UpstreamElicitationKeepsTheLease_StdioUpstream(t *testing.T) {
	effects := t.TempDir()
	t.Setenv(stdioEffectsEnv, effects)
	up, _ := stdioUpstream(t)
	g, err := New(Config{Upstream: up, Guard: leaseGuard(t)})
	if err != nil {
		t.Fatal(err)
	}
	gw := serveGateway(t, g)
	h := newSlowHuman()
	a := elicitingClient(t, gw, "tok", h)
	b := elicitingClient(t, gw, "tok", h)
	firstRes, retryRes := askedDuringRetry(t, "wire_money", map[string]any{"amount": "250.00"}, a, b, h)
	checkAskedOnce(t, countEffects(t, effects), h, firstRes, retryRes)
}

func TestGateway_UpstreamElicitationKeepsTheLease_StdioClient(t *testing.T) {
	url, wired := elicitingUpstream(t)
	u, err := NewHTTPUpstream(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstream: u, Guard: leaseGuard(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	h := newSlowHuman()
	c := mcpStdioClient(t, g, h)
	firstRes, retryRes := askedDuringRetry(t, "wire_money", map[string]any{"amount": "250.00"}, c, c, h)
	checkAskedOnce(t, wired.Load(), h, firstRes, retryRes)
}

// mcpStdioClient serves g over pipes to a real mcp-go stdio client whose user
// is h (nil: no elicitation capability).
func mcpStdioClient(t testing.TB, g *Gateway, h client.ElicitationHandler) *client.Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- g.ServeStdio(context.Background(), inR, outW) }()
	t.Cleanup(func() {
		inW.Close()
		<-served
		outW.Close()
	})
	tr := transport.NewIO(outR, inW, io.NopCloser(strings.NewReader("")))
	var opts []client.ClientOption
	if h != nil {
		opts = append(opts, client.WithElicitationHandler(h))
	}
	return startClient(t, client.NewClient(tr, opts...))
}

// stdioEffectsEnv names the directory where the stdio test server's
// wire_money records each run of its side effect as a file.
const stdioEffectsEnv = "GATEWAY_TEST_STDIO_EFFECTS"

func countEffects(t testing.TB, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(entries))
}

// recordEffect is the stdio test server's side effect.
func recordEffect() {
	dir := os.Getenv(stdioEffectsEnv)
	if dir == "" {
		return
	}
	name := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	_ = os.WriteFile(filepath.Join(dir, name), nil, 0o644)
}

// slowRoots is a client whose roots take askAnswer to list, counting the
// requests.
type slowRoots struct {
	*slowHuman
}

func (r slowRoots) ListRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	r.asked.Add(1)
	r.once.Do(func() { close(r.first) })
	select {
	case <-time.After(askAnswer):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &mcp.ListRootsResult{Roots: []mcp.Root{{URI: "file:///srv", Name: "srv"}}}, nil
}

// TestGateway_UpstreamRootsRequestKeepsTheLease: not only elicitation:
// any request the upstream sends the client (here roots/list, which
// mcp-go sends on the session's GET stream, not the call's) keeps the
// call's lease until the answer is relayed.
func TestGateway_UpstreamRootsRequestKeepsTheLease(t *testing.T) {
	var wired atomic.Int64
	s := server.NewMCPServer("upstream", "1.0.0", server.WithRoots())
	s.AddTool(mcp.NewTool("sync_roots"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second) // a failing test ends
		defer cancel()
		res, err := server.ServerFromContext(ctx).RequestRoots(ctx, mcp.ListRootsRequest{})
		if err != nil {
			return mcp.NewToolResultError("roots: " + err.Error()), nil
		}
		wired.Add(1)
		return mcp.NewToolResultText("wired " + res.Roots[0].URI), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"sync_roots": {Lease: askLease}}})
	if err != nil {
		t.Fatal(err)
	}
	_, gw := newGatewayServer(t, hs.URL+"/mcp", Config{Guard: g})
	r := slowRoots{newSlowHuman()}
	newRootsClient := func() *client.Client {
		// mcp-go's server sends roots/list on the session's GET stream,
		// which its client opens only when asked to.
		//lint:ignore SA1019 the legacy GET stream is what carries the upstream's roots/list on protocol 2025-11-25, the case under test
		tr, err := transport.NewStreamableHTTP(gw, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer tok"}), transport.WithContinuousListening())
		if err != nil {
			t.Fatal(err)
		}
		return startClient(t, client.NewClient(tr, client.WithRootsHandler(r)))
	}
	firstRes, retryRes := askedDuringRetry(t, "sync_roots", map[string]any{}, newRootsClient(), newRootsClient(), r.slowHuman)
	checkAskedOnce(t, wired.Load(), r.slowHuman, firstRes, retryRes)
}
