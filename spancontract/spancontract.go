// Package spancontract is the single source of truth for the span contract
// shared by idemkit's instrumentation (which writes tool-call spans) and the
// Collector's dup processor (which reads them and annotates duplicates).
//
// It holds attribute keys, their enumerated values and the span naming rule,
// and the other names idemkit's users and dashboards rely on (the MCP
// request and result fields idemkit reads and writes, and the metric
// names), as plain strings, so that both sides import the same names without pulling
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
	// MCPSessionID is mcp.session.id. idemkit's instrumentation exports a
	// hash of the session ID (which may be a credential), unless the user
	// opts in to the raw ID; it tells sessions apart as the ID does.
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
	// excluded fields stripped; with a deployment hash key, an HMAC-SHA-256
	// of it under the key. Consumers compare it as an
	// opaque string.
	ArgsHash = "idemkit.args.hash"
	// KeyHash (string) is the hex SHA-256, first HashLen characters, of the
	// full idempotency key (subject + tool + args hash or explicit key), or,
	// with a deployment hash key, its HMAC-SHA-256. It is the duplicate-group
	// key, compared as an opaque string.
	KeyHash = "idemkit.key.hash"
	// KeySource (string) is KeySourceDerived or KeySourceExplicit.
	KeySource = "idemkit.key.source"
	// SubjectHash (string) is the hashed subject (HMAC-SHA-256 with a
	// deployment hash key).
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
	// RefusalStoreFull: the store is at its capacity (a memory store's
	// record or byte limit) and none of its records has expired, so a new
	// call could not be claimed; nothing ran, and a later retry may pass.
	RefusalStoreFull = "store_full"

	// RefusalMissingKey: the tool requires an explicit idempotency key
	// (instrument.WithRequireKey) and the call had none; nothing was done.
	RefusalMissingKey = "missing_key"
	// RefusalAttemptsExhausted: the call's attempts failed as often as the
	// tool's idemkit.ToolConfig.MaxAttempts allows (a poison call); nothing
	// was done, and the model is told not to retry.
	RefusalAttemptsExhausted = "attempts_exhausted"
	// RefusalDeclined: the user declined, or dismissed, the confirmation
	// of a human gate (instrument.WithConfirmation); nothing was done.
	RefusalDeclined = "declined"
	// RefusalConfirmationUnavailable: the client cannot ask the user (it
	// did not declare the elicitation capability), or asking failed;
	// nothing was done.
	RefusalConfirmationUnavailable = "confirmation_unavailable"
	// RefusalResponseNotKept: a duplicate of a call that completed but whose
	// response was too large to keep, or could not be encoded. (The first
	// call whose result could not be encoded carries the reason in its
	// answer's _meta, not on its span: it ran.)
	RefusalResponseNotKept = "response_not_kept"
	// RefusalResultUnreadable: a duplicate whose stored result could not be
	// decoded.
	RefusalResultUnreadable = "result_unreadable"
	// RefusalMisconfigured: the tool's key policy (excluded or rounded
	// fields, instrument.WithExclude and WithRound) is invalid, so the
	// call could not be keyed as the operator intends; nothing was done,
	// and a retry will not help.
	RefusalMisconfigured = "misconfigured"
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
	// DuplicateUncompared (bool) is true on a tool span that the processor
	// could not compare with other calls: it carries no idemkit key hash
	// and no captured arguments (gen_ai.tool.call.arguments). Such a call is
	// never flagged a duplicate; the dup connector counts it, so that a
	// dashboard shows what the attribution cannot see.
	DuplicateUncompared = "idemkit.duplicate.uncompared"
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

// Names of the MCP request and result fields idemkit reads and writes. They
// follow the MCP rule for _meta keys: a reverse-DNS prefix (io.idemkit/)
// outside the reserved modelcontextprotocol/mcp labels, then a name.
const (
	// KeyArgument is the optional tool argument that carries a caller's
	// explicit idempotency key. The instrumentation adds it to the input
	// schema and description of every tool whose calls are protected, and
	// it is the argument idemkit.NewKey reads an explicit key from by
	// default (idemkit.KeyOptions.ExplicitKeyField).
	KeyArgument = "idempotency_key"

	// KeyMetaKey is the params._meta entry that carries an explicit
	// idempotency key, for clients that send it outside the arguments. The
	// plain name KeyArgument is accepted in _meta too; when both are present
	// (or the argument too) they must be equal.
	KeyMetaKey = "io.idemkit/idempotency_key"

	// ReplayMetaKey is the result _meta entry that marks a replayed result.
	// Its value is an object {"replayed": true, "attempt": N, "write_id":
	// "…"} (write_id only when the tool recorded one). A replay is the
	// original result plus this entry, never an error.
	ReplayMetaKey = "io.idemkit/replay"

	// RefusalMetaKey is the result _meta entry of an isError result that the
	// instrumentation produced instead of running the tool, so that a client
	// can tell such answers apart without reading their text. Its value is
	// an object {"reason": "…"}, where reason is one of the Refusal* values
	// (the RefusalReason attribute's):
	//
	//   - "in_progress": the first call with the same key is still running;
	//     nothing new was started. The object also has "attempt", and
	//     "status_tool" and "retry_after_ms" (how long the running attempt's
	//     lease still holds) when known;
	//   - "mismatch": the explicit key was used before with other arguments;
	//   - "unscoped": the caller cannot be identified (see
	//     instrument.WithSubject);
	//   - "invalid_key", "invalid_arguments": the request was malformed;
	//   - "store_unavailable": the idempotency store could not be reached;
	//     nothing was done, a retry is safe;
	//   - "store_full": the idempotency store is at its capacity (a
	//     MemoryStore's MaxRecords or MaxBytes) with none of its records
	//     expired; nothing was done, a later retry may pass. The object also
	//     has "retry_after_ms" (when the next record may expire) when known;
	//   - "response_not_kept", "result_unreadable": the call already ran,
	//     but its result cannot be replayed: it was too large to keep, or
	//     its stored record cannot be read (it fails its checksum, or is
	//     damaged otherwise: see idemkit.ErrRecordDamaged). Retrying gets
	//     the same answer; the work is not run again;
	//   - "missing_key", "declined", "confirmation_unavailable",
	//     "attempts_exhausted": a per-tool policy refused the call (an
	//     explicit key is required; the user declined the confirmation, or
	//     could not be asked; the call failed too often to be taken over
	//     again). Nothing ran for this request.
	//
	// In every case but in_progress nothing ran for this request.
	RefusalMetaKey = "io.idemkit/refusal"

	// JobMetaKey is the result _meta entry of a job status answer:
	// {"job_id": "…", "state": "…"}.
	JobMetaKey = "io.idemkit/job"

	// StatusToolMetaKey is the tool _meta entry (in tools/list) that names
	// the tool reporting on an in-progress call of the tool; the in-progress
	// answer names it. Job tools carry it.
	StatusToolMetaKey = "io.idemkit/status_tool"

	// CallStatusMetaKey is the result _meta entry of a call status tool's
	// answer (instrument.WithCallStatusTool, the gateway's
	// idemkit_call_status): {"state": "…", "tool": "…"}, state one of
	// in_progress, abandoned, completed, released, unknown, mismatch,
	// not_recorded, rejected, unscoped, store_unavailable.
	CallStatusMetaKey = "io.idemkit/call_status"
)

// Metric names the instrumentation records. Through an OpenTelemetry
// Prometheus exporter (the Go SDK's or the Collector's, with its default
// unit and type suffixes) they become the names in brackets.
const (
	// MetricToolCalls counts tool calls by gen_ai.tool.name and
	// idemkit.outcome, plus idemkit.bypass.reason on bypassed calls
	// (unprotected, unscoped, no_guard) and idemkit.refusal.reason on calls
	// the instrumentation answered itself (in_progress, mismatch, unscoped,
	// invalid_key, invalid_arguments, store_unavailable, store_full, response_not_kept,
	// result_unreadable; idemkit.outcome is absent on the calls refused
	// before a claim). [idemkit_tool_calls_total]
	MetricToolCalls = "idemkit.tool.calls"
	// MetricClaimDuration is the time from the start of the claim to the
	// start of the work, or to the answer for a duplicate, in seconds, by
	// gen_ai.tool.name. [idemkit_claim_duration_seconds_{bucket,sum,count}]
	MetricClaimDuration = "idemkit.claim.duration"
	// MetricReplays counts duplicates answered with a stored result, by
	// gen_ai.tool.name: MetricToolCalls with outcome replayed, kept as its
	// own series for dashboards. [idemkit_replays_total]
	MetricReplays = "idemkit.replays"
	// MetricInProgress counts duplicates answered "in progress" (not calls
	// in flight), by gen_ai.tool.name. [idemkit_in_progress_total]
	MetricInProgress = "idemkit.in_progress"
	// MetricFinishErrors counts calls whose work ran and whose result was
	// delivered, but whose outcome could not be recorded, so that a
	// duplicate may run the work again; by gen_ai.tool.name and
	// idemkit.finish.error (store_error, lease_lost, response_too_large,
	// unencodable). [idemkit_finish_errors_total]
	MetricFinishErrors = "idemkit.finish.errors"
	// MetricOperationDuration is the conventions' mcp.server.operation.duration
	// (seconds, the conventions' buckets) of every request, by
	// mcp.method.name, gen_ai.tool.name or gen_ai.prompt.name,
	// gen_ai.operation.name (execute_tool on tools/call), error.type,
	// rpc.response.status_code, mcp.protocol.version and the network.*
	// attributes. [mcp_server_operation_duration_seconds_{bucket,sum,count}]
	MetricOperationDuration = "mcp.server.operation.duration"
	// MetricSessionDuration is the conventions' mcp.server.session.duration
	// (seconds) of every session that ended, by mcp.protocol.version and the
	// network.* attributes. [mcp_server_session_duration_seconds_{bucket,sum,count}]
	MetricSessionDuration = "mcp.server.session.duration"
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
