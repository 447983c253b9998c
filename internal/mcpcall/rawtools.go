package mcpcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Raw JSON forms of tools/list, for a front end that relays another
// server's answers (the idemkit gateway): it learns each tool's annotations
// and schema from the upstream's listing, and hands its clients the listing
// with the key advertised where their calls are protected.

// RawTool is what a raw tools/list answer says about one tool.
type RawTool struct {
	Name string
	Info ToolInfo
	// InputSchema is the tool's inputSchema, as listed.
	InputSchema json.RawMessage
}

// rawToolFields are the members of a listed tool that matter here.
type rawToolFields struct {
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Description *string         `json:"description"`
	Annotations *struct {
		ReadOnlyHint   bool `json:"readOnlyHint"`
		IdempotentHint bool `json:"idempotentHint"`
	} `json:"annotations"`
	Meta map[string]json.RawMessage `json:"_meta"`
}

func (f *rawToolFields) info() ToolInfo {
	var info ToolInfo
	if f.Annotations != nil {
		info.ReadOnlyHint, info.IdempotentHint = f.Annotations.ReadOnlyHint, f.Annotations.IdempotentHint
	}
	info.DeclaresKey = RawSchemaDeclaresKey(f.InputSchema)
	if raw, ok := f.Meta[spancontract.StatusToolMetaKey]; ok {
		_ = json.Unmarshal(raw, &info.StatusTool)
	}
	return info
}

// ParseRawTool reads one tool object of a tools/list answer.
func ParseRawTool(tool json.RawMessage) (RawTool, error) {
	var f rawToolFields
	if err := json.Unmarshal(tool, &f); err != nil {
		return RawTool{}, fmt.Errorf("mcpcall: a listed tool: %w", err)
	}
	if f.Name == "" {
		return RawTool{}, fmt.Errorf("mcpcall: a listed tool has no name")
	}
	return RawTool{Name: f.Name, Info: f.info(), InputSchema: f.InputSchema}, nil
}

// DecorateRawToolsList reads a tools/list result (raw JSON: {"tools": [...],
// …}) and returns it with the optional idempotency_key argument and the
// KeyDescription sentence added to the tools whose calls a caller in scope
// sc gets protected, with the tools it read. Every other member, and every
// member of an undecorated tool, is kept byte for byte.
func (in *Instrumenter) DecorateRawToolsList(result json.RawMessage, sc Scope) (json.RawMessage, []RawTool, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(result, &members); err != nil || members == nil {
		return result, nil, fmt.Errorf("mcpcall: a tools/list result must be a JSON object")
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(members["tools"], &tools); err != nil {
		return result, nil, fmt.Errorf("mcpcall: tools/list \"tools\": %w", err)
	}
	out := make([]RawTool, 0, len(tools))
	changed := false
	for i, raw := range tools {
		t, err := ParseRawTool(raw)
		if err != nil {
			return result, nil, err
		}
		out = append(out, t)
		if !in.AdvertisesKey(t.Name, t.Info, sc) {
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return result, nil, err
		}
		schema, ok := RawSchemaWithKey(fields["inputSchema"])
		if !ok {
			continue // a schema that is not an object: not decorated
		}
		fields["inputSchema"] = schema
		var desc string
		if d, ok := fields["description"]; ok {
			_ = json.Unmarshal(d, &desc)
		}
		if fields["description"], err = json.Marshal(DescribeKey(desc)); err != nil {
			return result, nil, err
		}
		if tools[i], err = json.Marshal(fields); err != nil {
			return result, nil, err
		}
		changed = true
	}
	if !changed {
		return result, out, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return result, nil, err
	}
	members["tools"] = b
	res, err := json.Marshal(members)
	if err != nil {
		return result, nil, err
	}
	return bytes.TrimSpace(res), out, nil
}
