package gosdk

import (
	"encoding/json"
	"errors"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// codec is the mcpcall.Codec of go-sdk results, in the SDK's own JSON form.
type codec struct{}

var errNoResult = errors.New("gosdk: the tool handler returned neither a result nor an error")

func (codec) Marshal(r *mcp.CallToolResult) ([]byte, error) {
	if r == nil {
		return nil, errNoResult
	}
	return json.Marshal(r)
}

func (codec) Unmarshal(b []byte) (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Content == nil {
		r.Content = []mcp.Content{} // the SDK never sends "content": null
	}
	return &r, nil
}

func (codec) IsError(r *mcp.CallToolResult) bool    { return r != nil && r.IsError }
func (codec) NeedsInput(r *mcp.CallToolResult) bool { return r != nil && r.NeedsInput() }

func (codec) ErrorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

func (codec) WithMeta(r *mcp.CallToolResult, key string, value any) *mcp.CallToolResult {
	var c mcp.CallToolResult
	if r != nil {
		c = *r
	}
	meta := maps.Clone(c.Meta)
	if meta == nil {
		meta = make(mcp.Meta, 1)
	}
	meta[key] = value
	c.Meta = meta
	return &c
}
