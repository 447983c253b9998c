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
