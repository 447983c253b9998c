package mcpcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

func TestDecorateRawToolsList(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	in := New(g, DefaultConfig())
	list := json.RawMessage(`{"tools":[` +
		`{"name":"refund","description":"Refunds.","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false},"_meta":{"io.idemkit/status_tool":"refund_status"}},` +
		`{"name":"lookup","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},` +
		`{"name":"keyed","inputSchema":{"type":"object","properties":{"idempotency_key":{"type":"string"}}}}` +
		`],"nextCursor":"c-1.0"}`)
	out, tools, err := in.DecorateRawToolsList(list, Scope{Kind: ScopeSubject, Value: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 3 || tools[0].Info.StatusTool != "refund_status" || !tools[1].Info.ReadOnlyHint || !tools[2].Info.DeclaresKey {
		t.Errorf("tools %+v", tools)
	}
	var got struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
		NextCursor json.RawMessage `json:"nextCursor"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if !SchemaDeclaresKey(got.Tools[0].InputSchema) || !strings.HasPrefix(got.Tools[0].Description, "Refunds.\n\nRetries are safe") ||
		got.Tools[0].InputSchema["additionalProperties"] != false {
		t.Errorf("refund %+v", got.Tools[0])
	}
	if SchemaDeclaresKey(got.Tools[1].InputSchema) || got.Tools[1].Description != "" {
		t.Errorf("lookup was decorated: %+v", got.Tools[1])
	}
	if string(got.NextCursor) != `"c-1.0"` || !strings.Contains(string(out), `{"name":"lookup","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`) {
		t.Errorf("members not kept byte for byte: %s", out)
	}
	// A caller whose calls would be refused is not told retries are safe.
	out, _, err = in.DecorateRawToolsList(list, Scope{})
	if err != nil || string(out) != string(list) {
		t.Errorf("unscoped listing changed: %s %v", out, err)
	}
	if _, _, err := in.DecorateRawToolsList(json.RawMessage(`[1]`), Scope{}); err == nil {
		t.Error("a listing that is not an object")
	}
}

// TestSchemaDeclaresKey_TopLevelPropertiesOnly: only a top-level property
// named idempotency_key declares the key, on every form of the schema the
// front ends hold; a nested property of that name is an ordinary argument.
func TestSchemaDeclaresKey_TopLevelPropertiesOnly(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"type":"object","properties":{"idempotency_key":{"type":"string"}}}`:                                          true,
		`{"type":"object","properties":{"idempotency\u005fkey":{"type":"string"}}}`:                                     true,
		`{"type":"object","properties":{"order":{"type":"object","properties":{"idempotency_key":{"type":"string"}}}}}`: false,
		`{"type":"object","properties":{"a":{"description":"not the idempotency_key"}}}`:                                false,
		`{"type":"object","$defs":{"idempotency_key":{"type":"string"}}}`:                                               false,
		`{"type":"object"}`: false,
		`[1]`:               false,
		``:                  false,
	} {
		if got := RawSchemaDeclaresKey(json.RawMessage(raw)); got != want {
			t.Errorf("RawSchemaDeclaresKey(%s) = %v, want %v", raw, got, want)
		}
		var m map[string]any
		_ = json.Unmarshal([]byte(raw), &m)
		if got := SchemaDeclaresKey(m); got != want {
			t.Errorf("SchemaDeclaresKey(%s) = %v, want %v", raw, got, want)
		}
		props, _ := m["properties"].(map[string]any)
		if got := PropertiesDeclareKey(props); got != want {
			t.Errorf("PropertiesDeclareKey(properties of %s) = %v, want %v", raw, got, want)
		}
	}
}
