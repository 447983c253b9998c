// Command dupgen is the demo's duplicate generator: an agent, with its own
// tracer, that talks to refund servers through a real MCP client (mcp-go
// over Streamable HTTP) and makes tool calls run twice the way each of the
// four layers does it in production:
//
//   - transport_retry: a proxy resets the connection after the server
//     answered and POSTs the very same bytes again (same JSON-RPC id, same
//     Mcp-Session-Id);
//   - harness_retry: the harness's per-call timeout fires on a slow refund
//     and it retries at once on the same session (new request ID, no model
//     output in between);
//   - model_reissue: the model loses the result and, after a chat span of a
//     couple of seconds in the same trace, calls again (new request ID);
//   - reconnect_replay: the stream breaks before the answer arrives and the
//     MCP client re-sends the call on a new session;
//
// plus two controls that must not be flagged: a second refund of the same
// order for another amount, and an explicit idempotency_key reused for a
// different refund (rejected by idemkit as a mismatch).
//
// It runs every scenario against each server given, writes what it did to
// -manifest (for the demo's report, examples/demo) and exports its spans (an invoke_agent span
// per scenario, chat spans, tools/call client spans) over OTLP/gRPC.
//
//	dupgen -protected http://127.0.0.1:8080/mcp -unprotected http://127.0.0.1:8081/mcp -gateway http://127.0.0.1:8787/mcp -manifest manifest.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	"github.com/idemkit-mcp/idemkit/examples/internal/telemetry"
)

func main() {
	var (
		protected, unprotected, gateway          string
		protectedSvc, unprotectedSvc, gatewaySvc string
		token, otlp, manifest, service           string
		scenarios                                string
		think                                    time.Duration
	)
	flag.StringVar(&protected, "protected", "", "MCP URL of the refund server protected by idemkit")
	flag.StringVar(&unprotected, "unprotected", "", "MCP URL of the refund server without idemkit")
	flag.StringVar(&gateway, "gateway", "", "MCP URL of idemkit gateway in front of an unprotected refund server")
	flag.StringVar(&protectedSvc, "protected-service", "refundserver", "service.name of the protected server")
	flag.StringVar(&gatewaySvc, "gateway-service", "refundserver-gateway", "service.name of the gateway")
	flag.StringVar(&unprotectedSvc, "unprotected-service", "refundserver-unprotected", "service.name of the unprotected server")
	flag.StringVar(&token, "token", "demo-token-alice", "bearer token the agent sends")
	flag.StringVar(&otlp, "otlp-endpoint", "127.0.0.1:4317", "Collector OTLP/gRPC endpoint (empty: no export)")
	flag.StringVar(&service, "service-name", "dupgen-agent", "service.name of the agent's spans")
	flag.StringVar(&manifest, "manifest", "manifest.json", "where to write what the agent did")
	flag.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios to run (default all)")
	flag.DurationVar(&think, "reissue-think", agent.DefaultReissueThink, "how long the model thinks before re-issuing a call")
	flag.Parse()

	var targets []agent.Target
	if protected != "" {
		targets = append(targets, agent.Target{Name: "protected", URL: protected, Service: protectedSvc, Protected: true})
	}
	if unprotected != "" {
		targets = append(targets, agent.Target{Name: "unprotected", URL: unprotected, Service: unprotectedSvc})
	}
	if gateway != "" {
		targets = append(targets, agent.Target{Name: "gateway", URL: gateway, Service: gatewaySvc, Protected: true, Gateway: true})
	}
	if len(targets) == 0 {
		fmt.Fprintln(os.Stderr, "dupgen: give -protected, -unprotected and/or -gateway")
		os.Exit(2)
	}
	if err := run(targets, token, otlp, service, manifest, scenarios, think); err != nil {
		fmt.Fprintln(os.Stderr, "dupgen:", err)
		os.Exit(1)
	}
}

func run(targets []agent.Target, token, otlp, service, manifest, scenarios string, think time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, Endpoint: otlp, BatchTimeout: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	cfg := agent.Config{Targets: targets, Token: token, TracerProvider: tel.Tracer, ReissueThink: think, Out: os.Stdout}
	if scenarios != "" {
		cfg.Scenarios = strings.Split(scenarios, ",")
	}
	m, runErr := agent.Run(ctx, cfg)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	flushErr := tel.Shutdown(sctx) // the chat spans must reach the Collector
	if m != nil {
		if err := m.Write(manifest); err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (%d scenario runs, %s)\n", manifest, len(m.Runs), m.Ended.Sub(m.Started).Round(100*time.Millisecond))
	}
	if runErr != nil {
		return runErr
	}
	if flushErr != nil {
		return fmt.Errorf("exporting the agent's spans: %w", flushErr)
	}
	return nil
}
