package dashtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	_ "modernc.org/sqlite" // the demo servers' refund databases

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Evidence is what the demo run did, from sources other than Prometheus:
// the duplicate generator's manifest (what each scenario was meant to
// produce), the servers' refund databases (the side effects that really
// happened) and the spans the Collector wrote out (what the dup processor
// decided). The headline panels must agree with it.
type Evidence struct {
	// Services are the demo's servers by service name.
	Services map[string]*ServiceEvidence
	// ToolSpans are the execute_tool spans of the Collectors' files.
	ToolSpans []ToolSpan
	// Requests are the MCP servers' request spans (every method).
	Requests []RequestSpan
	// InferenceSpans counts the inference spans (chat, text_completion,
	// generate_content): the spans a tier-1 Collector copies to every
	// tier-2 Collector as evidence.
	InferenceSpans int
}

// ServiceEvidence is one demo server's share of the evidence.
type ServiceEvidence struct {
	Name      string
	Protected bool
	// Requests are the issue_refund calls the scenarios made reach it.
	Requests int
	// Duplicates are the duplicates the scenarios expect, cause/effect.
	Duplicates []CauseEffect
	// Intended are the refunds the agent meant to make, per order.
	Intended map[string]int
	// Rows are the refund rows in its database, per order.
	Rows map[string]int
}

// CauseEffect is a duplicate's attribution.
type CauseEffect struct {
	Cause, Effect string
}

// ToolSpan is what the checks read of an execute_tool span.
type ToolSpan struct {
	Service, Tool, Outcome string
	// BypassReason, Refusal and FinishError are idemkit.bypass.reason,
	// idemkit.refusal.reason and idemkit.finish.error ("" when absent).
	BypassReason, Refusal, FinishError string
	// ArgsHash reports whether the span carries idemkit.args.hash.
	ArgsHash      bool
	Cause, Effect string // empty unless annotated as a duplicate
	GapMs         float64
	HasGap        bool
}

// ReadOnly reports whether the dup processor ignores the span as a read
// (reason read_only): bypassed because the tool is not protected, without
// the argument hash a write left unprotected carries (or with no reason
// given).
func (s ToolSpan) ReadOnly() bool {
	return s.Outcome == sc.OutcomeBypassed && (s.BypassReason == "" || s.BypassReason == sc.BypassUnprotected && !s.ArgsHash)
}

// Excluded reports whether the dup processor ignores the span for its
// outcome (reason excluded_outcome): a key mismatch, a call idemkit refused
// before any claim (a refusal reason and no outcome: the tool never ran), or
// a bypass reason it does not know.
func (s ToolSpan) Excluded() bool {
	switch {
	case s.Outcome == sc.OutcomeMismatch:
		return true
	case s.Outcome == "" && s.Refusal != "":
		return true
	case s.Outcome == sc.OutcomeBypassed:
		switch s.BypassReason {
		case "", sc.BypassUnprotected, sc.BypassUnscoped, sc.BypassNoGuard:
			return false
		}
		return true
	}
	return false
}

// Tracked reports whether the dup processor tracks the span as a
// candidate: neither a read nor an excluded outcome.
func (s ToolSpan) Tracked() bool { return !s.ReadOnly() && !s.Excluded() }

// RequestSpan is what the checks read of an MCP server's request span.
type RequestSpan struct {
	Service, Method, Session string
}

// DoubleRefunds are the refund rows beyond the intended ones, per order,
// summed: the real double side effects.
func (s *ServiceEvidence) DoubleRefunds() int {
	n := 0
	for order, rows := range s.Rows {
		if extra := rows - s.Intended[order]; extra > 0 {
			n += extra
		}
	}
	return n
}

// manifest is the part of examples/internal/agent.Manifest read here.
type manifest struct {
	Runs []struct {
		Scenario string `json:"scenario"`
		Target   struct {
			Name      string `json:"name"`
			Service   string `json:"service"`
			Protected bool   `json:"protected"`
		} `json:"target"`
		OrderID string `json:"order_id"`
		Expect  struct {
			Requests   int `json:"requests"`
			Intended   int `json:"intended"`
			Duplicates []struct {
				Cause  string `json:"cause"`
				Effect string `json:"effect"`
			} `json:"duplicates"`
		} `json:"expect"`
	} `json:"runs"`
}

// LoadEvidence reads a demo work directory (examples/demo): the manifest
// (manifest.json), each target's refund database (<target name>/refunds.db)
// and the spans the Collectors wrote (spansFiles).
func LoadEvidence(ctx context.Context, dir string, spansFiles []string) (*Evidence, error) {
	manifestPath := filepath.Join(dir, "manifest.json")
	dbs := map[string]string{}
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestPath, err)
	}
	ev := &Evidence{Services: map[string]*ServiceEvidence{}}
	for _, r := range m.Runs {
		s := ev.Services[r.Target.Service]
		if s == nil {
			s = &ServiceEvidence{Name: r.Target.Service, Protected: r.Target.Protected, Intended: map[string]int{}, Rows: map[string]int{}}
			ev.Services[r.Target.Service] = s
		}
		dbs[r.Target.Service] = filepath.Join(dir, r.Target.Name, "refunds.db")
		s.Requests += r.Expect.Requests
		s.Intended[r.OrderID] += r.Expect.Intended
		for _, d := range r.Expect.Duplicates {
			s.Duplicates = append(s.Duplicates, CauseEffect{d.Cause, d.Effect})
		}
	}
	if len(ev.Services) == 0 {
		return nil, fmt.Errorf("%s: no scenario runs", manifestPath)
	}
	for svc, path := range dbs {
		s := ev.Services[svc]
		if s == nil {
			return nil, fmt.Errorf("database %s: service %q is not in the manifest", path, svc)
		}
		if s.Rows, err = refundRows(ctx, path); err != nil {
			return nil, err
		}
	}
	spans, err := harness.ReadSpans(spansFiles...)
	if err != nil {
		return nil, err
	}
	ev.ToolSpans, ev.Requests = ToolSpans(spans), RequestSpans(spans)
	for _, s := range spans {
		switch s.Str(sc.GenAIOperationName) {
		case "chat", "text_completion", "generate_content":
			ev.InferenceSpans++
		}
	}
	if len(ev.ToolSpans) == 0 {
		return nil, fmt.Errorf("%v: no execute_tool span", spansFiles)
	}
	return ev, nil
}

func refundRows(ctx context.Context, path string) (map[string]int, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT order_id, COUNT(*) FROM refunds GROUP BY order_id`)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var order string
		var n int
		if err := rows.Scan(&order, &n); err != nil {
			return nil, err
		}
		out[order] = n
	}
	return out, rows.Err()
}

// GapAttribute is the span attribute with a duplicate's gap, in ms.
const GapAttribute = sc.DuplicateGapMS

// ToolSpans returns what the checks read of the execute_tool spans among
// spans.
func ToolSpans(spans []harness.Span) []ToolSpan {
	var out []ToolSpan
	for _, s := range spans {
		if s.Str(sc.GenAIOperationName) != sc.OperationExecuteTool {
			continue
		}
		ts := ToolSpan{
			Service: s.Service, Tool: s.Str(sc.GenAIToolName), Outcome: s.Str(sc.Outcome),
			BypassReason: s.Str(sc.BypassReason), Refusal: s.Str(sc.RefusalReason), FinishError: s.Str(sc.FinishError),
			ArgsHash: s.Str(sc.ArgsHash) != "",
			Cause:    s.Str(sc.DuplicateCause), Effect: s.Str(sc.DuplicateEffect),
		}
		ts.GapMs, ts.HasGap = s.Float(GapAttribute)
		out = append(out, ts)
	}
	return out
}

// RequestSpans returns the MCP servers' request spans among spans: SERVER
// spans with mcp.method.name.
func RequestSpans(spans []harness.Span) []RequestSpan {
	var out []RequestSpan
	for _, s := range spans {
		if m := s.Str(sc.MCPMethodName); m != "" && s.Kind == spanKindServer {
			out = append(out, RequestSpan{Service: s.Service, Method: m, Session: s.Str(sc.MCPSessionID)})
		}
	}
	return out
}

// spanKindServer is OTLP's SpanKind SERVER.
const spanKindServer = 2

// Count counts the values of key over items, for expectations.
func Count[T any](items []T, key func(T) (string, bool)) map[string]float64 {
	out := map[string]float64{}
	for _, it := range items {
		if k, ok := key(it); ok {
			out[k]++
		}
	}
	return out
}

// SortedKeys returns a map's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
