package mcpgo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// This file is the README's integration snippet. README.md shows the lines
// between the README:begin and README:end markers verbatim
// (TestREADME_SnippetIsThisExample keeps them equal), and
// scripts/consumer-test.sh compiles this file, as a program, in a fresh
// module outside the repository against the published modules, and runs it.

// verifyToken names the caller of a bearer token: here a fixed table; a
// real server verifies a signed token (an OAuth access token, a JWT) and
// returns its subject.
func verifyToken(_ context.Context, token string, _ *http.Request) (string, error) {
	if token == "token-of-alice" {
		return "alice", nil
	}
	return "", mcpgo.ErrInvalidToken
}

var refundTool = mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required()),
	mcp.WithInteger("amount_cents", mcp.Required(), mcp.Min(1)))

var refunds int

func refundHandler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	refunds++
	return mcp.NewToolResultText("refunded " + req.GetString("order_id", "")), nil
}

// README:begin
func newBillingHandler(ctx context.Context) (http.Handler, func() error, error) {
	store, err := sqlitestore.Open(ctx, "idemkit.db", nil) // or pgstore on a shared PostgreSQL
	if err != nil {
		return nil, nil, err
	}
	guard, err := idemkit.NewGuard(store, nil) // 10-minute window, 2-minute lease
	if err != nil {
		return nil, nil, errors.Join(err, store.Close())
	}
	stopSweeper := guard.StartSweeper(time.Minute, nil) // deletes the records whose window ended
	stop := func() error { stopSweeper(); return store.Close() }
	s := server.NewMCPServer("billing", "1.0.0", mcpgo.ServerOptions(guard,
		instrument.WithSubject(mcpgo.TokenSubject))...) // keys are scoped by the caller
	s.AddTool(refundTool, refundHandler) // an unannotated write tool: protected
	auth := mcpgo.RequireBearerToken(verifyToken, nil)
	return auth(mcpgo.NewStreamableHTTPHandler(s)), stop, nil // sessions and bodies bounded by default
}

// README:end

// The README's snippet serves a refund tool that runs once however often
// the model retries it.
func Example_readme() {
	dir, err := os.MkdirTemp("", "idemkit-readme")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	wd, _ := os.Getwd()
	defer func() { _ = os.Chdir(wd) }()
	if err := os.Chdir(dir); err != nil { // the snippet opens idemkit.db in the working directory
		panic(err)
	}
	ctx := context.Background()
	h, closeStore, err := newBillingHandler(ctx)
	if err != nil {
		panic(err)
	}
	defer closeStore()
	hs := httptest.NewServer(h)
	defer hs.Close()

	c, err := client.NewStreamableHttpClient(hs.URL,
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer token-of-alice"}))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		panic(err)
	}
	var req mcp.CallToolRequest
	req.Params.Name = "issue_refund"
	req.Params.Arguments = map[string]any{"order_id": "o-1", "amount_cents": 1250}
	for range 2 { // the model retries
		res, err := c.CallTool(ctx, req)
		if err != nil {
			panic(err)
		}
		replayed := res.Meta != nil && res.Meta.AdditionalFields[spancontract.ReplayMetaKey] != nil
		fmt.Println(res.Content[0].(mcp.TextContent).Text, "- replayed:", replayed)
	}
	fmt.Println("refunds:", refunds)
	// Output:
	// refunded o-1 - replayed: false
	// refunded o-1 - replayed: true
	// refunds: 1
}

func TestREADME_SnippetIsThisExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	snippet := regexp.MustCompile(`(?s)// README:begin\n(.*?)\n// README:end`).FindSubmatch(self)
	if snippet == nil {
		t.Fatal("example_readme_test.go has no README:begin/README:end markers")
	}
	want := strings.TrimSpace(string(snippet[1]))
	if !strings.Contains(string(readme), "```go\n"+want+"\n```") {
		t.Fatalf("README.md does not show the snippet of example_readme_test.go verbatim in a go block; it should show:\n%s", want)
	}
}
