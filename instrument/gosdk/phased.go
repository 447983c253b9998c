package gosdk

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/internal/txtool"
)

// AddPhasedTool registers tool on s with a handler in two parts: external,
// which makes the tool's external call (a payment) outside any
// transaction, forwarding idemkit.CallFromContext(ctx).IdempotencyKey(),
// then local, which makes the tool's writes through tx, a short
// transaction of runner's store (a pgx.Tx from *pgstore.Store, a *sql.Tx
// from *sqlitestore.Store), in which the recorded outcome commits with
// them. See mcpgo.AddPhasedTool for the behaviour, which is the same, and
// for when to use it rather than AddTxTool: whenever the work waits on the
// network. Both parts read the arguments from req.Params.Arguments.
// runner's store must be the Guard's store, and s must be instrumented
// (Instrument or Install) before AddPhasedTool.
func AddPhasedTool[T, E any](s *mcp.Server, runner instrument.PhasedRunner[T], tool *mcp.Tool,
	external func(ctx context.Context, req *mcp.CallToolRequest) (E, error),
	local func(ctx context.Context, tx T, req *mcp.CallToolRequest, ext E) (*mcp.CallToolResult, error)) {
	if m, ok := servers.Load(s); ok {
		m.txTools.Store(tool.Name, txtool.Phased(runner))
		m.hasTx.Store(true)
	}
	t := *tool
	if t.InputSchema == nil {
		t.InputSchema = map[string]any{"type": "object"}
	}
	s.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
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
