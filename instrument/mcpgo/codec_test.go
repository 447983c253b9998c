package mcpgo

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestCodec_WritesWhatMCPGoWrites checks that the stored form decodes to
// exactly what mcp-go's own marshalling decodes to.
func TestCodec_WritesWhatMCPGoWrites(t *testing.T) {
	results := []*mcp.CallToolResult{
		mcp.NewToolResultText("hi"),
		mcp.NewToolResultError("bad"),
		{},
		{
			Result: mcp.Result{Meta: &mcp.Meta{ProgressToken: "p", AdditionalFields: map[string]any{"a.b/c": map[string]any{"x": 1.5}}}},
			Content: []mcp.Content{
				mcp.NewTextContent("one"),
				mcp.NewImageContent("aGk=", "image/png"),
				mcp.NewAudioContent("aGk=", "audio/wav"),
				mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "file:///a", MIMEType: "text/plain", Text: "body"}),
				mcp.NewResourceLink("file:///b", "b", "a link", "text/plain"),
			},
			StructuredContent: map[string]any{"n": 12345678901234.0, "s": "é\u2028<>&", "l": []any{true, nil}},
			IsError:           true,
		},
		{
			Content:              []mcp.Content{mcp.NewTextContent("raw")},
			RawStructuredContent: json.RawMessage(`{"big":12345678901234567890}`),
			StructuredContent:    map[string]any{"big": 1.2345678901234567e19},
		},
		{
			Result:               mcp.Result{ResultType: mcp.ResultTypeInputRequired},
			MultiRoundTripResult: mcp.MultiRoundTripResult{RequestState: "st"},
		},
	}
	for i, r := range results {
		ours, err := codec{}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		a, err := codec{}.Unmarshal(ours)
		if err != nil {
			t.Fatal(err)
		}
		b, err := codec{}.Unmarshal(theirs)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("result %d:\n ours   %s\n mcp-go %s", i, ours, theirs)
		}
		var ga, gb any
		_ = json.Unmarshal(ours, &ga)
		_ = json.Unmarshal(theirs, &gb)
		if !reflect.DeepEqual(ga, gb) {
			t.Errorf("result %d JSON differs:\n ours   %s\n mcp-go %s", i, ours, theirs)
		}
	}
	if _, err := (codec{}).Marshal(nil); err == nil {
		t.Error("nil result marshalled")
	}
}
