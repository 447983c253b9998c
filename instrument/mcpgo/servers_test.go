package mcpgo

import (
	"runtime"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// TestServers_ForgetsCollectedServers: instrumenting a server records it
// so that its HTTP handler and tool helpers find the Instrumentation; the
// record must not outlive the server (it did: a global map kept every
// server ever instrumented).
func TestServers_ForgetsCollectedServers(t *testing.T) {
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := servers.Len()
	func() {
		for range 50 {
			s := server.NewMCPServer("s", "1.0.0", ServerOptions(g)...)
			if instrumentationOf(s) == nil {
				t.Fatal("an instrumented server has no Instrumentation")
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for servers.Len() > before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := servers.Len(); n > before {
		t.Fatalf("%d instrumented servers are still recorded after they were collected (%d before)", n, before)
	}
}
