package mcpgo

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/internal/txtool"
)

// TxToolHandlerFunc is the handler of a transactional tool (AddTxTool): it
// makes the tool's database writes through tx, the transaction that also
// holds the call's claim and its recorded outcome.
type TxToolHandlerFunc[T any] func(ctx context.Context, tx T, req mcp.CallToolRequest) (*mcp.CallToolResult, error)

// AddTxTool registers tool on s with a handler that receives a database
// transaction of runner's store (a pgx.Tx from *pgstore.Store, a *sql.Tx
// from *sqlitestore.Store), for a tool whose side effect is a write to the
// database that also holds the Guard's records. The call's claim, the
// handler's writes and the recorded outcome commit together: if the
// process dies between the write and the commit, neither remains, and the
// duplicate then runs once. Everything else is as for any protected tool:
// the replay marker, the span's outcome, the metrics. runner's store must
// be the Guard's store, and the server must be instrumented (ServerOptions
// or Install) before AddTxTool.
//
// A Go error from handler rolls the transaction back, and nothing is
// stored (the next duplicate runs again); an isError result commits the
// handler's writes, and is stored as the Guard's FailurePolicy says. When
// the transaction cannot commit, nothing of the call happened: the caller
// gets an isError answer that says so (refusal store_unavailable), and may
// retry. The transaction is not bound to the request's cancellation: a
// client that hangs up (a timeout, a dropped connection) does not roll a
// call back half done; it completes and its outcome is stored, and a
// duplicate that arrives meanwhile waits for it on the store's lock, then
// gets the replay. A call that is not protected (WithBypass, an unscoped bypass, no
// Guard) runs in a transaction of its own, without a claim; so does a task
// of the tool (see AddTaskTool), whose outcome the task's record keeps.
// The handler must make its writes through tx only.
//
// The transaction lasts as long as the handler, so the handler must never
// wait on the network: on PostgreSQL it holds a pooled connection, the rows
// it wrote and the claim's row; on SQLite it holds the database's one
// write lock, so every other write (other calls' claims, the heartbeats of
// jobs and tasks) waits for it, up to the store's busy timeout. A task of
// such a tool on SQLite whose transaction outlasts the task lease is
// reported lost while it runs. A tool that calls an external service (a
// payment provider) and writes its own rows is an AddPhasedTool: the
// external call runs outside any transaction, then the rows and the
// outcome commit together in a short one.
func AddTxTool[T any](s *server.MCPServer, runner instrument.TxRunner[T], tool mcp.Tool, handler TxToolHandlerFunc[T]) {
	r := txtool.Runner(runner)
	if m := instrumentationOf(s); m != nil {
		m.txTools.Store(tool.Name, r)
		m.hasTx.Store(true)
	}
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if tx, ok := txtool.From[T](ctx); ok {
			return handler(ctx, tx, req)
		}
		// Not through the instrumentation (it was installed after
		// AddTxTool, or not at all): a transaction of its own.
		var res *mcp.CallToolResult
		err := runner.InTx(ctx, func(ctx context.Context, tx T) error {
			var err error
			res, err = handler(ctx, tx, req)
			return err
		})
		return res, err
	})
}
