package instrument

import (
	"context"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// ScopeName is the instrumentation scope of the tracer and the meter: this
// package's import path. The instrumentation version reported with it is
// idemkit.Version.
const ScopeName = mcpcall.ScopeName

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
