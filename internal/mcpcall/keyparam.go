package mcpcall

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"strings"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// KeyDescription is the sentence appended to the description of a tool
// whose calls are protected, when the key argument is advertised: what a
// retry gets, and how to send the key. It and KeyParameterDescription are
// kept short: every tools/list answer carries both once per protected tool,
// and encoding and decoding their bytes (the parameter's, inside the input
// schema, the most) was about half of what advertising the key added to a
// listing (BenchmarkListTools); a model reads them on every listing too.
const KeyDescription = "Retries are safe: a repeated identical call returns the first call's result without running again. " +
	"Send the same idempotency_key on every retry, a new one for a new action."

// KeyParameterDescription describes the key argument in an input schema;
// the schema itself declares the bounds (minLength, maxLength, pattern).
const KeyParameterDescription = "Optional: one key per intended action, for example a UUID."

// keyParameterPattern is the pattern of the key argument: printable ASCII
// (0x20-0x7E), as idemkit.ValidateExplicitKey requires.
const keyParameterPattern = "^[ -~]*$"

// KeyParameterSchema returns the JSON Schema of the key argument, a fresh
// map on every call. It declares the bounds the server enforces
// (idemkit.ValidateExplicitKey): 1 to idemkit.MaxExplicitKeyLen characters
// of printable ASCII (so characters are bytes), so that a client's own
// validator rejects what the server would.
func KeyParameterSchema() map[string]any {
	return map[string]any{
		"type":        "string",
		"minLength":   1,
		"maxLength":   idemkit.MaxExplicitKeyLen,
		"pattern":     keyParameterPattern,
		"description": KeyParameterDescription,
	}
}

// DescribeKey returns description with KeyDescription appended (once).
func DescribeKey(description string) string {
	switch {
	case description == "":
		return KeyDescription
	case strings.Contains(description, KeyDescription):
		return description
	}
	return strings.TrimRight(description, " \n") + "\n\n" + KeyDescription
}

// SchemaWithKey returns a copy of a decoded input schema with the key
// argument among its properties (and "type": "object" when it had no
// type). The schema's own maps are not modified.
func SchemaWithKey(schema map[string]any) map[string]any {
	out := maps.Clone(schema)
	if out == nil {
		out = make(map[string]any, 2)
	}
	props, _ := out["properties"].(map[string]any)
	props = maps.Clone(props)
	if props == nil {
		props = make(map[string]any, 1)
	}
	props[spancontract.KeyArgument] = KeyParameterSchema()
	out["properties"] = props
	if _, ok := out["type"]; !ok {
		out["type"] = "object"
	}
	return out
}

// RawSchemaWithKey is SchemaWithKey for a raw JSON schema. A schema that is
// not a JSON object is returned as it is, with false.
func RawSchemaWithKey(schema json.RawMessage) (json.RawMessage, bool) {
	var m map[string]any
	if len(bytes.TrimSpace(schema)) > 0 {
		if err := json.Unmarshal(schema, &m); err != nil || m == nil {
			return schema, false
		}
	}
	b, err := json.Marshal(SchemaWithKey(m))
	if err != nil {
		return schema, false
	}
	return b, true
}

// SchemaDeclaresKey reports whether a decoded input schema declares the key
// argument itself: whether one of its top-level properties is named
// spancontract.KeyArgument. A property of that name deeper in the schema
// (inside another property) is one of the tool's ordinary arguments. It is
// the one rule every front end applies (the mcp-go and go-sdk adapters and
// the gateway), on a decoded schema, on its properties
// (PropertiesDeclareKey) or on its raw JSON (RawSchemaDeclaresKey).
func SchemaDeclaresKey(schema map[string]any) bool {
	props, _ := schema["properties"].(map[string]any)
	return PropertiesDeclareKey(props)
}

// PropertiesDeclareKey is SchemaDeclaresKey for the top-level properties
// of a schema.
func PropertiesDeclareKey(props map[string]any) bool {
	_, ok := props[spancontract.KeyArgument]
	return ok
}

// RawSchemaDeclaresKey is SchemaDeclaresKey for a raw JSON schema. A schema
// that cannot hold the name (the common case) is not decoded; one that is
// not a JSON object declares nothing.
func RawSchemaDeclaresKey(schema json.RawMessage) bool {
	if !bytes.Contains(schema, []byte(spancontract.KeyArgument)) && !bytes.Contains(schema, []byte(`\u`)) {
		return false
	}
	var m map[string]any
	if json.Unmarshal(schema, &m) != nil {
		return false
	}
	return SchemaDeclaresKey(m)
}

// StripKeyArgument returns raw arguments without the key argument, and the
// key argument's raw value (nil when absent). The other members are kept
// byte for byte, in their order: the handler, the schema check and the key
// read the same document.
//
// Arguments that are not one JSON object are returned as they are, and so
// are arguments whose key argument is ambiguous: sent twice, or beside a
// member whose name equals it under case folding ("Idempotency_Key"),
// which a Go handler reads as the same field. NewKey then refuses them
// (the key field is stripped there too), so the ambiguity reaches the
// caller as invalid arguments instead of being settled here.
func StripKeyArgument(args json.RawMessage) (json.RawMessage, json.RawMessage) {
	// The name, unescaped, is in the bytes; escaped, it uses \u.
	if !bytes.Contains(args, []byte(spancontract.KeyArgument)) && !bytes.Contains(args, []byte(`\u`)) {
		return args, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return args, nil
	}
	type span struct{ start, end int }
	var (
		kept    []span
		key     json.RawMessage
		found   int
		prevEnd = int(dec.InputOffset())
	)
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return args, nil
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return args, nil
		}
		end := int(dec.InputOffset())
		switch {
		case name == spancontract.KeyArgument:
			found++
			key = value
		case strings.EqualFold(name, spancontract.KeyArgument):
			return args, nil // ambiguous: NewKey refuses it
		default:
			kept = append(kept, span{prevEnd, end})
		}
		prevEnd = end
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return args, nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return args, nil // trailing data: NewKey refuses it
	}
	if found != 1 {
		return args, nil // absent, or sent twice (NewKey refuses that)
	}
	out := make([]byte, 0, len(args))
	out = append(out, '{')
	for i, m := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		// Each member's text runs from the end of the one before: its
		// separator and spacing first.
		out = append(out, bytes.TrimLeft(args[m.start:m.end], " \t\r\n,")...)
	}
	return append(out, '}'), key
}
