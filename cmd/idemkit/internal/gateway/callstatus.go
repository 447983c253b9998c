package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// The gateway's call status tool (mcpcall.CallStatus, the same one the SDK
// adapters serve with instrument.WithCallStatusTool): the gateway answers
// it itself, from its records; the upstream never sees it. It is listed at
// the end of the upstream's tools/list (its last page), and an upstream
// tool of the same name is hidden (and logged): the gateway's would answer
// its calls anyway.

// callStatus answers a call of the call status tool.
func (s *session) callStatus(op *mcpcall.Op, req *Message, p *requestParams, h http.Header) (*Message, error) {
	call := &mcpcall.ToolCall{Tool: p.Name, Arguments: p.Arguments, Meta: p.Meta, Info: mcpcall.CallStatusToolInfo}
	res, err := mcpcall.CallTool(op, call, mcpcall.RawCodec{}, func(ctx context.Context) (json.RawMessage, error) {
		return mcpcall.CallStatus(op, mcpcall.RawCodec{}, p.Arguments, func(tool string) (mcpcall.ToolInfo, bool) {
			// A tool no listing names is a write tool, as its calls are:
			// its record is looked up like theirs.
			return s.tools.lookup(op, tool, s.fetchFor(h, tool)).info, true
		}), nil
	})
	if err != nil {
		return nil, err
	}
	// An answer from the records goes only to a caller the upstream
	// accepts now, as a replay does.
	if verr := s.verifyCaller(op, h); verr != nil {
		return nil, verr
	}
	return newResponse(req.ID, res), nil
}

// fetchFor returns the function that lists the upstream's tools into the
// session's index, with the caller's headers, logging a failure (the tool
// is then handled as a write tool's).
func (s *session) fetchFor(h http.Header, tool string) func(context.Context) error {
	return func(ctx context.Context) error {
		err := s.fetchTools(ctx, h)
		if err != nil {
			s.g.log.Warn("listing the upstream's tools failed; the call is handled as a write tool's (MCP's default annotations)",
				"session", s.logID(), "tool", tool, "error", err)
		}
		return err
	}
}

// withCallStatusTool returns a tools/list result with the call status tool
// named name appended (on the last page only: the one without a
// nextCursor), and any upstream tool of that name left out.
func (s *session) withCallStatusTool(result json.RawMessage, name string) json.RawMessage {
	var members map[string]json.RawMessage
	if json.Unmarshal(result, &members) != nil || members == nil {
		return result
	}
	var tools []json.RawMessage
	if json.Unmarshal(members["tools"], &tools) != nil {
		return result
	}
	last := nextCursor(result) == nil
	out := tools[:0:0]
	hidden := false
	for _, raw := range tools {
		var t struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &t) == nil && t.Name == name {
			hidden = true
			continue
		}
		out = append(out, raw)
	}
	if hidden {
		s.g.log.Warn("the upstream lists a tool with the name of the gateway's call status tool; the gateway answers that name itself, so the upstream's is not listed "+
			"(name the gateway's another with --call-status-tool)", "session", s.logID(), "tool", name)
	}
	if last {
		out = append(out, mcpcall.CallStatusToolJSON(name))
	}
	if !hidden && !last {
		return result
	}
	b, err := json.Marshal(out)
	if err != nil {
		return result
	}
	members["tools"] = b
	res, err := json.Marshal(members)
	if err != nil {
		return result
	}
	return bytes.TrimSpace(res)
}

// progressNote returns a notifications/progress message's progress as a
// record note (mcpcall.EncodeRunNote), which the call status tool reports.
func progressNote(m *Message) string {
	var p struct {
		Progress float64 `json:"progress"`
		Total    float64 `json:"total"`
		Message  string  `json:"message"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return ""
	}
	return mcpcall.EncodeRunNote(mcpcall.RunNote{Progress: p.Progress, Total: p.Total, Message: p.Message})
}
