// Package instrument traces MCP tool calls and enforces claim-and-replay on
// the ones that write, with an idemkit.Guard.
//
// With mcp-go (package instrument/mcpgo; the official SDK is wired by
// instrument/gosdk the same way):
//
//	guard, _ := idemkit.NewGuard(store, nil)
//	s := server.NewMCPServer("billing", "1.0.0",
//		mcpgo.ServerOptions(guard, instrument.WithSubject(userID))...)
//	s.AddTool(refundTool, refund)   // unannotated: protected
//	s.AddTool(lookupTool, lookup)   // readOnlyHint: traced, not protected
//
// # Spans
//
// Every tools/call gets exactly one span, named "execute_tool {tool}", kind
// INTERNAL, following the OpenTelemetry GenAI conventions for tool
// execution (the MCP server span "tools/call {tool}", kind SERVER, was the
// alternative; execute_tool was chosen because it is the span the GenAI
// conventions and the Collector's dup processor key on, and because an MCP
// server may already emit a transport-level SERVER span). Its parent is the
// trace context the client sent in params._meta (traceparent, tracestate)
// when there is one, the ambient context otherwise; when both exist the
// ambient span is added as a link. Attributes, all named in spancontract:
//
//   - gen_ai.operation.name=execute_tool, gen_ai.tool.name,
//     mcp.method.name=tools/call (set at start, visible to samplers);
//   - mcp.session.id when the transport has one (mcp-go's stdio reports
//     "stdio": it is recorded as it is), jsonrpc.request.id as a string
//     (numbers in full decimal notation; left off where the SDK hides it),
//     mcp.protocol.version when known;
//   - idemkit.args.hash, idemkit.key.hash, idemkit.key.source and
//     idemkit.subject.hash for calls that derived a key (protected tools,
//     protected tools bypassed as unscoped, and write tools observed without
//     a Guard); idemkit.outcome; idemkit.attempt; idemkit.write.id (see
//     RecordWrite); idemkit.bypass.reason on bypassed calls: "unprotected"
//     (a read-only or idempotent tool, with a Guard), "unscoped", or
//     "no_guard" (a write tool, observe-only);
//   - error.type: "tool_error" for an isError result (including the
//     in-progress, mismatch and rejected-key answers), the Go error's type
//     for a handler error or a store failure, with status Error;
//   - gen_ai.tool.call.arguments and gen_ai.tool.call.result only with
//     WithRecordArguments / WithRecordResults, cut to a size cap;
//     idemkit.subject only with WithRawSubject.
//
// Request attributes are set at the end of the call in one SetAttributes
// call, and only on recording spans.
//
// # Protection
//
// A tool is protected unless its MCP annotations say readOnlyHint or
// idempotentHint (WithProtect and WithBypass override, per tool). A
// protected call derives its key from its scope (see WithSubject for the
// empty-subject rule), the tool name and the canonical arguments, or from an
// explicit key sent as the idempotency_key argument (which the SDK wiring
// advertises in protected tools' schemas and descriptions) or in
// params._meta under KeyMetaKey. Then:
//
//   - first call: the handler runs; its result (the SDK's own JSON), the
//     write ID it recorded and its isError flag are stored;
//   - duplicate after success: the stored result is returned verbatim with
//     _meta[ReplayMetaKey] = {"replayed": true, "attempt": N, "write_id":
//     "…"}, never as an error;
//   - duplicate while the first runs: an isError result saying the work is
//     in flight, not to retry, and which status tool to call;
//   - explicit key reused with other arguments: an isError result, nothing
//     run; invalid arguments or key: the same, before any claim;
//   - store unreachable on the claim: an isError result saying nothing was
//     done and to retry shortly; the handler never runs unprotected;
//   - handler Go error: passed through as the SDK passes it (mcp-go turns
//     it into JSON-RPC -32603); nothing is stored, the next duplicate runs
//     again; a store failure after the work ran: the work's result is
//     returned and the failure is recorded on the span.
//
// Long tools call Progress, which sends MCP progress notifications and
// extends the claim's lease together, or use the job-and-poll shape (Jobs,
// mcpgo.AddJobTool, gosdk.AddJobTool).
//
// # Metrics
//
// See MetricToolCalls, MetricClaimDuration, MetricReplays and
// MetricInProgress for the instruments and their Prometheus names. Labels
// are gen_ai.tool.name and idemkit.outcome only, and the SDK wiring only
// passes names of registered tools, so cardinality is bounded by the tool
// list.
//
// This package is SDK-agnostic and imports no MCP SDK; Handle, ToolCall and
// Codec are the surface the SDK packages build on.
package instrument
