package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// requestParams are the members of a request's params the gateway reads.
type requestParams struct {
	Name           string
	URI            string
	Arguments      json.RawMessage
	Meta           map[string]any
	Cursor         json.RawMessage
	RequestState   json.RawMessage
	InputResponses json.RawMessage
	// Task is a tools/call's task member (a task-augmented call), TaskID
	// the taskId of the task methods.
	Task   json.RawMessage
	TaskID string
}

// envelopeMembers are the members of a tools/call's params that decide
// what runs and what the key is derived from.
var envelopeMembers = [...]string{"name", "arguments", "_meta"}

// envelopeError is params that a Go server and a server in another
// language would read differently: a member of envelopeMembers spelled in
// another case, or given twice.
type envelopeError struct {
	member string // the exact name: name, arguments or _meta
	got    string // the member that was given besides or instead of it
}

func (e *envelopeError) Error() string {
	if e.got == e.member {
		return fmt.Sprintf("params has the member %q more than once", e.member)
	}
	return fmt.Sprintf("params has a member %q, which differs from %q only in case", e.got, e.member)
}

// decodeParams reads the members of a request's params the gateway uses by
// their exact names, as a server written in JavaScript or Python does.
// (encoding/json decoding into a struct would also take "Arguments" or
// "NAME", the last one winning, and the gateway would then hash other
// arguments than the upstream runs.) With envelope set (for tools/call),
// params in which a member equal to name, arguments or _meta under Unicode
// case folding appears other than once and exactly so spelled are an
// *envelopeError: a Go upstream would read the variant, another one the
// exact name. The members are still read, for the span. raw must be valid
// JSON (it was decoded as part of the message).
func decodeParams(raw json.RawMessage, envelope bool) (requestParams, error) {
	var p requestParams
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return p, nil
	}
	if t[0] != '{' {
		return p, errors.New("params is not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if _, err := dec.Token(); err != nil { // the '{'
		return p, err
	}
	var (
		bad   error
		seen  [len(envelopeMembers)]bool
		first error
	)
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return p, err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return p, err
		}
		if envelope && bad == nil {
			for i, m := range envelopeMembers {
				if !strings.EqualFold(name, m) {
					continue
				}
				if name != m || seen[i] {
					bad = &envelopeError{member: m, got: name}
				}
				seen[i] = true
			}
		}
		switch name {
		case "name":
			keep(unmarshalMember(v, &p.Name, name))
		case "uri":
			keep(unmarshalMember(v, &p.URI, name))
		case "arguments":
			p.Arguments = v
		case "_meta":
			keep(unmarshalMember(v, &p.Meta, name))
		case "cursor":
			p.Cursor = v
		case "requestState":
			p.RequestState = v
		case "inputResponses":
			p.InputResponses = v
		case "task":
			p.Task = v
		case "taskId":
			keep(unmarshalMember(v, &p.TaskID, name))
		}
	}
	if bad != nil {
		return p, bad
	}
	return p, first
}

func unmarshalMember(v json.RawMessage, into any, name string) error {
	if err := json.Unmarshal(v, into); err != nil {
		return fmt.Errorf("params.%s: %w", name, err)
	}
	return nil
}
