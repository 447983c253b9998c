package mcpcall

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// TestSpanContract_BorrowedKeysMatchSemconv catches drift between the span
// contract (and the names this package writes) and the OpenTelemetry
// semantic conventions v1.41.0 they borrow from.
func TestSpanContract_BorrowedKeysMatchSemconv(t *testing.T) {
	for _, tc := range []struct {
		ours string
		kv   attribute.Key
	}{
		{sc.GenAIOperationName, semconv.GenAIOperationNameKey},
		{sc.GenAIToolName, semconv.GenAIToolNameKey},
		{sc.GenAIToolCallID, semconv.GenAIToolCallIDKey},
		{sc.GenAIToolCallArguments, semconv.GenAIToolCallArgumentsKey},
		{sc.GenAIToolCallResult, semconv.GenAIToolCallResultKey},
		{sc.GenAIConversationID, semconv.GenAIConversationIDKey},
		{sc.GenAIPromptName, semconv.GenAIPromptNameKey},
		{sc.MCPMethodName, semconv.McpMethodNameKey},
		{sc.MCPSessionID, semconv.McpSessionIDKey},
		{sc.MCPProtocolVersion, semconv.McpProtocolVersionKey},
		{sc.MCPResourceURI, semconv.McpResourceURIKey},
		{sc.JSONRPCRequestID, semconv.JSONRPCRequestIDKey},
		{sc.ErrorType, semconv.ErrorTypeKey},
		{sc.RPCResponseStatusCode, semconv.RPCResponseStatusCodeKey},
		{sc.NetworkTransport, semconv.NetworkTransportKey},
		{sc.NetworkProtocolName, semconv.NetworkProtocolNameKey},
		{sc.NetworkProtocolVersion, semconv.NetworkProtocolVersionKey},
		{sc.ClientAddress, semconv.ClientAddressKey},
		{sc.ClientPort, semconv.ClientPortKey},
	} {
		if tc.ours != string(tc.kv) {
			t.Errorf("spancontract has %q, semconv v1.41.0 has %q", tc.ours, tc.kv)
		}
	}
	for _, tc := range []struct {
		ours string
		kv   attribute.KeyValue
	}{
		{sc.OperationExecuteTool, semconv.GenAIOperationNameExecuteTool},
		{sc.OperationChat, semconv.GenAIOperationNameChat},
		{sc.MethodToolsCall, semconv.McpMethodNameToolsCall},
		{sc.MethodInitialize, semconv.McpMethodNameInitialize},
		{sc.MethodPing, semconv.McpMethodNamePing},
		{sc.MethodToolsList, semconv.McpMethodNameToolsList},
		{sc.MethodPromptsList, semconv.McpMethodNamePromptsList},
		{sc.MethodPromptsGet, semconv.McpMethodNamePromptsGet},
		{sc.MethodResourcesList, semconv.McpMethodNameResourcesList},
		{sc.MethodResourcesTemplatesList, semconv.McpMethodNameResourcesTemplatesList},
		{sc.MethodResourcesRead, semconv.McpMethodNameResourcesRead},
		{sc.MethodResourcesSubscribe, semconv.McpMethodNameResourcesSubscribe},
		{sc.MethodResourcesUnsubscribe, semconv.McpMethodNameResourcesUnsubscribe},
		{sc.MethodLoggingSetLevel, semconv.McpMethodNameLoggingSetLevel},
		{sc.MethodCompletionComplete, semconv.McpMethodNameCompletionComplete},
		{sc.TransportTCP, semconv.NetworkTransportTCP},
		{sc.TransportPipe, semconv.NetworkTransportPipe},
		{sc.ErrorTypeOther, semconv.ErrorTypeOther},
	} {
		if tc.ours != tc.kv.Value.AsString() {
			t.Errorf("spancontract has %q, semconv v1.41.0 has %q for %s", tc.ours, tc.kv.Value.AsString(), tc.kv.Key)
		}
	}
	if name := (mcpconv.ServerOperationDuration{}).Name(); name != sc.MetricOperationDuration {
		t.Errorf("spancontract has %q, semconv v1.41.0 has %q", sc.MetricOperationDuration, name)
	}
	if name := (mcpconv.ServerSessionDuration{}).Name(); name != sc.MetricSessionDuration {
		t.Errorf("spancontract has %q, semconv v1.41.0 has %q", sc.MetricSessionDuration, name)
	}
}
