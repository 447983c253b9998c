package gosdk

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/testing/adaptertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the adapter conformance suite on real go-sdk
// servers and clients.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }

type harness struct{}

// ServesTasks implements adaptertest.TaskHarness: the go-sdk has no MCP
// tasks; the adapter serves task-augmented calls as plain calls and refuses
// the task methods.
func (harness) ServesTasks() bool { return false }

// ServesTxTools implements adaptertest.TxHarness: AddTxTool.
func (harness) ServesTxTools() bool { return true }

type testServer struct {
	srv *mcp.Server
	tr  adaptertest.Transport
	url string
}

func verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if s, ok := adaptertest.Tokens[token]; ok {
		return &auth.TokenInfo{UserID: s, Expiration: time.Now().Add(time.Hour)}, nil
	}
	return nil, auth.ErrInvalidToken
}

func (harness) Start(t *testing.T, cfg adaptertest.Config) adaptertest.Server {
	opts := cfg.Options
	if cfg.Bearer {
		opts = append(opts, instrument.WithSubject(TokenSubject))
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1.0.0"}, nil)
	Instrument(srv, cfg.Guard, opts...)
	for _, tool := range cfg.Tools {
		srv.AddTool(toMCPTool(tool), toHandler(tool))
	}
	for _, tool := range cfg.JobTools {
		AddJobTool(srv, cfg.Jobs, toMCPTool(tool), toHandler(tool))
	}
	for _, tool := range cfg.TxTools {
		run := tool.Run
		AddTxTool(srv, cfg.TxRunner, toMCPTool(adaptertest.Tool{Name: tool.Name}), func(ctx context.Context, tx *sql.Tx, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args map[string]any
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
			r, err := run(ctx, tx, args)
			if err != nil {
				return nil, err
			}
			return toResult(r), nil
		})
	}
	for _, tool := range cfg.PhasedTools {
		external, local := tool.External, tool.Local
		args := func(req *mcp.CallToolRequest) (map[string]any, error) {
			var args map[string]any
			err := json.Unmarshal(req.Params.Arguments, &args)
			return args, err
		}
		AddPhasedTool(srv, cfg.PhasedRunner, toMCPTool(adaptertest.Tool{Name: tool.Name}),
			func(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
				a, err := args(req)
				if err != nil {
					return nil, err
				}
				return external(ctx, a)
			},
			func(ctx context.Context, tx *sql.Tx, req *mcp.CallToolRequest, ext any) (*mcp.CallToolResult, error) {
				a, err := args(req)
				if err != nil {
					return nil, err
				}
				r, err := local(ctx, tx, a, ext)
				if err != nil {
					return nil, err
				}
				return toResult(r), nil
			})
	}
	for _, p := range cfg.Prompts {
		srv.AddPrompt(&mcp.Prompt{Name: p}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "p"}}}}, nil
		})
	}
	for _, uri := range cfg.Resources {
		srv.AddResource(&mcp.Resource{URI: uri, Name: "r"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "x"}}}, nil
		})
	}
	ts := &testServer{srv: srv, tr: cfg.Transport}
	getServer := func(*http.Request) *mcp.Server { return srv }
	var h http.Handler
	switch cfg.Transport {
	case adaptertest.HTTP:
		h = NewStreamableHTTPHandler(getServer, nil, WithHTTPLimits(cfg.HTTPLimits))
	case adaptertest.HTTPUnvalidated:
		h = NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: true})
	}
	if h != nil {
		if cfg.Bearer {
			h = auth.RequireBearerToken(verifyToken, nil)(h)
		}
		ts.url = adaptertest.Serve(t, h, cfg)
	}
	return ts
}

func toMCPTool(tool adaptertest.Tool) *mcp.Tool {
	schema := tool.Schema
	if schema == nil {
		schema = map[string]any{"type": "object"}
	}
	return &mcp.Tool{Name: tool.Name, Description: "The " + tool.Name + " tool.", InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: tool.ReadOnly, IdempotentHint: tool.Idempotent}}
}

func toHandler(tool adaptertest.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				return nil, err
			}
		}
		ctx = adaptertest.WithElicit(ctx, func(ctx context.Context, message string) (string, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}})
			if err != nil {
				return "", err
			}
			return res.Action, nil
		})
		r, err := tool.Run(ctx, args)
		if err != nil {
			return nil, err
		}
		return toResult(r), nil
	}
}

func toResult(r adaptertest.Result) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: r.IsError, Content: []mcp.Content{}}
	for _, s := range r.Text {
		res.Content = append(res.Content, &mcp.TextContent{Text: s})
	}
	if r.Structured != nil {
		res.StructuredContent = r.Structured
	}
	return res
}

func (s *testServer) URL() string { return s.url }

// headerTransport adds a bearer token to every request.
type headerTransport struct {
	token string
	base  http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	return h.base.RoundTrip(r)
}

func (s *testServer) Connect(t *testing.T, cc adaptertest.ClientConfig) adaptertest.Client {
	t.Helper()
	ctx := context.Background()
	var tr mcp.Transport
	switch s.tr {
	case adaptertest.InProcess:
		st, ct := mcp.NewInMemoryTransports()
		ss, err := s.srv.Connect(ctx, Transport(st), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Wait() })
		tr = ct
	case adaptertest.HTTP, adaptertest.HTTPUnvalidated:
		hc := cc.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		rt := hc.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		if cc.Wire != nil {
			rt = cc.Wire.RoundTripper(rt)
		}
		if cc.Token != "" {
			rt = headerTransport{token: cc.Token, base: rt}
		}
		c := *hc
		c.Transport = rt
		tr = &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: &c}
	case adaptertest.Stdio:
		serverIn, clientOut := io.Pipe()
		clientIn, serverOut := io.Pipe()
		ss, err := s.srv.Connect(ctx, Transport(&mcp.IOTransport{Reader: serverIn, Writer: serverOut}), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Wait() })
		var out io.WriteCloser = clientOut
		if cc.Wire != nil {
			out = cc.Wire.Writer(clientOut)
		}
		tr = &mcp.IOTransport{Reader: clientIn, Writer: out}
	}
	var copts mcp.ClientOptions
	if cc.Elicit != nil {
		copts.ElicitationHandler = func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: cc.Elicit(ctx, r.Params.Message)}, nil
		}
	}
	if cc.OnProgress != nil {
		copts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			cc.OnProgress(r.Params.Progress)
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &copts).
		Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: cc.Protocol})
	if err != nil {
		t.Fatal(err)
	}
	c := &testClient{cs: cs}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type testClient struct {
	cs     *mcp.ClientSession
	closed bool
}

func (c *testClient) CallTool(ctx context.Context, name string, args, meta map[string]any) (map[string]any, error) {
	p := &mcp.CallToolParams{Name: name, Meta: meta}
	if args != nil {
		p.Arguments = args
	}
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		var we *jsonrpc.Error
		if errors.As(err, &we) {
			return nil, &adaptertest.RPCError{Code: we.Code, Message: we.Message}
		}
		return nil, err
	}
	return adaptertest.Generic(res), nil
}

func (c *testClient) ListTools(ctx context.Context) ([]map[string]any, error) {
	res, err := c.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(res.Tools))
	for i, tl := range res.Tools {
		out[i] = adaptertest.Generic(tl)
	}
	return out, nil
}

func (c *testClient) Ping(ctx context.Context) error { return c.cs.Ping(ctx, nil) }

func (c *testClient) ListPrompts(ctx context.Context) error {
	_, err := c.cs.ListPrompts(ctx, nil)
	return err
}

func (c *testClient) GetPrompt(ctx context.Context, name string) error {
	_, err := c.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
	return err
}

func (c *testClient) ListResources(ctx context.Context) error {
	_, err := c.cs.ListResources(ctx, nil)
	return err
}

func (c *testClient) ReadResource(ctx context.Context, uri string) error {
	_, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	return err
}

func (c *testClient) SessionID() string { return c.cs.ID() }

func (c *testClient) ProtocolVersion() string {
	if r := c.cs.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

func (c *testClient) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.cs.Close()
}
