package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Span is a span of an OTLP/JSON file, flattened: its resource's
// service.name and its own attributes as Go values (string, int64,
// float64, bool; other kinds as their string form).
type Span struct {
	TraceID, SpanID, ParentSpanID string // lower-case hex
	Name, Service, Scope          string
	Kind                          int   // OTLP SpanKind: 1 internal, 2 server, 3 client, ...
	Start, End                    int64 // Unix nanoseconds
	Attrs                         map[string]any
	// Resource are the resource's attributes (a Collector may have moved
	// span attributes there, as groupbyattrs does).
	Resource map[string]any `json:",omitempty"`
}

// Str returns a string attribute, or "".
func (s *Span) Str(key string) string {
	v, _ := s.Attrs[key].(string)
	return v
}

// Int returns an int attribute, or 0. (A whole float64 counts too: a Span
// read back from JSON holds its numbers as float64.)
func (s *Span) Int(key string) int64 {
	switch v := s.Attrs[key].(type) {
	case int64:
		return v
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	}
	return 0
}

// Float returns a number attribute (double or int), and whether there is
// one.
func (s *Span) Float(key string) (float64, bool) {
	switch v := s.Attrs[key].(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// Bool returns a bool attribute, or false.
func (s *Span) Bool(key string) bool {
	v, _ := s.Attrs[key].(bool)
	return v
}

// ReadSpans reads the spans of files written by the Collector's file
// exporter (one OTLP/JSON ExportTraceServiceRequest per line), in order. A
// missing file holds no spans yet; a last line that does not parse is
// skipped (the exporter may be writing it); any other line that does not
// parse is an error.
func ReadSpans(paths ...string) ([]Span, error) {
	var out []Span
	var u ptrace.JSONUnmarshaler
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		var pending error // a bad line, fatal unless it is the last
		for line := 1; sc.Scan(); line++ {
			if pending != nil {
				f.Close()
				return nil, pending
			}
			if len(sc.Bytes()) == 0 {
				continue
			}
			td, err := u.UnmarshalTraces(sc.Bytes())
			if err != nil {
				pending = fmt.Errorf("%s:%d: %w", path, line, err)
				continue
			}
			out = AppendSpans(out, td)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return out, nil
}

// AppendSpans appends the spans of td to out.
func AppendSpans(out []Span, td ptrace.Traces) []Span {
	for _, rs := range td.ResourceSpans().All() {
		res := attrs(rs.Resource().Attributes())
		service, _ := res["service.name"].(string)
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				out = append(out, Span{
					TraceID: s.TraceID().String(), SpanID: s.SpanID().String(),
					ParentSpanID: s.ParentSpanID().String(),
					Name:         s.Name(), Service: service, Scope: ss.Scope().Name(),
					Kind:  int(s.Kind()),
					Start: int64(s.StartTimestamp()), End: int64(s.EndTimestamp()),
					Attrs: attrs(s.Attributes()), Resource: res,
				})
			}
		}
	}
	return out
}

func attrs(m pcommon.Map) map[string]any {
	out := make(map[string]any, m.Len())
	for k, v := range m.All() {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			out[k] = v.Str()
		case pcommon.ValueTypeInt:
			out[k] = v.Int()
		case pcommon.ValueTypeDouble:
			out[k] = v.Double()
		case pcommon.ValueTypeBool:
			out[k] = v.Bool()
		default:
			out[k] = v.AsString()
		}
	}
	return out
}
