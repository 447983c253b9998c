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
// every idemkit.* attribute. The notifications a client sends
// (notifications/initialized, notifications/cancelled, …/progress,
// …/roots/list_changed, …/tasks/status) get a SERVER span named after the
// method, without jsonrpc.request.id (on mcp-go over Streamable HTTP served
// by mcpgo.NewStreamableHTTPHandler, and on every go-sdk transport; mcp-go
// over stdio or in-process shows notifications to no hook, so they have
// none there). The attributes, all named in package spancontract and
// checked against semconv v1.41.0:
//
//   - mcp.method.name; gen_ai.tool.name or gen_ai.prompt.name;
//     mcp.resource.uri on resources/read, subscribe and unsubscribe;
//   - jsonrpc.request.id (a string; numbers in full decimal notation;
//     absent when the ID is null or the transport hides it), mcp.session.id
//     (a hash of the session ID, which grants nothing; the ID itself only
//     with WithRawSessionID; absent on stdio), mcp.protocol.version;
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
//     and idemkit.subject.hash (calls that derived a key, including the
//     calls of every tool not declared readOnlyHint that ran unprotected:
//     no Guard, no caller scope, or not protected because idempotentHint
//     or WithBypass says so; so that the duplicates that leak from them
//     are visible); idemkit.bypass.reason on bypassed calls
//     (unprotected, unscoped, no_guard); idemkit.refusal.reason on the calls
//     idemkit answered itself (see spancontract.RefusalMetaKey); idemkit.finish.error when
//     the work ran but its outcome could not be recorded;
//     idemkit.input.requested on a result that asked the client for input,
//     idemkit.input.continuation on a request that continues such a round;
//   - gen_ai.tool.call.arguments and gen_ai.tool.call.result only with
//     WithRecordArguments and WithRecordResults; idemkit.subject only with
//     WithRawSubject.
//
// # Hashes, and what they reveal
//
// idemkit.args.hash, idemkit.key.hash, idemkit.subject.hash and
// mcp.session.id are hashes, so that spans carry no
// arguments, subjects or credentials. Without a key they are plain
// SHA-256, and a plain hash hides only what cannot be guessed: anyone who
// reads the spans hashes candidate inputs and compares. Arguments of low
// entropy (an order ID and an amount: a dictionary of every plausible pair
// is hashed in well under a second) and subjects that are user IDs or
// e-mail addresses are recovered so. WithHashKey makes every one of
// them an HMAC-SHA-256 under a deployment key, which nobody without the key
// can compute; give every replica the same key, so that the Collector's
// dup processor (which compares the hashes as opaque strings) still groups
// their duplicates. The session ID is hashed with or without a key: it is
// random, and in session scope it is the credential that reaches the
// session's stored results. No exported value grants access, and no tool
// result or argument bytes reach a span unless WithRecordArguments or
// WithRecordResults asks.
//
// # Protection
//
// A tool is protected unless its MCP annotations say readOnlyHint or
// idempotentHint (WithProtect and WithBypass override, per tool). A
// protected call's arguments are validated against the tool's inputSchema
// (an integer by its exact decimal value: 16.0 is one, 16.00000000000000000001
// is not) and refused when two member names of one object differ only in
// letter case (Go's encoding/json reads them as one member, the last);
// its key is derived from its scope (the caller: see WithSubject), the tool
// name and the canonical arguments, or from an explicit key sent as the
// idempotency_key argument (advertised in the tool's schema and
// description) or in params._meta under spancontract.KeyMetaKey (the
// _meta keys and the metric names are all in package spancontract). Then:
//
//   - first call: the handler runs; its result, the write ID it recorded and
//     its isError flag are stored;
//   - duplicate after success: the stored result, verbatim, plus
//     _meta[spancontract.ReplayMetaKey]; never an error;
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
// mcpgo.AddJobTool, gosdk.AddJobTool), or, on mcp-go, MCP tasks. With
// WithCallStatusTool, a model told that a call is in progress has a tool to
// ask instead of repeating the call: it reports the caller's own record of
// that call (in progress, completed with the stored result, released,
// unknown) and never claims anything.
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
// scope only (see WithSubject). See WithTasks and jobs.Config (package instrument/jobs) for their
// leases. The go-sdk (v1.8.0) has no tasks: see package gosdk.
//
// A task's work runs after its tools/call span has ended, so it gets a span
// of its own: "execute_task {tool}", kind INTERNAL, a child of the creating
// call's span, with gen_ai.tool.name, idemkit.task.id, idemkit.attempt,
// idemkit.write.id (the write the work recorded) and error.type when it
// failed. It has no gen_ai.operation.name: it is not a second tool call.
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
// # Limits
//
// No client, authenticated or not, can grow the server's memory without
// bound; every limit has a default, an option and a refusal a client can
// read (nothing is done for the refused request):
//
//   - Streamable HTTP (mcpgo.NewStreamableHTTPHandler,
//     gosdk.NewStreamableHTTPHandler; see HTTPLimits): at most 10,000
//     sessions open at once (another initialize gets HTTP 503 with a
//     JSON-RPC error, reason too_many_sessions), each ended after 30
//     minutes without a request, and request bodies of at most 4 MiB (HTTP
//     413, not read).
//   - Sockets: NewHTTPServer returns an http.Server with header, request
//     and idle-connection timeouts, so that a client trickling its request
//     is cut.
//   - Records: an idemkit.MemoryStore holds at most MaxRecords (100,000) and
//     about MaxBytes (256 MiB) and deletes its own expired records; full,
//     it refuses a new call (reason store_full: retry later) and evicts
//     nothing. The SQL stores keep expired records until swept: run
//     Guard.StartSweeper beside every Guard on one.
//
// # Metrics
//
// On by default, named in package spancontract: the conventions'
// MetricOperationDuration (every request) and MetricSessionDuration, and
// idemkit's MetricToolCalls, MetricClaimDuration, MetricReplays,
// MetricInProgress and MetricFinishErrors. Their attributes are bounded by the tool and prompt
// lists: no session or request IDs, no arguments.
package instrument
