// Package spancontract is the single source of truth for the span contract
// shared by idemkit's instrumentation (which writes tool-call spans) and the
// Collector's dup processor (which reads them and annotates duplicates).
//
// It holds attribute keys, their enumerated values and the span naming rule,
// as plain strings, so that both sides import the same names without pulling
// in each other's dependencies: this package depends on the standard library
// only, and it is its own Go module so the Collector distribution does not
// inherit the idemkit module's database drivers.
//
// Keys borrowed from the OpenTelemetry semantic conventions carry exactly the
// values of go.opentelemetry.io/otel/semconv/v1.41.0 (a test in the
// instrumentation, internal/mcpcall, asserts it). The idemkit.* keys are
// this project's own.
package spancontract

// OpenTelemetry GenAI, MCP and JSON-RPC keys (semconv v1.41.0, Development stability).
const (
	// GenAIOperationName is gen_ai.operation.name.
	GenAIOperationName = "gen_ai.operation.name"
	// GenAIToolName is gen_ai.tool.name.
	GenAIToolName = "gen_ai.tool.name"
	// GenAIToolCallID is gen_ai.tool.call.id: the model's ID for the call.
	GenAIToolCallID = "gen_ai.tool.call.id"
	// GenAIToolCallArguments is gen_ai.tool.call.arguments: raw arguments,
	// recorded by idemkit only when a user opts in.
	GenAIToolCallArguments = "gen_ai.tool.call.arguments"
	// GenAIToolCallResult is gen_ai.tool.call.result: the raw result,
	// recorded by idemkit only when a user opts in.
	GenAIToolCallResult = "gen_ai.tool.call.result"
	// GenAIConversationID is gen_ai.conversation.id.
	GenAIConversationID = "gen_ai.conversation.id"
	// MCPMethodName is mcp.method.name.
	MCPMethodName = "mcp.method.name"
	// MCPSessionID is mcp.session.id.
	MCPSessionID = "mcp.session.id"
	// MCPProtocolVersion is mcp.protocol.version.
	MCPProtocolVersion = "mcp.protocol.version"
	// JSONRPCRequestID is jsonrpc.request.id, always written as a string.
	JSONRPCRequestID = "jsonrpc.request.id"
	// ErrorType is error.type.
	ErrorType = "error.type"
	// GenAIPromptName is gen_ai.prompt.name: the prompt of prompts/get.
	GenAIPromptName = "gen_ai.prompt.name"
	// MCPResourceURI is mcp.resource.uri: the resource of resources/read,
	// resources/subscribe and resources/unsubscribe.
	MCPResourceURI = "mcp.resource.uri"
	// RPCResponseStatusCode is rpc.response.status_code: the JSON-RPC error
	// code of an error response, as a string.
	RPCResponseStatusCode = "rpc.response.status_code"
	// NetworkTransport is network.transport: TransportTCP over HTTP,
	// TransportPipe on stdio.
	NetworkTransport = "network.transport"
	// NetworkProtocolName is network.protocol.name ("http").
	NetworkProtocolName = "network.protocol.name"
	// NetworkProtocolVersion is network.protocol.version ("1.1", "2").
	NetworkProtocolVersion = "network.protocol.version"
	// ClientAddress is client.address: the peer's address over HTTP.
	ClientAddress = "client.address"
	// ClientPort is client.port (int).
	ClientPort = "client.port"
)

// Values of the borrowed keys that the contract relies on.
const (
	// OperationExecuteTool is the gen_ai.operation.name of a tool execution.
	OperationExecuteTool = "execute_tool"
	// OperationChat is the gen_ai.operation.name of an inference call: the
	// evidence that the model spoke between two tool calls.
	OperationChat = "chat"
	// MethodToolsCall is the mcp.method.name of a tool call.
	MethodToolsCall = "tools/call"
	// ErrorTypeToolError is the error.type of a call whose result had isError set.
	ErrorTypeToolError = "tool_error"
	// ErrorTypeOther is the conventions' fallback error.type.
	ErrorTypeOther = "_OTHER"
	// TransportTCP and TransportPipe are the network.transport values of
	// Streamable HTTP and stdio.
	TransportTCP  = "tcp"
	TransportPipe = "pipe"
)

// mcp.method.name values of the requests an MCP server handles, besides
// MethodToolsCall (semconv v1.41.0 names them all but the task methods,
// which come from the MCP specification 2025-11-25).
const (
	MethodInitialize             = "initialize"
	MethodPing                   = "ping"
	MethodToolsList              = "tools/list"
	MethodPromptsList            = "prompts/list"
	MethodPromptsGet             = "prompts/get"
	MethodResourcesList          = "resources/list"
	MethodResourcesTemplatesList = "resources/templates/list"
	MethodResourcesRead          = "resources/read"
	MethodResourcesSubscribe     = "resources/subscribe"
	MethodResourcesUnsubscribe   = "resources/unsubscribe"
	MethodLoggingSetLevel        = "logging/setLevel"
	MethodCompletionComplete     = "completion/complete"
	MethodTasksGet               = "tasks/get"
	MethodTasksResult            = "tasks/result"
	MethodTasksList              = "tasks/list"
	MethodTasksCancel            = "tasks/cancel"
)

// Keys and values the dup processor reads from other instrumentations
// (semconv v1.41.0).
const (
	// UserID is user.id: the caller's identifier. Two identical tool calls
	// without an idemkit key are grouped as one caller's calls when both
	// carry the same user.id (or EndUserID).
	UserID = "user.id"
	// EndUserID is enduser.id, the older name of the same evidence (read
	// when user.id is absent).
	EndUserID = "enduser.id"
	// OperationTextCompletion is the gen_ai.operation.name of a completion
	// call: inference evidence, like OperationChat.
	OperationTextCompletion = "text_completion"
	// OperationGenerateContent is the gen_ai.operation.name of a multimodal
	// generation call: inference evidence, like OperationChat.
	OperationGenerateContent = "generate_content"
)

// idemkit attributes written by the instrumentation on every tool-call span.
const (
	// ArgsHash (string) is the hex SHA-256, first HashLen characters, of the
	// canonical (RFC 8785) arguments with the explicit-key parameter and any
	// excluded fields stripped.
	ArgsHash = "idemkit.args.hash"
	// KeyHash (string) is the hex SHA-256, first HashLen characters, of the
	// full idempotency key (subject + tool + args hash or explicit key). It is
	// the duplicate-group key.
	KeyHash = "idemkit.key.hash"
	// KeySource (string) is KeySourceDerived or KeySourceExplicit.
	KeySource = "idemkit.key.source"
	// SubjectHash (string) is the hashed subject.
	SubjectHash = "idemkit.subject.hash"
	// Subject (string) is the raw subject, written only when a user opts in.
	Subject = "idemkit.subject"
	// Outcome (string) is one of the Outcome* values.
	Outcome = "idemkit.outcome"
	// Attempt (int) is the claim's attempt count.
	Attempt = "idemkit.attempt"
	// WriteID (string) is the downstream write the tool recorded.
	WriteID = "idemkit.write.id"
	// BypassReason (string) says why a call's outcome is "bypassed":
	// BypassUnprotected, BypassUnscoped or BypassNoGuard.
	BypassReason = "idemkit.bypass.reason"
	// InputRequested (bool) is true on a call whose result asked the client
	// for more input before the call can complete (MCP multi round-trip:
	// the result carries input requests and a request state). Nothing was
	// stored; the round that continues it is the same call, not a duplicate.
	InputRequested = "idemkit.input.requested"
	// InputContinuation (bool) is true on a request that continues an
	// earlier round of the same call (it carries that round's request state
	// and the client's input responses). It is never a duplicate of the
	// round it continues.
	InputContinuation = "idemkit.input.continuation"
	// EvidenceCopy (bool), a resource attribute, marks spans that a tier-1
	// Collector copied to every tier-2 Collector as evidence (inference
	// spans): the dup processor reads them and does not forward them, since
	// the original reaches the trace backend through its own route.
	EvidenceCopy = "idemkit.evidence.copy"
	// RefusalReason (string) is set on a tools/call that idemkit answered
	// itself instead of running the tool (an isError result carrying the
	// "io.idemkit/refusal" _meta marker): one of the Refusal* values.
	RefusalReason = "idemkit.refusal.reason"
	// FinishError (string) is set on a call whose work ran and whose result
	// was delivered, but whose outcome could not be recorded (so a duplicate
	// may run the work again): one of the Finish* values.
	FinishError = "idemkit.finish.error"
)

// Values of RefusalReason.
const (
	// RefusalInProgress: a duplicate arrived while the first call runs
	// (outcome in_progress).
	RefusalInProgress = OutcomeInProgress
	// RefusalMismatch: an explicit key reused with other arguments (outcome
	// mismatch).
	RefusalMismatch = OutcomeMismatch
	// RefusalUnscoped: the caller could not be identified (no subject, no
	// authentic session), so the call was refused rather than run
	// unprotected or in a namespace shared with other callers.
	RefusalUnscoped = "unscoped"
	// RefusalInvalidKey: the explicit idempotency key was malformed.
	RefusalInvalidKey = "invalid_key"
	// RefusalInvalidArguments: the arguments failed the tool's input schema
	// or could not be canonicalised.
	RefusalInvalidArguments = "invalid_arguments"
	// RefusalStoreUnavailable: the claim failed; nothing ran.
	RefusalStoreUnavailable = "store_unavailable"
	// RefusalResponseNotKept: a duplicate of a call that completed but whose
	// response was too large to keep, or could not be encoded. (The first
	// call whose result could not be encoded carries the reason in its
	// answer's _meta, not on its span: it ran.)
	RefusalResponseNotKept = "response_not_kept"
	// RefusalResultUnreadable: a duplicate whose stored result could not be
	// decoded.
	RefusalResultUnreadable = "result_unreadable"
)

// Values of FinishError.
const (
	// FinishStoreError: the store failed to record the outcome.
	FinishStoreError = "store_error"
	// FinishLeaseLost: another caller took the claim over first (fencing).
	FinishLeaseLost = "lease_lost"
	// FinishResponseTooLarge: the response exceeded the store's limit and
	// was not kept; the work is recorded as done.
	FinishResponseTooLarge = "response_too_large"
	// FinishUnencodable: the result could not be encoded, for storage nor
	// for the client; the work is recorded as done without it, so that
	// duplicates are answered response_not_kept (a tool error result is
	// released instead).
	FinishUnencodable = "unencodable"
)

// Values of BypassReason.
const (
	// BypassUnprotected: the tool is not protected (read-only or idempotent
	// annotations, or configuration).
	BypassUnprotected = "unprotected"
	// BypassUnscoped: the tool is protected, but the call could not be scoped
	// to a caller (no subject, no session, not a local transport), so it ran
	// unprotected rather than share one namespace across unknown callers. The
	// span still carries the key hashes, so duplicates that leaked are seen.
	BypassUnscoped = "unscoped"
	// BypassNoGuard: the tool is a write tool that would be protected, but
	// the instrumentation runs without a Guard (observe-only: spans and
	// metrics, no protection). The span carries the key hashes, so the
	// Collector measures the duplicates that leak before protection is on.
	BypassNoGuard = "no_guard"
)

// Values of KeySource.
const (
	KeySourceDerived  = "derived"
	KeySourceExplicit = "explicit"
)

// Values of Outcome.
const (
	// OutcomeExecuted: the call claimed a fresh key and ran the work.
	OutcomeExecuted = "executed"
	// OutcomeReplayed: a duplicate answered with the stored response.
	OutcomeReplayed = "replayed"
	// OutcomeInProgress: a duplicate answered "still running, do not retry".
	OutcomeInProgress = "in_progress"
	// OutcomeTakeover: the call took over a failed or abandoned claim and ran the work.
	OutcomeTakeover = "takeover"
	// OutcomeMismatch: an explicit key reused with different arguments; rejected.
	OutcomeMismatch = "mismatch"
	// OutcomeBypassed: the tool is not protected (read-only or idempotent).
	OutcomeBypassed = "bypassed"
)

// Attributes the Collector's dup processor adds to duplicate spans.
const (
	// Duplicate (bool) is true on every later member of a duplicate group.
	Duplicate = "idemkit.duplicate"
	// DuplicateCause (string) is one of the Cause* values.
	DuplicateCause = "idemkit.duplicate.cause"
	// DuplicateEffect (string) is one of the Effect* values.
	DuplicateEffect = "idemkit.duplicate.effect"
	// DuplicateGroup (string) is the group's key.
	DuplicateGroup = "idemkit.duplicate.group"
	// DuplicateFirstSpanID (string) is the hex span ID of the group's first call.
	DuplicateFirstSpanID = "idemkit.duplicate.first_span_id"
	// DuplicateGapMS (int) is the milliseconds from the first call's start to this one's.
	DuplicateGapMS = "idemkit.duplicate.gap_ms"
)

// Values of DuplicateCause.
const (
	CauseTransportRetry  = "transport_retry"
	CauseHarnessRetry    = "harness_retry"
	CauseModelReissue    = "model_reissue"
	CauseReconnectReplay = "reconnect_replay"
	CauseUnknown         = "unknown"
)

// Values of DuplicateEffect.
const (
	// EffectSuppressed: the duplicate was answered from the stored response.
	EffectSuppressed = "suppressed"
	// EffectBlocked: the duplicate was answered "in progress".
	EffectBlocked = "blocked"
	// EffectLeaked: the duplicate executed again, a real double side effect.
	EffectLeaked = "leaked"
)

// HashLen is the number of hex characters kept of a SHA-256 in span attributes.
const HashLen = 32

// SpanNamePrefix starts the name of every span of the older INTERNAL
// "execute_tool {tool}" shape; SpanName appends the tool.
const SpanNamePrefix = OperationExecuteTool + " "

// SpanName returns the name of the older INTERNAL tool-call span shape,
// "execute_tool {tool}", which idemkit wrote before it followed the MCP
// server span conventions and which the dup processor still accepts. New
// spans are named by ServerSpanName.
func SpanName(tool string) string {
	if tool == "" {
		return OperationExecuteTool
	}
	return SpanNamePrefix + tool
}

// ServerSpanName returns the name of the SERVER span of an MCP request:
// "{mcp.method.name} {target}", where target is the tool (tools/call) or the
// prompt (prompts/get), or just the method when there is no target.
func ServerSpanName(method, target string) string {
	if target == "" {
		return method
	}
	return method + " " + target
}
