package mcpcall

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Codec converts a front end's tool result to and from the bytes the Guard
// stores. Its methods must accept the zero R.
type Codec[R any] interface {
	// Marshal returns the wire JSON of a result.
	Marshal(R) ([]byte, error)
	// Unmarshal decodes what Marshal returned.
	Unmarshal([]byte) (R, error)
	// IsError reports the result's isError flag.
	IsError(R) bool
	// NeedsInput reports a result that asks the client for more input before
	// the call can complete (MCP multi round-trip); it is not stored.
	NeedsInput(R) bool
	// ErrorResult returns an isError result whose only content is text.
	ErrorResult(text string) R
	// WithMeta returns the result with _meta[key] set to value. It must not
	// modify a result it did not create.
	WithMeta(r R, key string, value any) R
}

// RawCodec is the Codec of a front end that handles tool results as raw
// JSON (a CallToolResult object), such as a gateway relaying another
// server's answers. It never decodes more than the members it needs.
type RawCodec struct{}

var _ Codec[json.RawMessage] = RawCodec{}

var errNoRawResult = errors.New("mcpcall: the result is empty, not a CallToolResult object")

// Marshal implements Codec: a result is its own wire JSON.
func (RawCodec) Marshal(r json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(r)) == 0 {
		return nil, errNoRawResult
	}
	return r, nil
}

// Unmarshal implements Codec. It checks that b is a JSON object.
func (RawCodec) Unmarshal(b []byte) (json.RawMessage, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, err
	}
	if probe == nil {
		return nil, errNoRawResult
	}
	return json.RawMessage(b), nil
}

// rawFlags are the members of a result RawCodec reads.
type rawFlags struct {
	IsError      bool            `json:"isError"`
	ResultType   string          `json:"resultType"`
	InputRequest json.RawMessage `json:"inputRequests"`
}

func rawFlagsOf(r json.RawMessage) rawFlags {
	var f rawFlags
	_ = json.Unmarshal(r, &f)
	return f
}

var escape = []byte(`\u`)

// mentions reports whether a result may have a member named name: false
// only when the name appears nowhere and nothing is \u-escaped (a member
// name could hide behind an escape), so that most results are never
// decoded.
func mentions(r json.RawMessage, name string) bool {
	return bytes.Contains(r, []byte(name)) || bytes.Contains(r, escape)
}

// IsError implements Codec.
func (RawCodec) IsError(r json.RawMessage) bool {
	return len(r) > 0 && mentions(r, "isError") && rawFlagsOf(r).IsError
}

// NeedsInput implements Codec: a result of resultType "input_required" or
// with inputRequests.
func (RawCodec) NeedsInput(r json.RawMessage) bool {
	if len(r) == 0 || (!mentions(r, "resultType") && !mentions(r, "inputRequests")) {
		return false
	}
	f := rawFlagsOf(r)
	return f.ResultType == "input_required" || (len(f.InputRequest) > 0 && string(f.InputRequest) != "null")
}

// ErrorResult implements Codec.
func (RawCodec) ErrorResult(text string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Content [1]TextContent `json:"content"`
		IsError bool           `json:"isError"`
	}{[1]TextContent{{Type: "text", Text: text}}, true})
	return b
}

// WithMeta implements Codec: it decodes the result's members, sets
// _meta[key] and encodes them again (member order follows encoding/json's
// sorted map keys; every member's value is kept byte for byte).
func (RawCodec) WithMeta(r json.RawMessage, key string, value any) json.RawMessage {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(r, &members); err != nil || members == nil {
		members = make(map[string]json.RawMessage, 1)
	}
	var meta map[string]json.RawMessage
	if raw, ok := members["_meta"]; ok {
		_ = json.Unmarshal(raw, &meta)
	}
	if meta == nil {
		meta = make(map[string]json.RawMessage, 1)
	}
	v, err := json.Marshal(value)
	if err != nil {
		return r
	}
	meta[key] = v
	mb, err := json.Marshal(meta)
	if err != nil {
		return r
	}
	members["_meta"] = mb
	out, err := json.Marshal(members)
	if err != nil {
		return r
	}
	return out
}

// TextContent is an MCP text content item.
type TextContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// TextResult builds, through codec, the result whose content is text and
// whose structuredContent is structured (nil: none): every SDK reads the
// same wire JSON.
func TextResult[R any](codec Codec[R], text string, structured any, isError bool) R {
	b, err := json.Marshal(struct {
		Content           [1]TextContent `json:"content"`
		StructuredContent any            `json:"structuredContent,omitempty"`
		IsError           bool           `json:"isError,omitempty"`
	}{[1]TextContent{{Type: "text", Text: text}}, structured, isError})
	if err == nil {
		if res, err := codec.Unmarshal(b); err == nil {
			return res
		}
	}
	return codec.ErrorResult(text) // unreachable with a working codec
}
