package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// JSON-RPC error codes the gateway answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInvalidParams  = -32602
	codeInternalError  = -32603
	// codeUpstream is a server-defined code (the -32000 range): the upstream
	// MCP server could not be reached or went away.
	codeUpstream = -32001
)

// Message is one JSON-RPC 2.0 message: a request (Method and ID), a
// notification (Method, no ID) or a response (ID and Result or Error).
// Fields not needed to route a message are kept raw.
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`

	raw []byte // the message as received, until a field changes
}

// RPCError is a JSON-RPC error object. It is also the Go error a Forward
// returns when the upstream answered a request with an error.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// IsRequest reports a request: a method and an ID.
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports a notification: a method and no ID.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports a response: an ID and no method.
func (m *Message) IsResponse() bool { return m.Method == "" && m.ID != nil }

// errNotJSONRPC is returned by parseMessage for JSON that is no JSON-RPC
// message.
var errNotJSONRPC = errors.New("not a JSON-RPC 2.0 message")

// parseMessage decodes one JSON-RPC message, keeping b as its raw form.
func parseMessage(b []byte) (*Message, error) {
	b = bytes.TrimSpace(b)
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m.JSONRPC != "2.0" {
		return nil, fmt.Errorf("%w: jsonrpc is %q, want \"2.0\"", errNotJSONRPC, m.JSONRPC)
	}
	if m.Method == "" && m.ID == nil {
		return nil, fmt.Errorf("%w: it has neither a method nor an id", errNotJSONRPC)
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return nil, fmt.Errorf("%w: a response needs a result or an error", errNotJSONRPC)
	}
	m.raw = b
	return &m, nil
}

// Bytes returns the message's wire form: the raw bytes it was read from
// while no field changed, a fresh encoding otherwise.
func (m *Message) Bytes() []byte {
	if m.raw != nil {
		return m.raw
	}
	b, err := json.Marshal(m)
	if err != nil { // every field is raw JSON or a string: cannot happen
		panic(err)
	}
	m.raw = b
	return b
}

// withID returns a copy of m with its ID replaced.
func (m *Message) withID(id json.RawMessage) *Message {
	c := *m
	c.ID = id
	c.raw = nil
	return &c
}

// withParams returns a copy of m with its params replaced.
func (m *Message) withParams(p json.RawMessage) *Message {
	c := *m
	c.Params = p
	c.raw = nil
	return &c
}

// withResult returns a copy of the response m with its result replaced.
func (m *Message) withResult(r json.RawMessage) *Message {
	c := *m
	c.Result = r
	c.raw = nil
	return &c
}

func newResponse(id json.RawMessage, result json.RawMessage) *Message {
	return &Message{JSONRPC: "2.0", ID: id, Result: result}
}

func newErrorResponse(id json.RawMessage, code int, msg string) *Message {
	if id == nil {
		id = json.RawMessage("null")
	}
	return &Message{JSONRPC: "2.0", ID: id, Error: &RPCError{Code: code, Message: msg}}
}

// idKey returns a map key for a JSON-RPC ID that tells 1 and "1" apart.
func idKey(id json.RawMessage) string { return string(bytes.TrimSpace(id)) }

// progressToken returns params._meta.progressToken of a request, in its
// raw JSON form, or nil.
func progressToken(params json.RawMessage) json.RawMessage {
	if len(params) == 0 {
		return nil
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || string(p.Meta.ProgressToken) == "null" {
		return nil
	}
	return p.Meta.ProgressToken
}

// progressOf returns the progressToken of a notifications/progress message,
// or nil for any other message.
func progressOf(m *Message) json.RawMessage {
	if m.Method != "notifications/progress" || len(m.Params) == 0 {
		return nil
	}
	var p struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return nil
	}
	return p.ProgressToken
}

// cancelledRequest returns params.requestId of a notifications/cancelled
// message, or nil for any other message.
func cancelledRequest(m *Message) json.RawMessage {
	if m.Method != "notifications/cancelled" || len(m.Params) == 0 {
		return nil
	}
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return nil
	}
	return p.RequestID
}

// setMember returns the JSON object obj with member name set to value (or
// removed when value is nil), other members kept as they were. obj may be
// empty (an empty object).
func setMember(obj json.RawMessage, name string, value json.RawMessage) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(obj)) > 0 && string(bytes.TrimSpace(obj)) != "null" {
		if err := json.Unmarshal(obj, &m); err != nil {
			return nil, err
		}
	}
	if value == nil {
		delete(m, name)
	} else {
		m[name] = value
	}
	return json.Marshal(m)
}
