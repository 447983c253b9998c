package adcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgomcp "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/auth"
	gosdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/gosdk"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// reply is what a caller received for one call, whatever the layer.
type reply struct {
	IsError  bool
	Refusal  string         // the io.idemkit/refusal reason ("" when the tool ran or was replayed)
	Replayed bool           // the io.idemkit/replay marker (MCP) or Outcome replayed (Guard)
	Text     string         // the first text content, or the Guard's error text
	Result   map[string]any // the tool's structured answer
	Raw      string         // everything the caller received, for leak checks
	// RetryAfter is the in-progress answer's retry hint: the marker's
	// retry_after_ms (MCP) or InProgressError.RetryAfter (Guard).
	RetryAfter time.Duration
}

// driver sends one call of tool with the raw JSON arguments args for
// principal, through one layer of idemkit.
type driver interface {
	call(t *testing.T, principal, tool string, args []byte) reply
	// enforcesRequiredKeys reports whether the layer can refuse a call
	// without a key (a policy of the MCP instrumentation, not of the Guard).
	enforcesRequiredKeys() bool
}

// env is one vector's world: a fresh seller behind a fresh idemkit.
type env struct {
	d     driver
	s     *seller
	clock *clock // the Guard's clock, when the vector drives it
}

// store kinds.
type storeKind struct {
	name string
	open func(t *testing.T) idemstore.Store
}

var stores = []storeKind{
	{"memory", func(*testing.T) idemstore.Store { return &idemkit.MemoryStore{} }},
	{"sqlite", func(t *testing.T) idemstore.Store {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "vectors.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"postgres", func(t *testing.T) idemstore.Store {
		pool := pgtest.Pool(t)
		s, err := pgstore.New(pool, &pgstore.Config{Schema: pgtest.Schema(t, pool)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// layer builds an env on a store.
type layer struct {
	name string
	new  func(t *testing.T, g *idemkit.Guard, s *seller) driver
}

var layers = []layer{
	{"guard", func(_ *testing.T, g *idemkit.Guard, s *seller) driver { return &guardDriver{g: g, s: s} }},
	{"mcp-go", newMCPGo},
	{"go-sdk", newGoSDK},
}

// newGuard is the Guard every env uses: defaults, but for the clock when
// a vector drives it.
func newGuard(t *testing.T, st idemstore.Store, now func() time.Time) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.NewGuard(st, &idemkit.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// guardDriver drives the Guard directly, as a tool author without an SDK
// adapter would: NewKey with the tool's exclusions, then Do.
type guardDriver struct {
	g *idemkit.Guard
	s *seller
}

func (*guardDriver) enforcesRequiredKeys() bool { return false }

func (d *guardDriver) call(t *testing.T, principal, tool string, args []byte) reply {
	t.Helper()
	var decoded map[string]any
	if err := json.Unmarshal(args, &decoded); err != nil {
		return broken(t, "vector arguments are not JSON: %v", err)
	}
	if tool == toolList { // a read: never guarded
		return answerReply(d.s.call(tool, decoded), false)
	}
	key, err := idemkit.NewKey(principal, tool, args, &idemkit.KeyOptions{Exclude: excluded[tool]})
	if err != nil {
		return errReply(err)
	}
	res, err := d.g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		a := d.s.call(tool, decoded)
		body, err := json.Marshal(map[string]any{"text": a.text, "structured": a.structured})
		return idemkit.Response{Body: body, WriteID: a.writeID, IsError: a.isError}, err
	})
	if err != nil {
		return errReply(err)
	}
	var stored struct {
		Text       string         `json:"text"`
		Structured map[string]any `json:"structured"`
	}
	if err := json.Unmarshal(res.Body, &stored); err != nil {
		return broken(t, "stored body %q: %v", res.Body, err)
	}
	return reply{IsError: res.IsError, Replayed: res.Outcome == idemkit.OutcomeReplayed, Text: stored.Text, Result: stored.Structured, Raw: string(res.Body)}
}

// answerReply is a read's answer, in the JSON form a caller decodes.
func answerReply(a toolAnswer, replayed bool) reply {
	raw, _ := json.Marshal(a.structured)
	var decoded map[string]any
	_ = json.Unmarshal(raw, &decoded)
	return reply{IsError: a.isError, Replayed: replayed, Text: a.text, Result: decoded, Raw: a.text + string(raw)}
}

// errReply maps the Guard's errors to the refusal reasons the MCP layer
// puts in io.idemkit/refusal, so one vector reads both layers.
func errReply(err error) reply {
	r := reply{IsError: true, Text: err.Error(), Raw: err.Error()}
	switch {
	case errors.Is(err, idemkit.ErrKeyMismatch):
		r.Refusal = spancontract.RefusalMismatch
	case errors.Is(err, idemkit.ErrInProgress):
		r.Refusal = spancontract.RefusalInProgress
		if ip, ok := errors.AsType[*idemkit.InProgressError](err); ok {
			r.RetryAfter = ip.RetryAfter
		}
	case errors.Is(err, idemkit.ErrInvalidKey):
		r.Refusal = spancontract.RefusalInvalidKey
	case errors.Is(err, idemkit.ErrInvalidArguments):
		r.Refusal = spancontract.RefusalInvalidArguments
	default:
		r.Refusal = "error: " + err.Error()
	}
	return r
}

// mcpOptions is the instrumentation every MCP env uses: keys scoped by the
// bearer token's principal, a key required on every mutating tool (AdCP:
// "Missing idempotency_key on any mutating request MUST be rejected"), and
// the tool's hash exclusions.
func mcpOptions(subject func(context.Context) string) []instrument.Option {
	opts := []instrument.Option{instrument.WithSubject(subject), instrument.WithRequireKey(toolCreate, toolSession)}
	for tool, fields := range excluded {
		if len(fields) > 0 {
			opts = append(opts, instrument.WithExclude(tool, fields...))
		}
	}
	return opts
}

// principalOf maps a bearer token to the principal it authenticates.
func principalOf(token string) (string, bool) {
	p, ok := strings.CutPrefix(token, "token-")
	return p, ok && p != ""
}

// broken records a failure of the test's own machinery and returns a reply
// no vector accepts. It does not stop the test: calls run on other
// goroutines too (in_flight), where FailNow must not be called.
func broken(t *testing.T, format string, args ...any) reply {
	t.Helper()
	t.Errorf(format, args...)
	return reply{IsError: true, Refusal: "test machinery failed", Raw: "test machinery failed"}
}

// parseResult reads a CallToolResult in its wire form.
func parseResult(t *testing.T, raw []byte) reply {
	t.Helper()
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Structured map[string]any            `json:"structuredContent"`
		IsError    bool                      `json:"isError"`
		Meta       map[string]map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return broken(t, "result %s: %v", raw, err)
	}
	r := reply{IsError: res.IsError, Result: res.Structured, Raw: string(raw)}
	if len(res.Content) > 0 {
		r.Text = res.Content[0].Text
	}
	if m := res.Meta[spancontract.RefusalMetaKey]; m != nil {
		r.Refusal, _ = m["reason"].(string)
		if ms, ok := m["retry_after_ms"].(float64); ok {
			r.RetryAfter = time.Duration(ms) * time.Millisecond
		}
	}
	if m := res.Meta[spancontract.ReplayMetaKey]; m != nil {
		r.Replayed, _ = m["replayed"].(bool)
	}
	return r
}

// mcpDriver is a real server of one SDK on loopback, and a client per
// principal.
type mcpDriver struct {
	owner   *testing.T // the vector's test: clients live as long as it
	url     string
	connect func(t *testing.T, url, token string) func(ctx context.Context, tool string, args []byte) ([]byte, error)
	clients map[string]func(ctx context.Context, tool string, args []byte) ([]byte, error)
	mu      chan struct{} // a one-slot lock over clients
}

func (*mcpDriver) enforcesRequiredKeys() bool { return true }

func (d *mcpDriver) call(t *testing.T, principal, tool string, args []byte) reply {
	t.Helper()
	d.mu <- struct{}{}
	c, ok := d.clients[principal]
	if !ok {
		c = d.connect(d.owner, d.url, "token-"+principal)
		d.clients[principal] = c
	}
	<-d.mu
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := c(ctx, tool, args)
	if err != nil {
		return broken(t, "%s %s: %v", principal, tool, err)
	}
	return parseResult(t, raw)
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newMCPGo(t *testing.T, g *idemkit.Guard, s *seller) driver {
	t.Helper()
	srv := mcpgoserver.NewMCPServer("adcp-seller", "1.0.0",
		append(mcpgo.ServerOptions(g, mcpOptions(mcpgo.TokenSubject)...), mcpgoserver.WithToolCapabilities(true))...)
	for _, name := range []string{toolCreate, toolList, toolSession} {
		tool := mcpgomcp.NewToolWithRawSchema(name, "The AdCP "+name+" task.", json.RawMessage(`{"type":"object"}`))
		tool.Annotations.ReadOnlyHint = mcpgomcp.ToBoolPtr(name == toolList)
		srv.AddTool(tool, func(ctx context.Context, req mcpgomcp.CallToolRequest) (*mcpgomcp.CallToolResult, error) {
			a := s.call(req.Params.Name, req.GetArguments())
			if a.writeID != "" {
				instrument.RecordWrite(ctx, a.writeID)
			}
			res := &mcpgomcp.CallToolResult{Content: []mcpgomcp.Content{mcpgomcp.NewTextContent(a.text)}, IsError: a.isError}
			if a.structured != nil {
				res.StructuredContent = a.structured
			}
			return res, nil
		})
	}
	verify := func(_ context.Context, token string, _ *http.Request) (string, error) {
		if p, ok := principalOf(token); ok {
			return p, nil
		}
		return "", mcpgo.ErrInvalidToken
	}
	url := serve(t, mcpgo.RequireBearerToken(verify, nil)(mcpgo.NewStreamableHTTPHandler(srv)))
	connect := func(t *testing.T, url, token string) func(context.Context, string, []byte) ([]byte, error) {
		c, err := mcpgoclient.NewStreamableHttpClient(url, mcpgotransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			return failing(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ctx := context.Background()
		if err := c.Start(ctx); err != nil {
			return failing(err)
		}
		var init mcpgomcp.InitializeRequest
		init.Params.ProtocolVersion = mcpgomcp.LATEST_PROTOCOL_VERSION
		if _, err := c.Initialize(ctx, init); err != nil {
			return failing(err)
		}
		return func(ctx context.Context, tool string, args []byte) ([]byte, error) {
			var req mcpgomcp.CallToolRequest
			req.Params.Name = tool
			req.Params.Arguments = json.RawMessage(args)
			res, err := c.CallTool(ctx, req)
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}
	return &mcpDriver{owner: t, url: url, connect: connect, clients: map[string]func(context.Context, string, []byte) ([]byte, error){}, mu: make(chan struct{}, 1)}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func newGoSDK(t *testing.T, g *idemkit.Guard, s *seller) driver {
	t.Helper()
	srv := gosdkmcp.NewServer(&gosdkmcp.Implementation{Name: "adcp-seller", Version: "1.0.0"}, nil)
	gosdk.Instrument(srv, g, mcpOptions(gosdk.TokenSubject)...)
	for _, name := range []string{toolCreate, toolList, toolSession} {
		tool := &gosdkmcp.Tool{Name: name, Description: "The AdCP " + name + " task.", InputSchema: map[string]any{"type": "object"},
			Annotations: &gosdkmcp.ToolAnnotations{ReadOnlyHint: name == toolList}}
		srv.AddTool(tool, func(ctx context.Context, req *gosdkmcp.CallToolRequest) (*gosdkmcp.CallToolResult, error) {
			var args map[string]any
			if len(req.Params.Arguments) > 0 {
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return nil, err
				}
			}
			a := s.call(req.Params.Name, args)
			if a.writeID != "" {
				instrument.RecordWrite(ctx, a.writeID)
			}
			res := &gosdkmcp.CallToolResult{Content: []gosdkmcp.Content{&gosdkmcp.TextContent{Text: a.text}}, IsError: a.isError}
			if a.structured != nil {
				res.StructuredContent = a.structured
			}
			return res, nil
		})
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if p, ok := principalOf(token); ok {
			return &auth.TokenInfo{UserID: p, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	h := gosdk.NewStreamableHTTPHandler(func(*http.Request) *gosdkmcp.Server { return srv }, nil)
	url := serve(t, auth.RequireBearerToken(verify, nil)(h))
	connect := func(t *testing.T, url, token string) func(context.Context, string, []byte) ([]byte, error) {
		tr := &gosdkmcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}}
		cs, err := gosdkmcp.NewClient(&gosdkmcp.Implementation{Name: "adcp-buyer", Version: "1"}, nil).Connect(context.Background(), tr, nil)
		if err != nil {
			return failing(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return func(ctx context.Context, tool string, args []byte) ([]byte, error) {
			res, err := cs.CallTool(ctx, &gosdkmcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}
	return &mcpDriver{owner: t, url: url, connect: connect, clients: map[string]func(context.Context, string, []byte) ([]byte, error){}, mu: make(chan struct{}, 1)}
}

// failing is a client that could not connect: every call reports why, so
// that the failure surfaces through broken on whichever goroutine called.
func failing(err error) func(context.Context, string, []byte) ([]byte, error) {
	return func(context.Context, string, []byte) ([]byte, error) { return nil, fmt.Errorf("connecting: %w", err) }
}
