package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// toolEntry is what the gateway knows of one upstream tool, from the
// upstream's tools/list.
type toolEntry struct {
	info   mcpcall.ToolInfo
	schema json.RawMessage // inputSchema as listed

	once sync.Once
	v    *mcpcall.SchemaValidator // nil: no schema, or one that does not compile
}

// validator returns the tool's compiled input schema, compiled on first
// use, or nil.
func (t *toolEntry) validator() *mcpcall.SchemaValidator {
	if t == nil || len(t.schema) == 0 {
		return nil
	}
	t.once.Do(func() { t.v, _ = mcpcall.NewSchemaValidator(t.schema) })
	return t.v
}

// unlisted is a tool no listing names: MCP's default annotations make it a
// write tool; its arguments are not validated here.
var unlisted = &toolEntry{}

// toolIndex holds a session's upstream tools, learned from tools/list.
type toolIndex struct {
	fetch sync.Mutex // serialises the gateway's own tools/list fetches

	mu       sync.Mutex // protects the fields below
	tools    map[string]*toolEntry
	complete bool
	building map[string]*toolEntry // pages of a listing in progress
}

// observe records one page of a tools/list answer, listed from cursor (nil
// for the first page), whose next page is at next (nil: the last page).
func (x *toolIndex) observe(cursor json.RawMessage, tools []mcpcall.RawTool, next json.RawMessage) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if cursor == nil || x.building == nil {
		x.building = map[string]*toolEntry{}
	}
	for _, t := range tools {
		x.building[t.Name] = &toolEntry{info: t.Info, schema: t.InputSchema}
	}
	if next == nil {
		x.tools, x.building, x.complete = x.building, nil, true
		return
	}
	// Tools seen so far count even before the last page.
	if x.tools == nil {
		x.tools = map[string]*toolEntry{}
	}
	for k, v := range x.building {
		x.tools[k] = v
	}
}

// invalidate forgets the listing (the upstream said its tools changed).
func (x *toolIndex) invalidate() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tools, x.complete, x.building = nil, false, nil
}

func (x *toolIndex) get(name string) (*toolEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.tools[name]; ok {
		return t, true
	}
	return nil, x.complete
}

// lookup returns what is known of a tool, listing the upstream's tools with
// fetch when the index has no complete listing that names it. A tool that
// stays unknown (or a listing that fails) is unlisted: a write tool.
func (x *toolIndex) lookup(ctx context.Context, name string, fetch func(context.Context) error) *toolEntry {
	if t, known := x.get(name); known {
		return orUnlisted(t)
	}
	x.fetch.Lock()
	defer x.fetch.Unlock()
	if t, known := x.get(name); known {
		return orUnlisted(t)
	}
	_ = fetch(ctx)
	t, _ := x.get(name)
	return orUnlisted(t)
}

func orUnlisted(t *toolEntry) *toolEntry {
	if t == nil {
		return unlisted
	}
	return t
}

// parseTools reads the tools of a tools/list answer.
func parseTools(result json.RawMessage) ([]mcpcall.RawTool, error) {
	var r struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, fmt.Errorf("the upstream's tools/list answer: %w", err)
	}
	out := make([]mcpcall.RawTool, 0, len(r.Tools))
	for _, raw := range r.Tools {
		t, err := mcpcall.ParseRawTool(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// nextCursor returns the nextCursor of a tools/list answer, or nil on the
// last page.
func nextCursor(result json.RawMessage) json.RawMessage {
	var r struct {
		NextCursor json.RawMessage `json:"nextCursor"`
	}
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	if n := r.NextCursor; len(n) == 0 || string(n) == "null" || string(n) == `""` {
		return nil
	}
	return r.NextCursor
}

// listCursor returns params.cursor of a tools/list request, or nil.
func listCursor(params json.RawMessage) json.RawMessage {
	var p struct {
		Cursor json.RawMessage `json:"cursor"`
	}
	if json.Unmarshal(params, &p) != nil || string(p.Cursor) == "null" {
		return nil
	}
	return p.Cursor
}
