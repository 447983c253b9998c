package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	sc "github.com/idemkit/idemkit/spancontract"
)

// Span is a span as the Collector's file exporter wrote it (OTLP JSON),
// reduced to what the report reads.
type Span struct {
	TraceID, SpanID, Name, Service string
	Kind                           int
	Start                          int64 // Unix nanoseconds
	Attrs                          map[string]any
}

// Str returns a string attribute, or "".
func (s *Span) Str(key string) string {
	v, _ := s.Attrs[key].(string)
	return v
}

// Int returns an int attribute, or 0.
func (s *Span) Int(key string) int64 {
	v, _ := s.Attrs[key].(int64)
	return v
}

// IsTool reports an execute_tool span.
func (s *Span) IsTool() bool { return s.Str(sc.GenAIOperationName) == sc.OperationExecuteTool }

// IsChat reports an inference span.
func (s *Span) IsChat() bool { return s.Str(sc.GenAIOperationName) == sc.OperationChat }

// Duplicate returns the span's duplicate annotation, and whether it has one.
func (s *Span) Duplicate() (cause, effect string, ok bool) {
	dup, _ := s.Attrs[sc.Duplicate].(bool)
	return s.Str(sc.DuplicateCause), s.Str(sc.DuplicateEffect), dup
}

// ReadSpans reads a file exporter's output: one OTLP JSON export request
// per line. A missing file is no spans yet; a half-written last line is
// skipped (the exporter may be writing it).
func ReadSpans(path string) ([]Span, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Span
	scn := bufio.NewScanner(f)
	scn.Buffer(make([]byte, 1<<20), 64<<20)
	for scn.Scan() {
		var req otlpTraces
		if json.Unmarshal(scn.Bytes(), &req) != nil {
			continue
		}
		out = append(out, req.spans()...)
	}
	if err := scn.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

type otlpTraces struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []otlpKV `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []struct {
				TraceID    string   `json:"traceId"`
				SpanID     string   `json:"spanId"`
				Name       string   `json:"name"`
				Kind       int      `json:"kind"`
				Start      string   `json:"startTimeUnixNano"`
				Attributes []otlpKV `json:"attributes"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type otlpKV struct {
	Key   string `json:"key"`
	Value struct {
		String *string  `json:"stringValue"`
		Int    *string  `json:"intValue"`
		Bool   *bool    `json:"boolValue"`
		Double *float64 `json:"doubleValue"`
	} `json:"value"`
}

func attrs(kvs []otlpKV) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.Value; {
		case v.String != nil:
			m[kv.Key] = *v.String
		case v.Int != nil:
			n, _ := strconv.ParseInt(*v.Int, 10, 64)
			m[kv.Key] = n
		case v.Bool != nil:
			m[kv.Key] = *v.Bool
		case v.Double != nil:
			m[kv.Key] = *v.Double
		}
	}
	return m
}

func (t *otlpTraces) spans() []Span {
	var out []Span
	for _, rs := range t.ResourceSpans {
		service, _ := attrs(rs.Resource.Attributes)["service.name"].(string)
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				start, _ := strconv.ParseInt(s.Start, 10, 64)
				out = append(out, Span{
					TraceID: s.TraceID, SpanID: s.SpanID, Name: s.Name, Service: service,
					Kind: s.Kind, Start: start, Attrs: attrs(s.Attributes),
				})
			}
		}
	}
	return out
}
