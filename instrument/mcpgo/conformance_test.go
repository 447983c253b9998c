package mcpgo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/testing/adaptertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(serveStdioChild) != "" {
		os.Exit(serveStdioMain()) // TestServeStdio_ServesTheProcessStdio's server
	}
	goleak.VerifyTestMain(m)
}

// TestConformance runs the adapter conformance suite on real mcp-go
// servers and clients.
func TestConformance(t *testing.T) { adaptertest.Run(t, harness{}) }

type harness struct{}

// ServesTasks implements adaptertest.TaskHarness: over Streamable HTTP the
// adapter serves MCP tasks from the Guard's store.
func (harness) ServesTasks() bool { return true }

// ServesTxTools implements adaptertest.TxHarness: AddTxTool.
func (harness) ServesTxTools() bool { return true }

type testServer struct {
	srv *server.MCPServer
	tr  adaptertest.Transport
	url string
}

func verifyToken(_ context.Context, token string, _ *http.Request) (string, error) {
	if s, ok := adaptertest.Tokens[token]; ok {
		return s, nil
	}
	return "", ErrInvalidToken
}

func (harness) Start(t *testing.T, cfg adaptertest.Config) adaptertest.Server {
	opts := cfg.Options
	if cfg.Bearer {
		opts = append(opts, instrument.WithSubject(TokenSubject))
	}
	sopts := append(ServerOptions(cfg.Guard, opts...),
		server.WithToolCapabilities(true), server.WithPromptCapabilities(false), server.WithResourceCapabilities(false, false),
		server.WithElicitation())
	if cfg.Tasks {
		sopts = append(sopts, server.WithTaskCapabilities(true, true, true))
	}
	srv := server.NewMCPServer("test", "1.0.0", sopts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := instrumentationOf(srv).Close(ctx); err != nil {
			t.Errorf("closing the instrumentation's tasks: %v", err)
		}
	})
	for _, tool := range cfg.Tools {
		switch tool.TaskSupport {
		case "required":
			handler := toHandler(tool)
			AddTaskTool(srv, toMCPTool(tool), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CreateTaskResult, error) {
				res, err := handler(ctx, req)
				if err != nil {
					return nil, err
				}
				return &mcp.CreateTaskResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}, nil
			})
		case "optional":
			mt := toMCPTool(tool)
			mt.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
			srv.AddTool(mt, toHandler(tool))
		default:
			srv.AddTool(toMCPTool(tool), toHandler(tool))
		}
	}
	for _, tool := range cfg.TxTools {
		run := tool.Run
		AddTxTool(srv, cfg.TxRunner, toMCPTool(adaptertest.Tool{Name: tool.Name}), func(ctx context.Context, tx *sql.Tx, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			args, _ := req.Params.Arguments.(map[string]any)
			r, err := run(ctx, tx, args)
			if err != nil {
				return nil, err
			}
			return toResult(r), nil
		})
	}
	for _, tool := range cfg.PhasedTools {
		external, local := tool.External, tool.Local
		AddPhasedTool(srv, cfg.PhasedRunner, toMCPTool(adaptertest.Tool{Name: tool.Name}),
			func(ctx context.Context, req mcp.CallToolRequest) (any, error) {
				args, _ := req.Params.Arguments.(map[string]any)
				return external(ctx, args)
			},
			func(ctx context.Context, tx *sql.Tx, req mcp.CallToolRequest, ext any) (*mcp.CallToolResult, error) {
				args, _ := req.Params.Arguments.(map[string]any)
				r, err := local(ctx, tx, args, ext)
				if err != nil {
					return nil, err
				}
				return toResult(r), nil
			})
	}
	for _, tool := range cfg.JobTools {
		AddJobTool(srv, cfg.Jobs, toMCPTool(tool), toHandler(tool))
	}
	for _, p := range cfg.Prompts {
		srv.AddPrompt(mcp.NewPrompt(p), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("p", nil), nil
		})
	}
	for _, uri := range cfg.Resources {
		srv.AddResource(mcp.NewResource(uri, "r"), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: "x"}}, nil
		})
	}
	ts := &testServer{srv: srv, tr: cfg.Transport}
	var h http.Handler
	switch cfg.Transport {
	case adaptertest.HTTP:
		h = NewStreamableHTTPHandler(srv, WithHTTPLimits(cfg.HTTPLimits))
	case adaptertest.HTTPUnvalidated:
		h = HTTPHandler(server.NewStreamableHTTPServer(srv), false)
	}
	if h != nil {
		if cfg.Bearer {
			h = RequireBearerToken(verifyToken, nil)(h)
		}
		ts.url = adaptertest.Serve(t, h, cfg)
	}
	return ts
}

func toMCPTool(tool adaptertest.Tool) mcp.Tool {
	schema := tool.Schema
	if schema == nil {
		schema = map[string]any{"type": "object"}
	}
	b, _ := json.Marshal(schema)
	t := mcp.NewToolWithRawSchema(tool.Name, "The "+tool.Name+" tool.", b)
	t.Annotations.ReadOnlyHint = mcp.ToBoolPtr(tool.ReadOnly)
	t.Annotations.IdempotentHint = mcp.ToBoolPtr(tool.Idempotent)
	return t
}

func toHandler(tool adaptertest.Tool) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		if raw := req.Params.RawArguments; len(raw) > 0 {
			if err := json.Unmarshal(raw, &args); err != nil {
				return nil, err
			}
		} else if m, ok := req.Params.Arguments.(map[string]any); ok {
			args = m
		}
		r, err := tool.Run(adaptertest.WithElicit(ctx, elicit), args)
		if err != nil {
			return nil, err
		}
		return toResult(r), nil
	}
}

// elicit asks through RequestElicitation, which keeps the protected call's
// lease while the user answers.
func elicit(ctx context.Context, message string) (string, error) {
	var req mcp.ElicitationRequest
	req.Params = mcp.ElicitationParams{Message: message, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}
	res, err := RequestElicitation(ctx, req)
	if err != nil {
		return "", err
	}
	return string(res.Action), nil
}

// elicitationHandler is the client's user.
type elicitationHandler func(ctx context.Context, message string) string

func (h elicitationHandler) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseAction(h(ctx, req.Params.Message))}}, nil
}

func toResult(r adaptertest.Result) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: r.IsError, Content: []mcp.Content{}}
	for _, s := range r.Text {
		res.Content = append(res.Content, mcp.NewTextContent(s))
	}
	if r.Structured != nil {
		res.StructuredContent = r.Structured
	}
	return res
}

func (s *testServer) URL() string { return s.url }

func (s *testServer) Connect(t *testing.T, cc adaptertest.ClientConfig) adaptertest.Client {
	t.Helper()
	var tr transport.Interface
	switch s.tr {
	case adaptertest.InProcess:
		tr = transport.NewInProcessTransport(s.srv)
	case adaptertest.HTTP, adaptertest.HTTPUnvalidated:
		var opts []transport.StreamableHTTPCOption
		if cc.Token != "" {
			opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + cc.Token}))
		}
		hc := cc.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		if cc.Wire != nil {
			c := *hc
			c.Transport = cc.Wire.RoundTripper(hc.Transport)
			hc = &c
		}
		opts = append(opts, transport.WithHTTPBasicClient(hc))
		var err error
		if tr, err = transport.NewStreamableHTTP(s.url, opts...); err != nil {
			t.Fatal(err)
		}
	case adaptertest.Stdio:
		serverIn, clientOut := io.Pipe()
		clientIn, serverOut := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = server.NewStdioServer(s.srv).Listen(ctx, StdioInput(s.srv, serverIn), serverOut)
		}()
		var out io.WriteCloser = clientOut
		if cc.Wire != nil {
			out = cc.Wire.Writer(clientOut)
		}
		tr = transport.NewIO(clientIn, out, io.NopCloser(strings.NewReader("")))
		t.Cleanup(func() {
			cancel()
			_ = serverOut.Close()
			_ = serverIn.Close()
			<-done
		})
	}
	var copts []client.ClientOption
	if cc.Elicit != nil {
		copts = append(copts, client.WithElicitationHandler(elicitationHandler(cc.Elicit)))
	}
	c := client.NewClient(tr, copts...)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cl := &testClient{c: c}
	t.Cleanup(func() { _ = cl.Close() })
	if cc.OnProgress != nil {
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == string(mcp.MethodNotificationProgress) {
				if p, ok := n.Params.AdditionalFields["progress"].(float64); ok {
					cc.OnProgress(p)
				}
			}
		})
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = cc.Protocol
	init.Params.ClientInfo = mcp.Implementation{Name: "test-client", Version: "1"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatal(err)
	}
	cl.protocol = res.ProtocolVersion
	return cl
}

type testClient struct {
	c        *client.Client
	protocol string
	closed   bool
}

func (c *testClient) CallTool(ctx context.Context, name string, args, meta map[string]any) (map[string]any, error) {
	var req mcp.CallToolRequest
	req.Params.Name = name
	if args != nil {
		req.Params.Arguments = args
	}
	if meta != nil {
		m := &mcp.Meta{AdditionalFields: map[string]any{}}
		for k, v := range meta {
			if k == "progressToken" {
				m.ProgressToken = v
				continue
			}
			m.AdditionalFields[k] = v
		}
		req.Params.Meta = m
	}
	res, err := c.c.CallTool(ctx, req)
	if err != nil {
		return nil, rpcError(err)
	}
	return adaptertest.Generic(res), nil
}

// rpcError recovers the JSON-RPC error code of an mcp-go client error.
func rpcError(err error) error {
	for _, e := range []struct {
		sentinel error
		code     int64
	}{
		{mcp.ErrParseError, mcp.PARSE_ERROR}, {mcp.ErrInvalidRequest, mcp.INVALID_REQUEST},
		{mcp.ErrMethodNotFound, mcp.METHOD_NOT_FOUND}, {mcp.ErrInvalidParams, mcp.INVALID_PARAMS},
		{mcp.ErrInternalError, mcp.INTERNAL_ERROR},
	} {
		if errors.Is(err, e.sentinel) {
			return &adaptertest.RPCError{Code: e.code, Message: strings.TrimPrefix(err.Error(), e.sentinel.Error()+": ")}
		}
	}
	return err
}

func (c *testClient) ListTools(ctx context.Context) ([]map[string]any, error) {
	res, err := c.c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(res.Tools))
	for i, tl := range res.Tools {
		out[i] = adaptertest.Generic(tl)
	}
	return out, nil
}

// Ping sends a ping: the suite's clients negotiate a protocol that has it.
func (c *testClient) Ping(ctx context.Context) error {
	//lint:ignore SA1019 ping exists up to protocol 2025-11-25, which the suite negotiates here.
	return c.c.Ping(ctx)
}

func (c *testClient) ListPrompts(ctx context.Context) error {
	_, err := c.c.ListPrompts(ctx, mcp.ListPromptsRequest{})
	return err
}

func (c *testClient) GetPrompt(ctx context.Context, name string) error {
	var req mcp.GetPromptRequest
	req.Params.Name = name
	_, err := c.c.GetPrompt(ctx, req)
	return err
}

func (c *testClient) ListResources(ctx context.Context) error {
	_, err := c.c.ListResources(ctx, mcp.ListResourcesRequest{})
	return err
}

func (c *testClient) ReadResource(ctx context.Context, uri string) error {
	var req mcp.ReadResourceRequest
	req.Params.URI = uri
	_, err := c.c.ReadResource(ctx, req)
	return err
}

func (c *testClient) SessionID() string       { return c.c.GetSessionId() }
func (c *testClient) ProtocolVersion() string { return c.protocol }

func (c *testClient) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.c.Close()
}
