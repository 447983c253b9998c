package gosdk

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/internal/txtool"
	"github.com/idemkit-mcp/idemkit/instrument/internal/weakmap"
)

// servers finds the Instrumentation installed on a server, without keeping
// the server alive (a server built per request is collected with its
// entry).
var servers weakmap.Map[mcp.Server, *Instrumentation]

// TxToolHandler is the handler of a transactional tool (AddTxTool): it
// makes the tool's database writes through tx, the transaction that also
// holds the call's claim and its recorded outcome. It reads its arguments
// from req.Params.Arguments, as an mcp.ToolHandler does.
type TxToolHandler[T any] func(ctx context.Context, tx T, req *mcp.CallToolRequest) (*mcp.CallToolResult, error)

// AddTxTool registers tool on s with a handler that receives a database
// transaction of runner's store (a pgx.Tx from *pgstore.Store, a *sql.Tx
// from *sqlitestore.Store); see mcpgo.AddTxTool for the behaviour, which
// is the same: the call's claim, the handler's writes and the recorded
// outcome commit together, with the replay marker, span outcome and
// metrics of any protected tool. runner's store must be the Guard's
// store, and s must be instrumented (Instrument or Install) before
// AddTxTool.
func AddTxTool[T any](s *mcp.Server, runner instrument.TxRunner[T], tool *mcp.Tool, handler TxToolHandler[T]) {
	r := txtool.Runner(runner)
	if m, ok := servers.Load(s); ok {
		m.txTools.Store(tool.Name, r)
		m.hasTx.Store(true)
	}
	t := *tool
	if t.InputSchema == nil {
		t.InputSchema = map[string]any{"type": "object"}
	}
	s.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if tx, ok := txtool.From[T](ctx); ok {
			return handler(ctx, tx, req)
		}
		var res *mcp.CallToolResult
		err := runner.InTx(ctx, func(ctx context.Context, tx T) error {
			var err error
			res, err = handler(ctx, tx, req)
			return err
		})
		return res, err
	})
}
