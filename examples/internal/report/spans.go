package report

import (
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Span is a span the Collector wrote out after the dup processor (OTLP/JSON,
// read by the shared harness), with the report's view of it.
type Span struct {
	harness.Span
}

// IsTool reports an execute_tool span.
func (s *Span) IsTool() bool { return s.Str(sc.GenAIOperationName) == sc.OperationExecuteTool }

// IsChat reports an inference span.
func (s *Span) IsChat() bool { return s.Str(sc.GenAIOperationName) == sc.OperationChat }

// Duplicate returns the span's duplicate annotation, and whether it has one.
func (s *Span) Duplicate() (cause, effect string, ok bool) {
	return s.Str(sc.DuplicateCause), s.Str(sc.DuplicateEffect), s.Bool(sc.Duplicate)
}

// ReadSpans reads the files the Collector's file exporters write (one
// OTLP/JSON export request per line). A missing file is no spans yet; a
// half-written last line is skipped (the exporter may be writing it).
func ReadSpans(paths ...string) ([]Span, error) {
	hs, err := harness.ReadSpans(paths...)
	if err != nil {
		return nil, err
	}
	out := make([]Span, len(hs))
	for i, s := range hs {
		out[i] = Span{s}
	}
	return out, nil
}
