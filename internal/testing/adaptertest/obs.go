package adaptertest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
)

// rig is one test's server with its recorders.
type rig struct {
	t      *testing.T
	sr     *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	log    *lockedBuffer
	store  idemstore.Store
	guard  *idemkit.Guard
	jobs   *jobs.Runner
	srv    Server
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// setup is what a test changes in the default server.
type setup struct {
	transport Transport
	bearer    bool
	noGuard   bool
	store     idemstore.Store
	guardCfg  *idemkit.Config
	opts      []instrument.Option
	tools     []Tool
	jobTools  []Tool
	jobsCfg   *jobs.Config
	tasks     bool
	txTools   []TxTool
	txRunner  instrument.TxRunner[*sql.Tx]
	phased    []PhasedTool
	phRunner  instrument.PhasedRunner[*sql.Tx]
	prompts   []string
	resources []string
	// httpLimits and readTimeout: see Config.
	httpLimits  instrument.HTTPLimits
	readTimeout time.Duration
}

func start(t *testing.T, h Harness, s setup) *rig {
	t.Helper()
	r := &rig{t: t, sr: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), log: &lockedBuffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	if !s.noGuard {
		r.store = s.store
		if r.store == nil {
			r.store = &idemkit.MemoryStore{}
		}
		g, err := idemkit.NewGuard(r.store, s.guardCfg)
		if err != nil {
			t.Fatal(err)
		}
		r.guard = g
		if len(s.jobTools) > 0 {
			jobs, err := jobs.New(g, s.jobsCfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := jobs.Close(ctx); err != nil {
					t.Errorf("Jobs.Close: %v", err)
				}
			})
			r.jobs = jobs
		}
	}
	opts := append([]instrument.Option{
		instrument.WithTracerProvider(tp),
		instrument.WithMeterProvider(mp),
		instrument.WithPropagator(propagation.TraceContext{}),
		instrument.WithLogger(slog.New(slog.NewTextHandler(r.log, nil))),
	}, s.opts...)
	r.srv = h.Start(t, Config{
		Transport: s.transport, Guard: r.guard, Options: opts, Bearer: s.bearer,
		Tools: s.tools, JobTools: s.jobTools, Jobs: r.jobs, Prompts: s.prompts, Resources: s.resources,
		Tasks: s.tasks, TxTools: s.txTools, TxRunner: s.txRunner,
		PhasedTools: s.phased, PhasedRunner: s.phRunner,
		HTTPLimits: s.httpLimits, ReadTimeout: s.readTimeout,
	})
	return r
}

func (r *rig) connect(cc ClientConfig) Client {
	r.t.Helper()
	return r.srv.Connect(r.t, cc)
}

// spans returns the ended spans named name, in end order.
func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans named name have ended (a server may end a
// span just after its response reached the client).
func (r *rig) waitSpans(name string, n int) []sdktrace.ReadOnlySpan {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.spans(name)
		if len(s) >= n || time.Now().After(deadline) {
			if len(s) != n {
				r.t.Fatalf("%d spans named %q, want %d; all: %v", len(s), name, n, names(r.sr.Ended()))
			}
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// hasAttrs reports, as an error message, which of want the span lacks or
// has with another value ("" when it has them all).
func hasAttrs(s sdktrace.ReadOnlySpan, want map[string]any) string {
	got := attrs(s)
	var diffs []string
	for k, v := range want {
		g, ok := got[k]
		switch {
		case v == absent && ok:
			diffs = append(diffs, k+" present ("+dumpValue(g)+"), want absent")
		case v == absent:
		case v == present && ok:
		case !ok:
			diffs = append(diffs, k+" absent, want "+dumpValue(v))
		case !reflect.DeepEqual(g, v):
			diffs = append(diffs, k+"="+dumpValue(g)+", want "+dumpValue(v))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// absent marks an attribute that must not be present; present one that
// must be, with any value.
var (
	absent  = &struct{ absent bool }{}
	present = &struct{ present bool }{}
)

func dumpValue(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (r *rig) metrics() map[string]metricdata.Metrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != instrument.ScopeName {
			r.t.Errorf("metric scope %q, want %q", sm.Scope.Name, instrument.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	if m.Data == nil {
		return nil
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[setKey(dp.Attributes)] = dp.Value
	}
	return out
}

// histPoints returns a histogram's data points' attribute maps and counts.
func histPoints(t *testing.T, m metricdata.Metrics) []histPoint {
	t.Helper()
	if m.Data == nil {
		return nil
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	out := make([]histPoint, 0, len(h.DataPoints))
	for _, dp := range h.DataPoints {
		a := map[string]any{}
		for _, kv := range dp.Attributes.ToSlice() {
			a[string(kv.Key)] = kv.Value.AsInterface()
		}
		out = append(out, histPoint{attrs: a, count: dp.Count})
	}
	return out
}

type histPoint struct {
	attrs map[string]any
	count uint64
}

func setKey(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func key(kv ...string) string {
	parts := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+"="+kv[i+1])
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Result helpers.

func isError(res map[string]any) bool { b, _ := res["isError"].(bool); return b }

func text(res map[string]any) string {
	c, _ := res["content"].([]any)
	var parts []string
	for _, item := range c {
		if m, ok := item.(map[string]any); ok {
			if s, ok := m["text"].(string); ok {
				parts = append(parts, s)
			}
		}
	}
	return strings.Join(parts, "\n")
}

func marker(res map[string]any, key string) map[string]any {
	m, _ := res["_meta"].(map[string]any)
	v, _ := m[key].(map[string]any)
	return v
}

// withoutMarker returns res without _meta[key] (and without _meta when it
// is then empty).
func withoutMarker(res map[string]any, key string) map[string]any {
	out := generic(res)
	if m, ok := out["_meta"].(map[string]any); ok {
		delete(m, key)
		if len(m) == 0 {
			delete(out, "_meta")
		}
	}
	return out
}

// counter counts a tool's runs.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
