package instrument

import (
	"context"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// ScopeName is the instrumentation scope of the tracer and the meter: this
// package's import path.
const ScopeName = "github.com/idemkit-mcp/idemkit/instrument"

// Version is the instrumentation version reported with the scope.
const Version = idemkit.Version

// Names of the request and result fields the instrumentation reads and
// writes. They follow the MCP rule for _meta keys: a reverse-DNS prefix
// (io.idemkit/) outside the reserved modelcontextprotocol/mcp labels, then
// a name.
const (
	// KeyArgument is the optional tool argument that carries a caller's
	// explicit idempotency key. The instrumentation adds it to the input
	// schema and description of every tool whose calls are protected.
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
	// an object {"reason": "…"}, where reason is one of the
	// idemkit.refusal.reason values of package spancontract:
	//
	//   - "in_progress": the first call with the same key is still running;
	//     nothing new was started. The object also has "attempt", and
	//     "status_tool" and "retry_after_ms" (how long the running attempt's
	//     lease still holds) when known;
	//   - "mismatch": the explicit key was used before with other arguments;
	//   - "unscoped": the caller cannot be identified (see WithSubject);
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
	//     the same answer; the work is not run again.
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
)

// Metric names. Through an OpenTelemetry Prometheus exporter (the Go SDK's
// or the Collector's, with its default unit and type suffixes) they become
// the names in brackets.
const (
	// MetricToolCalls counts tool calls by gen_ai.tool.name and
	// idemkit.outcome, plus idemkit.bypass.reason on bypassed calls
	// (unprotected, unscoped, no_guard) and idemkit.refusal.reason on calls
	// the instrumentation answered itself (in_progress, mismatch, unscoped,
	// invalid_key, invalid_arguments, store_unavailable, store_full,
	// response_not_kept, result_unreadable; idemkit.outcome is absent on the calls refused
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

// RecordWrite records the ID of the downstream write the running tool call
// made (a refund ID, a row ID, a message ID). It becomes the span's
// idemkit.write.id and is stored with the response, so that every replay of
// the call reports the same ID. Call it from the tool handler (or a job's
// work) with the handler's ctx; the last call wins. Outside an instrumented
// call it does nothing. It is safe for concurrent use.
func RecordWrite(ctx context.Context, id string) { mcpcall.RecordWrite(ctx, id) }

// Progress reports the progress of a long-running tool call and keeps its
// claim alive, in one call:
//
//   - when the client asked for progress (params._meta.progressToken), it
//     sends notifications/progress, which also lets MCP clients reset their
//     request timeout; delivery is best effort and its failure is not
//     returned;
//   - it extends the claim's lease (idemkit.Call.HeartbeatNote, with the
//     progress as the record's note, which the call status tool and
//     `idemkit inspect` report), so that a duplicate arriving after the
//     tool's Lease is answered "in progress" instead of taking the call
//     over.
//
// Inside a job's work (see Jobs) it records the progress on the job, where
// the status tool reports it, and heartbeats the job instead.
//
// total is 0 when unknown. Call it every few seconds, well inside the
// Lease, not in a tight loop: each call is a store round trip. It returns an
// error matching idemkit.ErrLeaseLost when another caller has taken the
// claim over; the work should then stop, because its outcome will not be
// recorded. ctx bounds the notification and the store call.
func Progress(ctx context.Context, progress, total float64, message string) error {
	return mcpcall.Progress(ctx, progress, total, message)
}

// TxRunner is a store that runs a tool call's work in a database
// transaction of its own, where the call's claim, the tool's writes and its
// recorded outcome commit together (all or nothing, even if the process is
// killed between them). *pgstore.Store is a TxRunner[pgx.Tx] and
// *sqlitestore.Store a TxRunner[*sql.Tx]. The transactional handler forms,
// mcpgo.AddTxTool and gosdk.AddTxTool, take one.
type TxRunner[T any] interface {
	// DoInTx begins a transaction, runs g's claim of key, work (with the
	// transaction) and the recorded outcome in it, and commits it when they
	// succeed; it rolls it back otherwise (see pgstore.Store.DoInTx).
	DoInTx(ctx context.Context, g *idemkit.Guard, key idemkit.Key, work func(ctx context.Context, tx T) (idemkit.Response, error)) (idemkit.Result, error)
	// InTx runs fn in a transaction of its own, committed when fn returns
	// nil: a call that is not protected (see WithBypass) runs so.
	InTx(ctx context.Context, fn func(ctx context.Context, tx T) error) error
}
