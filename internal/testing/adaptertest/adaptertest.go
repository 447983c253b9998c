// Package adaptertest is the conformance suite every idemkit MCP front end
// runs (the SDK adapters instrument/mcpgo and instrument/gosdk; the idemkit
// gateway can, with a harness that puts it in front of a server of these
// tools), as every store runs idemkit/storetest: the same behaviours,
// checked the same way, against a real server and a real client over real
// transports. A front end's test package implements Harness and calls Run.
package adaptertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
)

// Transport is how the suite's client reaches the server.
type Transport int

const (
	// InProcess: the SDK's in-process transport (mcp-go's in-process client,
	// the go-sdk's in-memory transports through gosdk.Transport).
	InProcess Transport = iota
	// HTTP: Streamable HTTP on loopback, served through the adapter's
	// NewStreamableHTTPHandler (stateful, validated sessions).
	HTTP
	// HTTPUnvalidated: Streamable HTTP on loopback through the SDK's own
	// handler configured so that session IDs are not validated (mcp-go's
	// default session manager, the go-sdk's stateless mode), wrapped by the
	// adapter's HTTPHandler with validatedSessions false.
	HTTPUnvalidated
	// Stdio: the SDK's stdio transport, over in-process pipes.
	Stdio
)

func (t Transport) String() string {
	return [...]string{"in-process", "http", "http-unvalidated", "stdio"}[t]
}

// Tokens are the bearer tokens a server with Config.Bearer accepts, and the
// subjects they name.
var Tokens = map[string]string{"token-alice": "alice", "token-bob": "bob"}

// LegacyProtocol is the last MCP protocol version with sessions.
const LegacyProtocol = "2025-11-25"

// Config describes a server to build.
type Config struct {
	Transport Transport
	// Guard protects the server's tools; nil observes only.
	Guard *idemkit.Guard
	// Options are the instrumentation's options (the suite's providers and
	// logger first).
	Options []instrument.Option
	// Bearer requires "Authorization: Bearer <token>" (HTTP only), verified
	// against Tokens with the adapter's bearer-token helper, and scopes keys
	// by its subject (instrument.WithSubject with the adapter's
	// TokenSubject).
	Bearer bool
	// Tools are registered with the SDK's low-level tool API.
	Tools []Tool
	// JobTools are registered with the adapter's AddJobTool on Jobs.
	JobTools []Tool
	Jobs     *jobs.Runner
	// Tasks advertises the tasks capability (list, cancel and task-augmented
	// tools/call), for a harness whose SDK has tasks.
	Tasks bool
	// TxTools are registered with the adapter's transactional handler form
	// (AddTxTool) on TxRunner, which is the Guard's store.
	TxTools  []TxTool
	TxRunner instrument.TxRunner[*sql.Tx]
	// PhasedTools are registered with the adapter's phased handler form
	// (AddPhasedTool) on PhasedRunner, which is the Guard's store.
	PhasedTools  []PhasedTool
	PhasedRunner instrument.PhasedRunner[*sql.Tx]
	// Prompts and Resources are registered with trivial handlers.
	Prompts   []string
	Resources []string
	// HTTPLimits are the limits of the adapter's Streamable HTTP handler
	// (HTTP only), given with its WithHTTPLimits.
	HTTPLimits instrument.HTTPLimits
	// ReadTimeout, when set, replaces the ReadTimeout of the HTTP server,
	// which is built by instrument.NewHTTPServer (HTTP and
	// HTTPUnvalidated).
	ReadTimeout time.Duration
}

// Tool describes a tool independently of the SDK.
type Tool struct {
	Name                 string
	ReadOnly, Idempotent bool
	// Schema is the input schema; nil means {"type":"object"}.
	Schema map[string]any
	// Run handles a call: args are the arguments the handler receives. A Go
	// error is returned to the SDK as the handler's error.
	Run func(ctx context.Context, args map[string]any) (Result, error)
	// TaskSupport is the tool's execution.taskSupport: "" (none),
	// "optional" or "required" (a harness registers a "required" tool with
	// its adapter's task tool form).
	TaskSupport string
}

// TxTool describes a transactional tool: Run makes its writes through tx.
type TxTool struct {
	Name string
	Run  func(ctx context.Context, tx *sql.Tx, args map[string]any) (Result, error)
}

// PhasedTool describes a phased tool: External runs outside any
// transaction and its result goes to Local, which makes the tool's writes
// through tx.
type PhasedTool struct {
	Name     string
	External func(ctx context.Context, args map[string]any) (any, error)
	Local    func(ctx context.Context, tx *sql.Tx, args map[string]any, ext any) (Result, error)
}

// TaskHarness is implemented by a Harness that says how its front end
// handles MCP tasks (specification 2025-11-25): ServesTasks is true when it
// serves them from the Guard's store (the suite checks durable tasks), false
// when it has none (the suite checks that a task-augmented call is served
// as a plain, protected call and that the task methods are refused with
// -32601). The suite skips its task case for other harnesses.
type TaskHarness interface {
	Harness
	ServesTasks() bool
}

// TxHarness is implemented by a Harness whose front end has the
// transactional handler form (Config.TxTools); the suite skips its
// transactional case for other harnesses (a gateway relays calls to a
// server it does not share a database with).
type TxHarness interface {
	Harness
	ServesTxTools() bool
}

// Result describes a CallToolResult independently of the SDK.
type Result struct {
	Text       []string
	Structured map[string]any
	IsError    bool
}

// Harness builds servers and clients of one SDK.
type Harness interface {
	// Start builds a server as cfg says and serves it; it is stopped at the
	// test's cleanup.
	Start(t *testing.T, cfg Config) Server
}

// Server is a running server.
type Server interface {
	// Connect returns an initialized client, closed at the test's cleanup
	// unless closed before.
	Connect(t *testing.T, cc ClientConfig) Client
	// URL is the server's MCP endpoint over HTTP, or "".
	URL() string
}

// ClientConfig configures a client.
type ClientConfig struct {
	// Token is the bearer token to send, or "".
	Token string
	// Protocol is the protocol version to negotiate; "" for the client's
	// default.
	Protocol string
	// Wire, when set, records every JSON-RPC message the client sends (HTTP
	// and stdio only).
	Wire *Wire
	// OnProgress receives the progress value of each progress notification.
	OnProgress func(progress float64)
	// HTTPClient, when set, is the HTTP client to use.
	HTTPClient *http.Client
	// Elicit, when set, is the client's user: the client declares the
	// elicitation capability and answers each elicitation/create with the
	// action Elicit returns for its message ("accept", "decline",
	// "cancel"; no content). Unset, the client has no elicitation
	// capability.
	Elicit func(ctx context.Context, message string) string
}

// Client is a connected client.
type Client interface {
	// CallTool calls a tool. A JSON-RPC error is returned as an *RPCError.
	CallTool(ctx context.Context, name string, args map[string]any, meta map[string]any) (map[string]any, error)
	// ListTools lists the tools, as JSON objects.
	ListTools(ctx context.Context) ([]map[string]any, error)
	Ping(ctx context.Context) error
	ListPrompts(ctx context.Context) error
	GetPrompt(ctx context.Context, name string) error
	ListResources(ctx context.Context) error
	ReadResource(ctx context.Context, uri string) error
	// SessionID is the MCP session ID, or "".
	SessionID() string
	// ProtocolVersion is the negotiated protocol version.
	ProtocolVersion() string
	// Close ends the session (over HTTP, with a DELETE).
	Close() error
}

// RPCError is a JSON-RPC error a client received.
type RPCError struct {
	Code    int64
	Message string
}

func (e *RPCError) Error() string { return e.Message }

// generic returns v as JSON-decoded generic values.
func generic(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// Generic returns v as JSON-decoded generic values: harnesses use it to
// turn SDK results into the maps the suite compares.
func Generic(v any) map[string]any { return generic(v) }

// Serve serves h over HTTP on loopback as an MCP server should be served,
// with the server instrument.NewHTTPServer builds (cfg.ReadTimeout
// replacing its read timeout), until the test's cleanup, and returns its
// URL.
func Serve(t *testing.T, h http.Handler, cfg Config) string {
	t.Helper()
	hs := httptest.NewUnstartedServer(h)
	hs.Config = instrument.NewHTTPServer(h)
	if cfg.ReadTimeout > 0 {
		hs.Config.ReadTimeout = cfg.ReadTimeout
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL
}
