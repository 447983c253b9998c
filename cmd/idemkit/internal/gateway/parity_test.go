package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"sort"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/instrument/mcpgo"
	sc "github.com/idemkit/idemkit/spancontract"
)

// telemetryPair is a span recorder and a metric reader.
type telemetryPair struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	opts   []instrument.Option
}

func newTelemetryPair() *telemetryPair {
	p := &telemetryPair{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	p.opts = []instrument.Option{
		instrument.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))),
		instrument.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))),
	}
	return p
}

// refundTools registers the same two tools on s, counting runs.
func refundTools(s *server.MCPServer, runs *int) {
	s.AddTool(mcp.NewTool("issue_refund", mcp.WithString("order_id", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			*runs++
			return mcp.NewToolResultText("refund issued"), nil
		})
	s.AddTool(mcp.NewTool("lookup", mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("paid"), nil
		})
}

// spanView is what two spans of the same call must share: everything but
// the per-session and per-request values.
type spanView struct {
	Name  string
	Kind  string
	Attrs map[string]string
}

func viewOf(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{Name: s.Name(), Kind: s.SpanKind().String(), Attrs: map[string]string{}}
	for _, kv := range s.Attributes() {
		val := fmt.Sprint(kv.Value.AsInterface())
		switch kv.Key {
		case sc.MCPSessionID, sc.JSONRPCRequestID:
			if val != "" {
				val = "<set>"
			}
		}
		v.Attrs[string(kv.Key)] = val
	}
	return v
}

func metricNames(t *testing.T, r *sdkmetric.ManualReader) map[string][]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []string
			add := func(a attribute.Set) { sets = append(sets, a.Encoded(attribute.DefaultEncoder())) }
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			}
			sort.Strings(sets)
			out[m.Name] = sets
		}
	}
	return out
}

// TestProtector_SameSpansAndMetricsAsTheMiddleware calls a server protected
// by the mcp-go middleware and an unprotected copy behind the gateway, the
// same way, and compares what each records.
func TestProtector_SameSpansAndMetricsAsTheMiddleware(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	subject := "bearer:" + hex.EncodeToString(sum[:])

	// The middleware.
	mw := newTelemetryPair()
	g1, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	var mwRuns int
	s1 := server.NewMCPServer("refunds", "1", mcpgo.ServerOptions(g1, append(mw.opts, instrument.WithSubject(func(context.Context) string { return subject }))...)...)
	refundTools(s1, &mwRuns)
	hs1 := httptest.NewServer(server.NewStreamableHTTPServer(s1, server.WithStateful(true)))
	defer hs1.Close()

	// The gateway in front of an unprotected copy.
	gw := newTelemetryPair()
	g2, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	var gwRuns int
	s2 := server.NewMCPServer("refunds", "1")
	refundTools(s2, &gwRuns)
	hs2 := httptest.NewServer(server.NewStreamableHTTPServer(s2, server.WithStateful(true)))
	defer hs2.Close()
	_, gwURL := newGatewayServer(t, hs2.URL+"/mcp", NewProtector(g2, nil, gw.opts...))

	for _, url := range []string{hs1.URL + "/mcp", gwURL} {
		c := mcpClient(t, url, "tok")
		if _, err := c.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
			t.Fatal(err)
		}
		callTool(t, c, "issue_refund", map[string]any{"order_id": "o-1"})
		callTool(t, c, "issue_refund", map[string]any{"order_id": "o-1"})
		callTool(t, c, "issue_refund", map[string]any{"order_id": "o-2", "idempotency_key": "k-2"})
		callTool(t, c, "lookup", map[string]any{})
	}
	if mwRuns != 2 || gwRuns != 2 {
		t.Fatalf("runs: middleware %d, gateway %d, want 2 each", mwRuns, gwRuns)
	}
	a, b := mw.spans.Ended(), gw.spans.Ended()
	if len(a) != 4 || len(b) != len(a) {
		t.Fatalf("spans: middleware %d, gateway %d, want 4 each", len(a), len(b))
	}
	for i := range a {
		va, vb := viewOf(a[i]), viewOf(b[i])
		if va.Name != vb.Name || va.Kind != vb.Kind {
			t.Errorf("span %d: middleware %s %s, gateway %s %s", i, va.Name, va.Kind, vb.Name, vb.Kind)
		}
		for k, v := range va.Attrs {
			if vb.Attrs[k] != v {
				t.Errorf("span %d (%s) %s: middleware %q, gateway %q", i, va.Name, k, v, vb.Attrs[k])
			}
		}
		for k, v := range vb.Attrs {
			if _, ok := va.Attrs[k]; !ok {
				t.Errorf("span %d (%s): the gateway adds %s=%q", i, vb.Name, k, v)
			}
		}
	}
	if b[1].Attributes() == nil || viewOf(b[1]).Attrs[sc.Outcome] != sc.OutcomeReplayed {
		t.Errorf("the gateway's duplicate span: %+v", viewOf(b[1]))
	}
	ma, mb := metricNames(t, mw.reader), metricNames(t, gw.reader)
	if len(ma) == 0 {
		t.Fatal("the middleware recorded no metrics")
	}
	for name, sets := range ma {
		if got := mb[name]; len(got) != len(sets) {
			t.Errorf("metric %s: middleware %v, gateway %v", name, sets, got)
			continue
		}
		for i := range sets {
			if mb[name][i] != sets[i] {
				t.Errorf("metric %s: middleware %v, gateway %v", name, sets, mb[name])
			}
		}
	}
}
