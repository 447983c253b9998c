package mcpgo

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/instrument"
)

func TestListTools_AdvertisesTheKeyOnProtectedToolsOnly(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ok := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	}
	h.srv.AddTool(mcp.NewTool("refund", mcp.WithDescription("Refund an order."), mcp.WithString("order_id", mcp.Required())), ok)
	h.srv.AddTool(mcp.NewTool("lookup", mcp.WithDescription("Look up."), mcp.WithReadOnlyHintAnnotation(true)), ok)
	h.srv.AddTool(mcp.NewTool("upsert", mcp.WithIdempotentHintAnnotation(true)), ok)
	h.srv.AddTool(mcp.NewTool("own_key", mcp.WithDescription("Own."), mcp.WithString("idempotency_key")), ok)
	h.srv.AddTool(mcp.NewToolWithRawSchema("raw", "Raw schema.", json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"}}}`)), ok)

	res, err := h.client().ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	wantKey := map[string]any{
		"type":        "string",
		"minLength":   float64(1),
		"maxLength":   float64(255),
		"description": instrument.KeyParameterDescription,
	}
	for name, advertised := range map[string]bool{"refund": true, "raw": true, "lookup": false, "upsert": false, "own_key": false} {
		tool := byName[name]
		var schema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		b, _ := json.Marshal(tool)
		var wire struct {
			InputSchema json.RawMessage `json:"inputSchema"`
		}
		_ = json.Unmarshal(b, &wire)
		if err := json.Unmarshal(wire.InputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		prop, has := schema.Properties[instrument.KeyArgument]
		hasSentence := strings.Contains(tool.Description, instrument.KeyDescription)
		switch {
		case advertised && (!reflect.DeepEqual(prop, wantKey) || !hasSentence):
			t.Errorf("%s: key property %v, description %q", name, prop, tool.Description)
		case !advertised && name != "own_key" && (has || hasSentence):
			t.Errorf("%s is not protected but advertises the key", name)
		case name == "own_key" && (hasSentence || reflect.DeepEqual(prop, wantKey)):
			t.Errorf("own_key's own property was replaced")
		}
		for _, r := range schema.Required {
			if r == instrument.KeyArgument {
				t.Errorf("%s: the key is required", name)
			}
		}
	}
	if !strings.HasPrefix(byName["refund"].Description, "Refund an order.\n\n") {
		t.Errorf("description %q", byName["refund"].Description)
	}
	// The registered tools are untouched.
	if _, ok := h.srv.GetTool("refund").Tool.InputSchema.Properties[instrument.KeyArgument]; ok {
		t.Error("the registered tool's schema was modified")
	}
	if strings.Contains(h.srv.GetTool("refund").Tool.Description, "idempotency_key") {
		t.Error("the registered tool's description was modified")
	}
}

func TestListTools_WithoutKeyParameter(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{instrument.WithoutKeyParameter()}})
	h.srv.AddTool(mcp.NewTool("refund"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	res, err := h.client().ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Tools[0].InputSchema.Properties[instrument.KeyArgument]; ok {
		t.Error("key advertised despite WithoutKeyParameter")
	}
}

func TestKeyParameter_PassesStrictInputValidation(t *testing.T) {
	h := newHarness(t, harnessConfig{srvOpts: []server.ServerOption{server.WithInputSchemaValidation(), server.WithStrictInputSchemaDefault()}})
	var got map[string]any
	h.srv.AddTool(KeyParameter(mcp.NewTool("refund", mcp.WithString("order_id", mcp.Required()))),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			got = req.GetArguments()
			return mcp.NewToolResultText("ok"), nil
		})
	h.srv.AddTool(mcp.NewTool("plain", mcp.WithString("order_id", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	c := h.client()
	r, err := c.CallTool(context.Background(), callReq("refund", map[string]any{"order_id": "o", "idempotency_key": "k-1"}))
	if err != nil || r.IsError {
		t.Fatalf("%v %q", err, resultText(r))
	}
	// The schema declares the key, so the handler receives it.
	if got[instrument.KeyArgument] != "k-1" {
		t.Errorf("handler args %v", got)
	}
	// Control: without KeyParameter strict validation rejects the key.
	r, err = c.CallTool(context.Background(), callReq("plain", map[string]any{"order_id": "o", "idempotency_key": "k-1"}))
	if err != nil || !r.IsError {
		t.Errorf("strict validation accepted an undeclared key: %v %#v", err, r)
	}
}
