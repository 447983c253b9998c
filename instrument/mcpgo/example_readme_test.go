package mcpgo_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemkit/sqlitestore"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/instrument/mcpgo"
)

// This file is the README's integration snippet. README.md shows the lines
// between the README:begin and README:end markers verbatim
// (TestREADME_SnippetIsThisExample keeps them equal), and
// scripts/consumer-test.sh compiles this file, as a program, in a fresh
// module outside the repository against the published modules.

type subjectKey struct{}

// principal names the authenticated caller of a request: here, the subject
// that the server's HTTP authentication middleware put in the context.
func principal(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

var refundTool = mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required()),
	mcp.WithNumber("amount_cents", mcp.Required()))

func refundHandler(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return mcp.NewToolResultText("refunded " + req.GetString("order_id", "")), nil
}

// README:begin
func newBillingServer(ctx context.Context) (*server.MCPServer, func() error, error) {
	store, err := sqlitestore.Open(ctx, "idemkit.db", nil) // or pgstore on a shared PostgreSQL
	if err != nil {
		return nil, nil, err
	}
	guard, err := idemkit.NewGuard(store, nil) // 10-minute window, 2-minute lease
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	s := server.NewMCPServer("billing", "1.0.0", mcpgo.ServerOptions(guard,
		instrument.WithSubject(principal))...) // keys are scoped by the authenticated caller
	s.AddTool(refundTool, refundHandler) // an unannotated write tool: protected
	return s, store.Close, nil           // close the store when the server stops
}

// README:end

// The README's snippet builds a server whose write tool is protected.
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
	_, closeStore, err := newBillingServer(context.Background())
	if err != nil {
		panic(err)
	}
	if err := closeStore(); err != nil {
		panic(err)
	}
	// Output:
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
