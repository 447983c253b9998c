package attribution

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// goldenDir is the dup processor's golden test data: input.yaml is what
// reached the processor, expected.yaml what it released.
func goldenDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "collector", "dupprocessor", "testdata")
}

// annotations returns the idemkit.duplicate.* attributes of every span, by
// span ID.
func annotations(tds ...ptrace.Traces) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, td := range tds {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			sss := rss.At(i).ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				spans := sss.At(j).Spans()
				for k := 0; k < spans.Len(); k++ {
					s := spans.At(k)
					m := map[string]string{}
					s.Attributes().Range(func(key string, v pcommon.Value) bool {
						if strings.HasPrefix(key, sc.Duplicate) {
							m[key] = v.AsString()
						}
						return true
					})
					out[s.SpanID().String()] = m
				}
			}
		}
	}
	return out
}

// TestRun_AnnotatesAsTheProcessorGoldenFilesSay feeds each golden case's
// input to the offline run, in one piece (as a file is read), and checks
// that every span gets the annotations the processor's golden output has.
func TestRun_AnnotatesAsTheProcessorGoldenFilesSay(t *testing.T) {
	for _, name := range []string{"transport_retry", "harness_retry", "model_reissue", "reconnect_replay",
		"deliberate_repeat", "effects", "unknown_session", "other_instrumentation", "out_of_order", "long_original", "split_batches"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir(t), name)
			in, err := golden.ReadTraces(filepath.Join(dir, "input.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := golden.ReadTraces(filepath.Join(dir, "expected.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			// Through OTLP JSON, as the command reads it.
			var m ptrace.JSONMarshaler
			b, err := m.MarshalTraces(in)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := Read(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), docs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Spans != in.SpanCount() {
				t.Errorf("Spans = %d, want %d", res.Spans, in.SpanCount())
			}
			got, exp := annotations(res.Traces...), annotations(want)
			if len(got) != len(exp) {
				t.Fatalf("released %d spans, want %d", len(got), len(exp))
			}
			dups := 0
			for id, e := range exp {
				g, ok := got[id]
				if !ok {
					t.Errorf("span %s was not released", id)
					continue
				}
				if e[sc.Duplicate] == "true" {
					dups++
				}
				for k, v := range e {
					if g[k] != v {
						t.Errorf("span %s: %s = %q, want %q", id, k, g[k], v)
					}
				}
				for k, v := range g {
					if _, ok := e[k]; !ok {
						t.Errorf("span %s: unexpected %s = %q", id, k, v)
					}
				}
			}
			if len(res.Duplicates) != dups {
				t.Errorf("Duplicates has %d entries, want %d", len(res.Duplicates), dups)
			}
		})
	}
}

func TestRead_AcceptsLinesAndOneIndentedDocument(t *testing.T) {
	in, err := golden.ReadTraces(filepath.Join(goldenDir(t), "effects", "input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m ptrace.JSONMarshaler
	b, _ := m.MarshalTraces(in)
	lines := append(append(append([]byte(nil), b...), '\n'), b...)
	docs, err := Read(bytes.NewReader(lines))
	if err != nil || len(docs) != 2 {
		t.Fatalf("two lines: %d docs, %v", len(docs), err)
	}
	var indented bytes.Buffer
	if err := jsonIndent(&indented, b); err != nil {
		t.Fatal(err)
	}
	docs, err = Read(&indented)
	if err != nil || len(docs) != 1 || docs[0].SpanCount() != in.SpanCount() {
		t.Fatalf("indented: %d docs, %v", len(docs), err)
	}
	for _, bad := range []string{`[1,2]`, `{"resourceSpans": 3}`, `{"resourceSpans": [`} {
		if _, err := Read(strings.NewReader(bad)); err == nil {
			t.Errorf("Read(%q) succeeded, want an error", bad)
		}
	}
}

func TestWriteText_SummarisesByCauseAndEffect(t *testing.T) {
	in, err := golden.ReadTraces(filepath.Join(goldenDir(t), "effects", "input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), []ptrace.Traces{in}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Duplicates) == 0 {
		t.Fatal("the effects case has no duplicates")
	}
	var out bytes.Buffer
	if err := res.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	counts := res.Counts()
	for cause, row := range counts {
		if !strings.Contains(text, cause) {
			t.Errorf("the summary does not name cause %s:\n%s", cause, text)
		}
		if row[sc.EffectLeaked] > 0 && !strings.Contains(text, "Leaked duplicates:") {
			t.Errorf("leaked duplicates are not listed:\n%s", text)
		}
	}
	t.Log("\n" + text)
}

func jsonIndent(w *bytes.Buffer, b []byte) error { return json.Indent(w, b, "", "  ") }
