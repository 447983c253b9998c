package mcpcall

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// KeyDescription is the sentence appended to the description of a tool
// whose calls are protected, when the key argument is advertised.
const KeyDescription = "Retries are safe: a repeated identical call returns the first call's result instead of running again. " +
	"Send the same idempotency_key (for example a UUID chosen once per intended action) on every retry, and a new one for a new action."

// KeyParameterDescription describes the key argument in an input schema.
const KeyParameterDescription = "Optional. A stable key of up to 255 printable ASCII characters (for example a UUID) for this intended action: " +
	"the same on every retry, a new one for a new action."

// KeyParameterSchema returns the JSON Schema of the key argument, a fresh
// map on every call. (An empty key is rejected by the key's own rules.)
func KeyParameterSchema() map[string]any {
	return map[string]any{
		"type":        "string",
		"maxLength":   idemkit.MaxExplicitKeyLen,
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
// key argument's raw value (nil when absent). Arguments that are not a JSON
// object are returned as they are.
func StripKeyArgument(args json.RawMessage) (json.RawMessage, json.RawMessage) {
	if !bytes.Contains(args, []byte(spancontract.KeyArgument)) {
		return args, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(args, &fields) != nil {
		return args, nil
	}
	v, ok := fields[spancontract.KeyArgument]
	if !ok {
		return args, nil
	}
	delete(fields, spancontract.KeyArgument)
	b, err := json.Marshal(fields)
	if err != nil {
		return args, nil
	}
	return b, v
}
