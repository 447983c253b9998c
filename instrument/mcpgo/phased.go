package mcpgo

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/internal/txtool"
)

// AddPhasedTool registers tool on s with a handler in two parts, for a
// tool whose side effect is an external call (a payment, a message, a call
// to another service) plus writes to the database that also holds the
// Guard's records. A protected call runs in atomic phases (see
// idemkit.Guard.DoPhased):
//
//  1. the call's claim commits on its own (a duplicate is replayed, or
//     told the call is in progress, as for any protected tool);
//  2. external runs outside any transaction: it makes the external call,
//     forwarding idemkit.CallFromContext(ctx).IdempotencyKey() so that the
//     provider deduplicates a repeat of it, and returns what local needs;
//  3. local makes the tool's writes through tx, a short transaction of
//     runner's store (a pgx.Tx from *pgstore.Store, a *sql.Tx from
//     *sqlitestore.Store), and returns the tool's result, which is
//     recorded in the same transaction: the writes and the recorded
//     outcome commit together.
//
// Use it instead of AddTxTool whenever the work waits on the network: a
// transaction must never be held across such a wait. AddTxTool holds its
// transaction for the whole handler, which on SQLite holds the database's
// only write lock (every other call, and every heartbeat, waits for the
// slowest external call in flight) and on PostgreSQL a pooled connection
// and the rows it locked. Use AddTxTool when the tool's only side effect is
// in the database (nothing waits on the network): one transaction is then
// simpler and cheaper.
//
// A process killed after the external call and before the commit leaves
// the call in progress, with none of its writes: once the lease runs out
// (idemkit.Config.Lease), the next duplicate takes it over, calls external
// again with the same key (the provider answers with what it did the first
// time) and local once. An attempt that lost its claim meanwhile (its
// lease ran out) cannot commit: its writes are rolled back. A Go error from
// either part releases the claim (local's writes are rolled back): the
// next duplicate runs again. An isError result from local commits its
// writes and is stored as the Guard's FailurePolicy says. When the local
// transaction cannot commit, the caller gets an isError answer that says
// so and that a retry completes the call (refusal store_unavailable); the
// claim is released for that retry.
//
// A call is not bound to its request's cancellation: a client that hangs
// up does not leave a paid refund unrecorded (a task of the tool stops when
// the task is cancelled). A call that is not protected (WithBypass, an
// unscoped bypass, no Guard), and a task of the tool, run the same two
// parts without a claim, local in a transaction of its own.
// runner's store must be the Guard's store, and the server must be
// instrumented (ServerOptions or Install) before AddPhasedTool.
func AddPhasedTool[T, E any](s *server.MCPServer, runner instrument.PhasedRunner[T], tool mcp.Tool,
	external func(ctx context.Context, req mcp.CallToolRequest) (E, error),
	local func(ctx context.Context, tx T, req mcp.CallToolRequest, ext E) (*mcp.CallToolResult, error)) {
	if m := instrumentationOf(s); m != nil {
		m.txTools.Store(tool.Name, txtool.Phased(runner))
		m.hasTx.Store(true)
	}
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ext, err := external(ctx, req)
		if err != nil {
			return nil, err
		}
		var res *mcp.CallToolResult
		err = txtool.Local(ctx, runner, func(ctx context.Context, tx T) error {
			var err error
			res, err = local(ctx, tx, req, ext)
			return err
		})
		return res, err
	})
}
