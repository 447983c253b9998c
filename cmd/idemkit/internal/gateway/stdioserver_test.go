package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// stdioServerEnv makes the test binary run as a real mcp-go stdio MCP
// server (the gateway's stdio upstream in these tests) instead of the
// tests; its value is a directory where each server process keeps a file
// named by its PID while it runs, so that a test counts the upstream
// processes alive.
const stdioServerEnv = "GATEWAY_TEST_STDIO_SERVER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(stdioServerEnv); dir != "" {
		os.Exit(runStdioServer(dir))
	}
	os.Exit(m.Run())
}

func runStdioServer(dir string) int {
	pidFile := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(pidFile, nil, 0o644); err != nil {
		return 1
	}
	defer os.Remove(pidFile)
	s := server.NewMCPServer("stdio-upstream", "1.0.0", server.WithElicitation())
	s.AddTool(wireMoneyTool(), wireMoney(recordEffect))
	s.AddTool(mcp.NewTool("big", mcp.WithReadOnlyHintAnnotation(true), mcp.WithNumber("bytes")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("x", req.GetInt("bytes", 0))), nil
		})
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required()), mcp.WithNumber("amount_cents")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("refund issued for " + req.GetString("order_id", "") + " by " + strconv.Itoa(os.Getpid())), nil
		})
	if err := server.ServeStdio(s); err != nil {
		return 1
	}
	return 0
}

// stdioUpstream returns the upstream that runs this test binary as a
// stdio MCP server, and a function that counts its processes alive.
func stdioUpstream(t testing.TB) (*StdioUpstream, func() int) {
	t.Helper()
	dir := t.TempDir()
	u, err := NewStdioUpstream([]string{os.Args[0]}, []string{stdioServerEnv + "=" + dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u, func() int {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
}

// newStdioGatewayServer serves a Gateway in front of a stdio upstream on
// loopback. It returns the gateway, its URL and the process counter.
func newStdioGatewayServer(t testing.TB, cfg Config) (*Gateway, string, func() int) {
	t.Helper()
	up, alive := stdioUpstream(t)
	cfg.Upstream = up
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := serveGateway(t, g)
	return g, url, alive
}

// eventually waits until cond holds or 10s pass, and reports whether it
// held: for what happens in other processes (a process exiting), with no
// claim on how long it takes.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
