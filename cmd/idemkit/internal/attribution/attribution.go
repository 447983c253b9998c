// Package attribution runs the Collector's dup processor offline: it reads
// OTLP JSON (the Collector file exporter's output, one export request per
// line, or any OTLP/JSON trace export), feeds every span through the real
// processor, built with its public factory, and summarises the duplicates
// it annotated by cause and effect.
package attribution

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Options tune Run. Zero fields keep the processor's defaults.
type Options struct {
	// Window is the processor's window (see dupprocessor.Config.Window).
	Window time.Duration
	// HarnessThreshold is the processor's harness_threshold.
	HarnessThreshold time.Duration
	// DeliberateRepeatGap is the processor's deliberate_repeat_gap.
	DeliberateRepeatGap time.Duration
}

// Result is the outcome of Run.
type Result struct {
	// Traces are the spans as the processor released them, annotated.
	Traces []ptrace.Traces
	// Spans and ToolSpans count the spans read and the tool-call spans
	// among them; Services counts distinct service.name values.
	Spans, ToolSpans, Services int
	// Duplicates are the spans the processor marked as duplicates, in
	// start order.
	Duplicates []Duplicate
	// Window and HarnessThreshold are the processor's, as it ran.
	Window, HarnessThreshold time.Duration
}

// Duplicate is one span the processor annotated as a duplicate.
type Duplicate struct {
	Service, Tool, Cause, Effect, Group string
	TraceID, SpanID, FirstSpanID        string
	Start                               time.Time
	GapMS                               int64
	Outcome                             string
}

// Read decodes every OTLP JSON trace document in r: one per line (the file
// exporter's format) or a single document spread over many lines.
func Read(r io.Reader) ([]ptrace.Traces, error) {
	dec := json.NewDecoder(r)
	var (
		out []ptrace.Traces
		um  ptrace.JSONUnmarshaler
	)
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d is not JSON: %w", n, err)
		}
		if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			return nil, fmt.Errorf("document %d is not an OTLP JSON trace export (an object with resourceSpans)", n)
		}
		td, err := um.UnmarshalTraces(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d is not an OTLP JSON trace export: %w", n, err)
		}
		out = append(out, td)
	}
}

// Run feeds docs through a dup processor and returns what it released.
// Shutdown decides every held span on all the evidence in docs, so the
// outcome does not depend on how fast the file is read.
func Run(ctx context.Context, docs []ptrace.Traces, opts Options) (*Result, error) {
	f := dupprocessor.NewFactory()
	cfg, ok := f.CreateDefaultConfig().(*dupprocessor.Config)
	if !ok {
		return nil, fmt.Errorf("dup processor: unexpected config type %T", f.CreateDefaultConfig())
	}
	res := &Result{}
	services := map[string]bool{}
	for _, td := range docs {
		res.Spans += td.SpanCount()
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			if v, ok := rss.At(i).Resource().Attributes().Get("service.name"); ok {
				services[v.AsString()] = true
			}
		}
	}
	res.Services = len(services)
	if opts.Window > 0 {
		cfg.Window = opts.Window
	}
	if opts.HarnessThreshold > 0 {
		cfg.HarnessThreshold = opts.HarnessThreshold
	}
	if opts.DeliberateRepeatGap > 0 {
		cfg.DeliberateRepeatGap = opts.DeliberateRepeatGap
	}
	// Offline every span is at hand: hold them all until Shutdown, which
	// decides each on all the evidence. The waits are processing time, so
	// they only need to outlast the feeding.
	cfg.DecisionWait = cfg.Window / 2
	cfg.OriginalWait = cfg.Window / 2
	cfg.MaxHeldSpans = max(cfg.MaxHeldSpans, res.Spans+1)
	cfg.MaxGroups = max(cfg.MaxGroups, res.Spans+1)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("dup processor configuration: %w", err)
	}
	res.Window, res.HarnessThreshold = cfg.Window, cfg.HarnessThreshold

	sink := new(consumertest.TracesSink)
	p, err := f.CreateTraces(ctx, processortest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		return nil, fmt.Errorf("create the dup processor: %w", err)
	}
	if err := p.Start(ctx, componenttest.NewNopHost()); err != nil {
		return nil, fmt.Errorf("start the dup processor: %w", err)
	}
	for i, td := range docs {
		if err := p.ConsumeTraces(ctx, td); err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("the dup processor refused document %d: %w", i+1, err)
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		return nil, fmt.Errorf("shut the dup processor down: %w", err)
	}
	res.Traces = sink.AllTraces()
	collect(res)
	return res, nil
}

// isToolSpan reports a tool-call span as the dup processor counts one: an
// execute_tool span of any kind, or an MCP SERVER span of tools/call (a
// client's tools/call span is its view of the call, not an execution).
func isToolSpan(s ptrace.Span) bool {
	if v, ok := s.Attributes().Get(sc.GenAIOperationName); ok && v.Str() == sc.OperationExecuteTool {
		return true
	}
	if s.Kind() != ptrace.SpanKindServer {
		return false
	}
	v, ok := s.Attributes().Get(sc.MCPMethodName)
	return ok && v.Str() == sc.MethodToolsCall
}

func collect(res *Result) {
	for _, td := range res.Traces {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			rs := rss.At(i)
			service := ""
			if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
				service = v.AsString()
			}
			sss := rs.ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				spans := sss.At(j).Spans()
				for k := 0; k < spans.Len(); k++ {
					s := spans.At(k)
					if !isToolSpan(s) {
						continue
					}
					res.ToolSpans++
					a := s.Attributes()
					if v, ok := a.Get(sc.Duplicate); !ok || !v.Bool() {
						continue
					}
					res.Duplicates = append(res.Duplicates, Duplicate{
						Service:     service,
						Tool:        str(a, sc.GenAIToolName),
						Cause:       str(a, sc.DuplicateCause),
						Effect:      str(a, sc.DuplicateEffect),
						Group:       str(a, sc.DuplicateGroup),
						FirstSpanID: str(a, sc.DuplicateFirstSpanID),
						Outcome:     str(a, sc.Outcome),
						GapMS:       intAttr(a, sc.DuplicateGapMS),
						TraceID:     traceID(s.TraceID()),
						SpanID:      spanID(s.SpanID()),
						Start:       s.StartTimestamp().AsTime(),
					})
				}
			}
		}
	}
	sort.SliceStable(res.Duplicates, func(i, j int) bool { return res.Duplicates[i].Start.Before(res.Duplicates[j].Start) })
}

func str(a pcommon.Map, k string) string {
	if v, ok := a.Get(k); ok {
		return v.AsString()
	}
	return ""
}

func intAttr(a pcommon.Map, k string) int64 {
	if v, ok := a.Get(k); ok && v.Type() == pcommon.ValueTypeInt {
		return v.Int()
	}
	return 0
}

func traceID(id pcommon.TraceID) string {
	if id.IsEmpty() {
		return ""
	}
	return id.String()
}

func spanID(id pcommon.SpanID) string {
	if id.IsEmpty() {
		return ""
	}
	return id.String()
}

// Causes and Effects list the processor's values in the order the summary
// prints them.
var (
	Causes  = []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown}
	Effects = []string{sc.EffectSuppressed, sc.EffectBlocked, sc.EffectLeaked}
)

// Counts returns the duplicates counted by cause, then effect.
func (r *Result) Counts() map[string]map[string]int {
	m := map[string]map[string]int{}
	for _, d := range r.Duplicates {
		if m[d.Cause] == nil {
			m[d.Cause] = map[string]int{}
		}
		m[d.Cause][d.Effect]++
	}
	return m
}

// WriteText writes the summary a person reads: the duplicates by cause and
// effect, then every leaked duplicate (a real double side effect).
func (r *Result) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("Read %d spans from %d services: %d tool calls, %d of them duplicates.\n", r.Spans, r.Services, r.ToolSpans, len(r.Duplicates))
	if len(r.Duplicates) == 0 {
		ew.printf("\nNo duplicate tool calls found.\n")
		return ew.err
	}
	counts := r.Counts()
	causes := append([]string(nil), Causes...)
	for c := range counts { // causes this build does not know, last
		if !contains(causes, c) {
			causes = append(causes, c)
		}
	}
	ew.printf("\nDuplicates by cause (the layer that re-sent the call) and effect:\n\n")
	ew.printf("  %-18s %11s %8s %7s %6s\n", "cause", "suppressed", "blocked", "leaked", "total")
	tot := map[string]int{}
	for _, c := range causes {
		row := counts[c]
		if len(row) == 0 {
			continue
		}
		n := 0
		for _, e := range Effects {
			n += row[e]
			tot[e] += row[e]
		}
		ew.printf("  %-18s %11d %8d %7d %6d\n", c, row[sc.EffectSuppressed], row[sc.EffectBlocked], row[sc.EffectLeaked], n)
	}
	ew.printf("  %-18s %11d %8d %7d %6d\n", "total", tot[sc.EffectSuppressed], tot[sc.EffectBlocked], tot[sc.EffectLeaked], len(r.Duplicates))
	ew.printf("\n  suppressed: answered with the stored result; blocked: answered \"in progress\";\n  leaked: executed again (a real double side effect).\n")

	var leaked []Duplicate
	for _, d := range r.Duplicates {
		if d.Effect == sc.EffectLeaked {
			leaked = append(leaked, d)
		}
	}
	if len(leaked) > 0 {
		ew.printf("\nLeaked duplicates:\n\n")
		ew.printf("  %-24s %-20s %-18s %9s  %-32s %s\n", "service", "tool", "cause", "gap", "trace", "first call's span")
		for _, d := range leaked {
			ew.printf("  %-24s %-20s %-18s %7dms  %-32s %s\n", d.Service, d.Tool, d.Cause, d.GapMS, d.TraceID, d.FirstSpanID)
		}
	}
	return ew.err
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// WriteSpans writes the annotated spans in the file exporter's format: one
// OTLP JSON export request per line.
func (r *Result) WriteSpans(w io.Writer) error {
	var m ptrace.JSONMarshaler
	for _, td := range r.Traces {
		b, err := m.MarshalTraces(td)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}
