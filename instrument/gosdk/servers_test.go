package gosdk

import (
	"runtime"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// TestServers_ForgetsCollectedServers: a server built per request (the
// go-sdk's getServer) is instrumented per request; its record must go with
// it (a global map kept every server ever instrumented).
func TestServers_ForgetsCollectedServers(t *testing.T) {
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := servers.Len()
	func() {
		for range 50 {
			s := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1.0.0"}, nil)
			Instrument(s, g)
			if _, ok := servers.Load(s); !ok {
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
