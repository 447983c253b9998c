// Package instrument configures idemkit's instrumentation of MCP servers:
// OpenTelemetry spans and metrics for every request, as the OpenTelemetry
// MCP semantic conventions define them, and claim-and-replay, with an
// idemkit.Guard, for the tool calls that write. Packages instrument/mcpgo
// (github.com/mark3labs/mcp-go) and instrument/gosdk (the official Go SDK)
// install it on a server; this package holds their options and what a tool
// handler calls (RecordWrite, Progress, Jobs).
//
//	guard, err := idemkit.NewGuard(store, nil)
//	…
//	s := server.NewMCPServer("billing", "1.0.0",
//		mcpgo.ServerOptions(guard, instrument.WithSubject(mcpgo.TokenSubject))...)
//	s.AddTool(refundTool, refund)   // unannotated: protected
//	s.AddTool(lookupTool, lookup)   // readOnlyHint: traced, not protected
//
// # Spans
//
// Every MCP request the server handles gets one span of kind SERVER, named
// "{mcp.method.name} {target}": "tools/call issue_refund", "prompts/get
// summarise", "tools/list", "initialize". Its parent is the trace context
// the client sent in params._meta (traceparent, tracestate); the ambient
// context (an HTTP server span) becomes a link. Methods outside the MCP
// specification are named "_OTHER". A tools/call is one span, never two: it
// also carries gen_ai.operation.name=execute_tool, gen_ai.tool.name and
// every idemkit.* attribute. The attributes, all named in package
// spancontract and checked against semconv v1.41.0:
//
//   - mcp.method.name; gen_ai.tool.name or gen_ai.prompt.name;
//     mcp.resource.uri on resources/read, subscribe and unsubscribe;
//   - jsonrpc.request.id (a string; numbers in full decimal notation;
//     absent when the ID is null or the transport hides it), mcp.session.id
//     (absent on stdio), mcp.protocol.version;
//   - network.transport ("tcp" over HTTP, "pipe" on stdio),
//     network.protocol.name and version, client.address and client.port
//     (over HTTP, when the server is served through the adapter's HTTP
//     handler);
//   - error.type: the JSON-RPC error code as a string ("-32602") when the
//     response is a JSON-RPC error, with rpc.response.status_code and the
//     status description set to the error message; "tool_error" for an
//     isError result; "_OTHER" when a handler panicked. A response that was
//     delivered successfully never gets an ERROR status;
//   - on tools/call: idemkit.outcome (executed, replayed, in_progress,
//     takeover, mismatch, bypassed), idemkit.attempt, idemkit.write.id (see
//     RecordWrite), idemkit.args.hash, idemkit.key.hash, idemkit.key.source
//     and idemkit.subject.hash (calls that derived a key, including write
//     tools run unprotected); idemkit.bypass.reason on bypassed calls
//     (unprotected, unscoped, no_guard); idemkit.refusal.reason on the calls
//     idemkit answered itself (see RefusalMetaKey); idemkit.finish.error when
//     the work ran but its outcome could not be recorded;
//     idemkit.input.requested on a result that asked the client for input,
//     idemkit.input.continuation on a request that continues such a round;
//   - gen_ai.tool.call.arguments and gen_ai.tool.call.result only with
//     WithRecordArguments and WithRecordResults; idemkit.subject only with
//     WithRawSubject.
//
// # Protection
//
// A tool is protected unless its MCP annotations say readOnlyHint or
// idempotentHint (WithProtect and WithBypass override, per tool). A
// protected call's arguments are validated against the tool's inputSchema;
// its key is derived from its scope (the caller: see WithSubject), the tool
// name and the canonical arguments, or from an explicit key sent as the
// idempotency_key argument (advertised in the tool's schema and
// description) or in params._meta under KeyMetaKey. Then:
//
//   - first call: the handler runs; its result, the write ID it recorded and
//     its isError flag are stored;
//   - duplicate after success: the stored result, verbatim, plus
//     _meta[ReplayMetaKey]; never an error;
//   - duplicate while the first runs: an isError result saying the work is
//     in flight, not to retry, and which status tool to call, with a
//     RefusalMetaKey marker (reason in_progress);
//   - explicit key reused with other arguments, malformed key or arguments,
//     store unreachable on the claim: an isError result saying that nothing
//     was done, with a RefusalMetaKey marker; the handler never runs
//     unprotected;
//   - a caller that cannot be identified: refused by default
//     (UnscopedRefuse), with one log line per tool telling the operator what
//     to configure; see WithUnscopedCalls for the opt-ins;
//   - handler Go error: passed through as the SDK passes it; nothing is
//     stored, and the next duplicate runs again.
//
// Long tools call Progress, which sends MCP progress notifications and
// extends the claim's lease together, or use the job-and-poll shape (Jobs,
// mcpgo.AddJobTool, gosdk.AddJobTool), or, on mcp-go, MCP tasks.
//
// # Durable jobs and tasks
//
// A job's execution (Jobs) and an MCP task's (mcpgo: a task-augmented
// tools/call) are themselves claims in the Guard's store: held by their
// worker with a lease its heartbeats keep, with the last progress as their
// note and the work's result as their stored outcome. A job or task started
// on one replica is reported by every replica sharing the store, and after
// a restart: running, succeeded (with its result), failed, cancelled, or
// lost when its worker died (reported within its lease of the crash, and
// never run again by itself). The call that starts one is an ordinary
// protected call whose stored answer names it, so that a duplicate gets the
// same job or task back, and the work starts only once that answer is
// stored: it runs at most once. Jobs and tasks are visible to the caller's
// scope only (see WithSubject). See WithTasks and JobsConfig for their
// leases. The go-sdk (v1.8.0) has no tasks: see package gosdk.
//
// # Transactional tools
//
// A tool whose side effect is a write to the database holding the Guard's
// records can take the transaction instead (mcpgo.AddTxTool,
// gosdk.AddTxTool, on a TxRunner: *pgstore.Store or *sqlitestore.Store):
// its claim, its writes and its recorded outcome commit together, so that a
// process killed between the write and the commit leaves neither, and the
// duplicate then runs once; the replay marker, the span's outcome and the
// metrics are those of any protected tool.
//
// A transaction must never be held across work that waits on the network:
// on SQLite it holds the database's only write lock (every other call, and
// every heartbeat, waits for the slowest handler in flight), on PostgreSQL
// a pooled connection and the rows it locked. A tool whose side effect is
// an external call (a payment) plus its own rows runs in atomic phases
// instead (mcpgo.AddPhasedTool, gosdk.AddPhasedTool, on a PhasedRunner:
// the same stores): the claim commits first, the handler's external part
// runs outside any transaction with the call's idempotency key, and its
// local part makes the writes in a short transaction in which the outcome
// is recorded (see idemkit.Guard.DoPhased). AddTxTool remains the simpler
// form when nothing waits on the network.
//
// # Metrics
//
// On by default: the conventions' MetricOperationDuration (every request)
// and MetricSessionDuration, and idemkit's MetricToolCalls,
// MetricClaimDuration, MetricReplays, MetricInProgress and
// MetricFinishErrors. Their attributes are bounded by the tool and prompt
// lists: no session or request IDs, no arguments.
package instrument
