package harness

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func TestParseText_ExpandsHistogramsAndUnescapes(t *testing.T) {
	in := `# HELP gap Gap.
# TYPE gap histogram
gap_bucket{cause="transport_retry",le="100"} 0
gap_bucket{cause="transport_retry",le="250"} 1
gap_bucket{cause="transport_retry",le="+Inf"} 1
gap_sum{cause="transport_retry"} 120
gap_count{cause="transport_retry"} 1
# TYPE calls_total counter
calls_total{service_name="a\"b\\c",tool="x"} 2
calls_total{service_name="d",tool="x"} 3
plain 3.5 1700000000
`
	ss, err := ParseText(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"gap_bucket", map[string]string{"le": "250"}, 1},
		{"gap_bucket", map[string]string{"le": "100"}, 0},
		{"gap_bucket", map[string]string{"le": "+Inf"}, 1},
		{"gap_count", nil, 1},
		{"gap_sum", map[string]string{"cause": "transport_retry"}, 120},
		{"calls_total", map[string]string{"service_name": `a"b\c`}, 2},
		{"calls_total", map[string]string{"tool": "x"}, 5},
		{"plain", nil, 3.5},
	} {
		if got, ok := ss.Sum(c.name, c.match); !ok || got != c.want {
			t.Errorf("Sum(%s, %v) = %v, %v; want %v", c.name, c.match, got, ok, c.want)
		}
	}
	if by := ss.By("calls_total", "service_name", nil); by["d"] != 3 || len(by) != 2 {
		t.Errorf("By = %v", by)
	}
	if why := ss.Unmet([]Expect{{Name: "calls_total", Value: 5}, {Name: "gap_count", Value: 2}}); !strings.Contains(why, "gap_count") {
		t.Errorf("Unmet = %q, want the gap_count expectation", why)
	}
	if _, err := ParseText(strings.NewReader("calls_total{service_name=\"x} 1\n")); err == nil {
		t.Error("a malformed exposition parsed")
	}
}

func TestReadSpans_ReadsFileExporterLines(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "refundserver")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("scope")
	s := ss.Spans().AppendEmpty()
	s.SetName("execute_tool issue_refund")
	s.SetKind(ptrace.SpanKindServer)
	s.SetTraceID(pcommon.TraceID{1, 2, 3})
	s.SetSpanID(pcommon.SpanID{4, 5})
	s.SetStartTimestamp(42)
	s.SetEndTimestamp(50)
	s.Attributes().PutStr("gen_ai.tool.name", "issue_refund")
	s.Attributes().PutInt("gap_ms", 318)
	s.Attributes().PutBool("dup", true)
	s.Attributes().PutDouble("ratio", 0.5)
	line, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "spans.jsonl")
	// Two lines, then a half-written one.
	content := string(line) + "\n" + string(line) + "\n" + string(line[:len(line)/2])
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	spans, err := ReadSpans(path, filepath.Join(dir, "missing.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := spans[0]
	if got.Service != "refundserver" || got.Scope != "scope" || got.Kind != int(ptrace.SpanKindServer) || got.Start != 42 || got.End != 50 ||
		got.TraceID != "01020300000000000000000000000000" || got.SpanID != "0405000000000000" || got.ParentSpanID != "" {
		t.Errorf("span %+v", got)
	}
	if got.Str("gen_ai.tool.name") != "issue_refund" || got.Int("gap_ms") != 318 || !got.Bool("dup") {
		t.Errorf("attributes %v", got.Attrs)
	}
	if f, ok := got.Float("ratio"); !ok || f != 0.5 {
		t.Errorf("Float(ratio) = %v, %v", f, ok)
	}
	if f, ok := got.Float("gap_ms"); !ok || f != 318 {
		t.Errorf("Float(gap_ms) = %v, %v", f, ok)
	}

	// A bad line that is not the last is an error.
	if err := os.WriteFile(path, []byte("{not json\n"+string(line)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpans(path); err == nil || !strings.Contains(err.Error(), "spans.jsonl:1") {
		t.Errorf("a corrupt first line: err = %v, want one naming line 1", err)
	}
}

func TestGroup_StartWaitStop(t *testing.T) {
	ctx := context.Background()
	g := &Group{Dir: t.TempDir()}
	t.Cleanup(func() { _ = g.StopAll(time.Second) })

	// Ready when it listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p, err := g.Start("listener", nil, "sh", "-c", "echo starting; sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, "its port", 300*time.Millisecond, Listening(addr)); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("WaitReady on a port nobody opens: err = %v, want a timeout with the log's tail", err)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Error("still running after Stop")
	}

	// A process that exits before it is ready.
	p, err = g.Start("crasher", []string{"WHAT=boom"}, "sh", "-c", "echo $WHAT; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(ctx, "a file", time.Minute, FileNotEmpty(filepath.Join(g.Dir, "never")))
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("WaitReady on a process that exits: err = %v", err)
	}

	// A process that ignores SIGTERM is killed, and that is reported.
	p, err = g.Start("stubborn", nil, "sh", "-c", "trap '' TERM; echo ready; sleep 60 & wait")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, "its first line", 10*time.Second, FileNotEmpty(p.Log)); err != nil {
		t.Fatal(err)
	}
	if err := g.StopAll(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("StopAll on a process that ignores SIGTERM: err = %v", err)
	}
}

func TestFreePort_NeverTheSameTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

func TestTraceFileOverlay_AppendsToThePipelinesOfTheProcessor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := `
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, dup, batch]
      exporters: [dup, debug]
    traces/raw:
      receivers: [otlp]
      exporters: [debug]
    metrics:
      receivers: [dup]
      exporters: [prometheus]
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := TraceFileOverlay(path, "dup", "file/evidence", "/tmp/spans.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"file/evidence:", "path: /tmp/spans.jsonl", "traces:", "- dup\n", "- debug\n", "- file/evidence\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("overlay lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "traces/raw") || strings.Contains(got, "metrics") {
		t.Errorf("overlay touches a pipeline without the processor:\n%s", got)
	}
	if _, err := TraceFileOverlay(path, "nope", "file/evidence", "x"); err == nil {
		t.Error("no error for a processor no pipeline runs")
	}
}
