package report

import (
	"fmt"
	"sort"
	"strings"
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Evidence is what the span stream says about a duplicate M and the call
// P before it in its group: the fields the dup processor's decision table
// reads (collector/dupprocessor/README.md).
type Evidence struct {
	SameSession  bool
	SameRequest  bool // same non-empty jsonrpc.request.id
	RequestIDs   [2]string
	Sessions     [2]string
	Gap          time.Duration // M's start − P's start
	ChatsBetween int           // chat spans of the trace started strictly between P and M
}

// Cause applies the rows of the decision table that the demo's evidence
// can reach (reliable sessions, known request IDs) and returns the cause
// they give. The report prints it beside the Collector's verdict; the
// examples' tests use it to check the evidence without a Collector.
func (e Evidence) Cause(harnessThreshold time.Duration) string {
	switch {
	case e.SameSession && e.SameRequest:
		return sc.CauseTransportRetry // row 3
	case !e.SameSession:
		return sc.CauseReconnectReplay // row 4
	case e.RequestIDs[0] == "" || e.RequestIDs[1] == "":
		if e.ChatsBetween > 0 {
			return sc.CauseModelReissue // row 7
		}
		return sc.CauseUnknown // row 8
	case e.ChatsBetween > 0:
		return sc.CauseModelReissue // row 9
	case e.Gap < harnessThreshold:
		return sc.CauseHarnessRetry // row 10
	default:
		return sc.CauseModelReissue // row 11
	}
}

// String describes the evidence in a line.
func (e Evidence) String() string {
	var parts []string
	if e.SameSession {
		parts = append(parts, "same session "+short(e.Sessions[0]))
	} else {
		parts = append(parts, fmt.Sprintf("sessions differ (%s → %s)", short(e.Sessions[0]), short(e.Sessions[1])))
	}
	if e.SameRequest {
		parts = append(parts, "same request id "+e.RequestIDs[0])
	} else {
		parts = append(parts, fmt.Sprintf("request ids %s → %s", dash(e.RequestIDs[0]), dash(e.RequestIDs[1])))
	}
	parts = append(parts, fmt.Sprintf("+%d ms", e.Gap.Milliseconds()))
	switch e.ChatsBetween {
	case 0:
		parts = append(parts, "no chat span between")
	case 1:
		parts = append(parts, "a chat span between")
	default:
		parts = append(parts, fmt.Sprintf("%d chat spans between", e.ChatsBetween))
	}
	return strings.Join(parts, ", ")
}

// GroupKey returns the duplicate-group key the dup processor derives for a
// tool span, as far as the demo needs it: idemkit's key hash, else the tool
// and its recorded arguments (the demo's agent sends identical bytes on
// every retry, so no canonicalisation is needed here).
func GroupKey(s *Span) string {
	if k := s.Str(sc.KeyHash); k != "" {
		return "k:" + k
	}
	// A routing tier may have lifted the key onto the resource
	// (collector/examples/two-tier); the dup processor reads it there too.
	if k, _ := s.Resource[sc.KeyHash].(string); k != "" {
		return "k:" + k
	}
	if a := s.Str(sc.GenAIToolCallArguments); a != "" {
		return "a:" + s.Service + "\x00" + s.Str(sc.GenAIToolName) + "\x00" + a
	}
	return ""
}

// Pair is a duplicate M with the call P just before it in its group.
type Pair struct {
	P, M     *Span
	Evidence Evidence
}

// Duplicates finds, among the tool spans of one trace, every call that has
// an earlier call of the same group (outcome mismatch and bypassed are left
// out, as the dup processor leaves them out), with its evidence. chats are
// the trace's chat spans.
func Duplicates(tools, chats []*Span) []Pair {
	sorted := append([]*Span(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	last := map[string]*Span{}
	var out []Pair
	for _, m := range sorted {
		if o := m.Str(sc.Outcome); o == sc.OutcomeMismatch || o == sc.OutcomeBypassed {
			continue
		}
		key := GroupKey(m)
		if key == "" {
			continue
		}
		if p := last[key]; p != nil {
			out = append(out, Pair{P: p, M: m, Evidence: evidenceOf(p, m, chats)})
		}
		last[key] = m
	}
	return out
}

func evidenceOf(p, m *Span, chats []*Span) Evidence {
	e := Evidence{
		Sessions:   [2]string{p.Str(sc.MCPSessionID), m.Str(sc.MCPSessionID)},
		RequestIDs: [2]string{p.Str(sc.JSONRPCRequestID), m.Str(sc.JSONRPCRequestID)},
		Gap:        time.Duration(m.Start - p.Start),
	}
	e.SameSession = e.Sessions[0] != "" && e.Sessions[0] == e.Sessions[1]
	e.SameRequest = e.RequestIDs[0] != "" && e.RequestIDs[0] == e.RequestIDs[1]
	for _, c := range chats {
		if c.Start > p.Start && c.Start < m.Start {
			e.ChatsBetween++
		}
	}
	return e
}

func short(s string) string {
	s = strings.TrimPrefix(s, "mcp-session-")
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return dash(s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
