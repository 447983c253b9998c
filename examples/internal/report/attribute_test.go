package report

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	htmlreport "github.com/idemkit-mcp/idemkit/cmd/idemkit/report"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// otlpValue is an attribute value in OTLP/JSON. Numbers read back from
// JSON are float64: whole ones were ints.
func otlpValue(v any) map[string]any {
	switch x := v.(type) {
	case string:
		return map[string]any{"stringValue": x}
	case bool:
		return map[string]any{"boolValue": x}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return map[string]any{"intValue": strconv.FormatInt(int64(x), 10)}
		}
		return map[string]any{"doubleValue": x}
	case int64:
		return map[string]any{"intValue": strconv.FormatInt(x, 10)}
	}
	b, _ := json.Marshal(v)
	return map[string]any{"stringValue": string(b)}
}

func otlpAttrs(m map[string]any, skip func(string) bool) []map[string]any {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !skip(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		out = append(out, map[string]any{"key": k, "value": otlpValue(m[k])})
	}
	return out
}

// writeOTLP writes spans as one OTLP/JSON trace export request, one
// resource per service, without the dup processor's annotations: the
// spans as the servers and the agent exported them.
func writeOTLP(t *testing.T, path string, spans []Span) {
	t.Helper()
	annotation := func(k string) bool { return strings.HasPrefix(k, "idemkit.duplicate") }
	byService := map[string][]Span{}
	var services []string
	for _, s := range spans {
		if _, ok := byService[s.Service]; !ok {
			services = append(services, s.Service)
		}
		byService[s.Service] = append(byService[s.Service], s)
	}
	var rss []map[string]any
	for _, svc := range services {
		var out []map[string]any
		res := map[string]any{"service.name": svc}
		for _, s := range byService[svc] {
			for k, v := range s.Resource {
				res[k] = v
			}
			span := map[string]any{
				"traceId": s.TraceID, "spanId": s.SpanID, "name": s.Name, "kind": s.Kind,
				"startTimeUnixNano": strconv.FormatInt(s.Start, 10), "endTimeUnixNano": strconv.FormatInt(s.End, 10),
				"attributes": otlpAttrs(s.Attrs, annotation),
			}
			if s.ParentSpanID != "" {
				span["parentSpanId"] = s.ParentSpanID
			}
			out = append(out, span)
		}
		rss = append(rss, map[string]any{
			"resource":   map[string]any{"attributes": otlpAttrs(res, annotation)},
			"scopeSpans": []map[string]any{{"scope": map[string]any{"name": "recorded"}, "spans": out}},
		})
	}
	b, err := json.Marshal(map[string]any{"resourceSpans": rss})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAttributeHTML_RendersInChromium runs `idemkit attribute --html` on
// the spans of the recorded demo run, stripped of the Collector's
// annotations, and checks the page in headless Chromium against what the
// command reported as JSON and what the input holds: a bar per (service,
// cause, effect) of the right value, a dot per duplicate, and, for each
// trace with a duplicate, a mark for every tool call of each service. The
// offline attribution must also agree with the Collector's verdicts of the
// run.
func TestAttributeHTML_RendersInChromium(t *testing.T) {
	if !BrowserAvailable() && !harness.CI() {
		t.Skip("no chromium (apt-get install chromium); under CI=true this test installs it or fails")
	}
	in := demoInputs(t)
	dir := t.TempDir()
	spansFile := filepath.Join(dir, "spans.jsonl")
	writeOTLP(t, spansFile, in.Spans)

	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bin := filepath.Join(dir, "idemkit")
	var log bytes.Buffer
	if err := harness.Run(ctx, &log, root, "go", "build", "-o", bin, "./cmd/idemkit"); err != nil {
		t.Fatalf("go build ./cmd/idemkit: %v\n%s", err, log.String())
	}
	page := filepath.Join(dir, "attribute.html")
	var out bytes.Buffer
	if err := harness.Run(ctx, &out, dir, bin, "attribute", "--format", "json", "--html", page, spansFile); err != nil {
		t.Fatalf("idemkit attribute: %v\n%s", err, out.String())
	}
	var doc struct {
		ToolSpans  int `json:"tool_spans"`
		Duplicates []struct {
			Service, Cause, Effect string
			TraceID                string `json:"trace_id"`
			GapMS                  int64  `json:"gap_ms"`
		} `json:"duplicates"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}

	// Offline, the same verdicts as the Collector's in the recorded run.
	got, collector := map[string]int{}, map[string]int{}
	for _, d := range doc.Duplicates {
		got[d.Service+"/"+d.Cause+"/"+d.Effect]++
	}
	for i := range in.Spans {
		if cause, effect, ok := in.Spans[i].Duplicate(); ok {
			collector[in.Spans[i].Service+"/"+cause+"/"+effect]++
		}
	}
	if len(got) == 0 || !equalCounts(got, collector) {
		t.Errorf("idemkit attribute found %v, the Collector %v", got, collector)
	}

	// What the page must show, from the JSON and the input.
	want := htmlreport.Expect{Bars: got, Dots: map[string]int{}, Calls: map[string]int{}, Result: "NO LEAKED DUPLICATE"}
	leaked := 0
	traces := map[string]bool{}
	for _, d := range doc.Duplicates {
		want.Dots["gap/"+d.Cause]++
		traces[d.TraceID] = true
		if d.Effect == sc.EffectLeaked {
			leaked++
		}
	}
	if leaked > 0 {
		want.Result = strconv.Itoa(leaked) + " LEAKED"
	}
	want.Timelines = len(traces)
	for i := range in.Spans {
		s := &in.Spans[i]
		// A tool call as the dup processor counts one: execute_tool, or a
		// SERVER span (OTLP kind 2) of tools/call.
		if traces[s.TraceID] && (s.IsTool() || (s.Kind == 2 && s.Str(sc.MCPMethodName) == sc.MethodToolsCall)) {
			want.Calls[s.TraceID+"/"+s.Service]++
		}
	}
	summary, err := CheckInBrowser(ctx, page, filepath.Join(dir, "attribute.png"), want)
	if err != nil {
		t.Fatalf("the attribute report did not render what the command found: %v", err)
	}
	t.Logf("%s; screenshot %s", summary, filepath.Join(dir, "attribute.png"))
	if out := os.Getenv("IDEMKIT_ATTRIBUTE_SCREENSHOT"); out != "" {
		b, _ := os.ReadFile(filepath.Join(dir, "attribute.png"))
		_ = os.WriteFile(out, b, 0o644)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
