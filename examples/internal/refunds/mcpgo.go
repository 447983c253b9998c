package refunds

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	idemjobs "github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
)

// The refund desk's tools for mcp-go.

// issueRefundTool is the one non-idempotent write: unannotated, so the MCP
// defaults (readOnly false, destructive true, idempotent false) apply and
// idemkit protects it. amount_cents is an integer: a retry that sends "100"
// or 12.5 is rejected before it is claimed, never run as a new refund.
func issueRefundTool() mcp.Tool {
	return mcp.NewTool(ToolIssueRefund,
		mcp.WithDescription(issueRefundDescription),
		mcp.WithString("order_id", mcp.Required(), mcp.Description(orderIDDescription)),
		mcp.WithInteger("amount_cents", mcp.Required(), mcp.Min(1), mcp.Description(amountDescription)),
		// A client may run it as an MCP task (task-augmented tools/call)
		// or call it plainly.
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
	)
}

func readTool(name, description string) mcp.Tool {
	return mcp.NewTool(name,
		mcp.WithDescription(description),
		mcp.WithString("order_id", mcp.Required(), mcp.Description(orderIDDescription)),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
	)
}

func addMCPGoTools(s *server.MCPServer, t *tools, mode txMode, g *idemkit.Guard, jobs *idemjobs.Runner) {
	// args reads issue_refund's arguments; bad is the answer to a call
	// that lacks them.
	args := func(ctx context.Context, req mcp.CallToolRequest) (orderID string, amount int64, sessionID string, bad *answer) {
		var in struct {
			OrderID     string  `json:"order_id"`
			AmountCents float64 `json:"amount_cents"`
		}
		if err := req.BindArguments(&in); err != nil || in.OrderID == "" ||
			in.AmountCents < 1 || in.AmountCents != math.Trunc(in.AmountCents) {
			// Reached only by servers that do not validate arguments
			// (without idemkit): say what is wrong rather than coerce.
			a := toolError("issue_refund needs order_id, a string such as ord_1001, and amount_cents, a positive integer. Nothing was refunded.")
			return "", 0, "", &a
		}
		if s := server.ClientSessionFromContext(ctx); s != nil {
			sessionID = s.SessionID()
		}
		return in.OrderID, int64(in.AmountCents), sessionID, nil
	}
	// The payment, outside any transaction.
	external := func(ctx context.Context, req mcp.CallToolRequest) (payment, error) {
		orderID, amount, _, bad := args(ctx, req)
		if bad != nil {
			return payment{refusal: bad}, nil
		}
		return t.refundExternal(ctx, orderID, amount)
	}
	// The refund row, in a short transaction.
	local := func(ctx context.Context, q querier, req mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
		orderID, amount, sessionID, _ := args(ctx, req)
		return mcpgoResult(t.refundLocal(ctx, q, orderID, amount, sessionID, p))
	}
	switch mode {
	case txSQLite:
		// The phased handler form: the claim commits, the payment runs
		// outside any transaction, then the refund row and the recorded
		// outcome commit together.
		mcpgo.AddPhasedTool(s, g.Store().(*sqlitestore.Store), issueRefundTool(), external,
			func(ctx context.Context, tx *sql.Tx, req mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
				return local(ctx, t.db.txQ(tx), req, p)
			})
	case txPostgres:
		mcpgo.AddPhasedTool(s, g.Store().(*pgstore.Store), issueRefundTool(), external,
			func(ctx context.Context, tx pgx.Tx, req mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
				return local(ctx, pgQ{db: tx}, req, p)
			})
	default:
		// The same two phases in the desk's own database: under the
		// Guard's plain claim (the outcome is recorded after the row
		// commits), or without idemkit.
		s.AddTool(issueRefundTool(), func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
			// A refund that has reached the gateway is not abandoned
			// because the caller hung up (nor is mcp-go's own task of it,
			// whose context ends with its request).
			ctx = context.WithoutCancel(ctx)
			p, err := external(ctx, req)
			if err != nil {
				return nil, err
			}
			if p.refusal != nil {
				return mcpgoResult(*p.refusal, nil)
			}
			err = t.db.inTx(ctx, func(ctx context.Context, q querier) error {
				res, err = local(ctx, q, req, p)
				return err
			})
			return res, err
		})
	}
	s.AddTool(readTool(ToolRefundStatus, refundStatusDescription), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcpgoResult(t.refundStatus(ctx, req.GetString("order_id", "")))
	})
	s.AddTool(readTool(ToolLookupOrder, lookupOrderDescription), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcpgoResult(t.lookupOrder(ctx, req.GetString("order_id", "")))
	})
	if jobs != nil {
		// A job-and-poll tool: export_refunds answers with a job ID at
		// once, export_refunds_status reports the job, from the Guard's
		// store (on any replica, after a restart).
		mcpgo.AddJobTool(s, jobs, mcp.NewTool(ToolExportRefunds,
			mcp.WithDescription(exportDescription),
			mcp.WithString("order_id", mcp.Required(), mcp.Description(orderIDDescription)),
		), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcpgoResult(t.exportRefunds(ctx, req.GetString("order_id", "")))
		})
	}
}

func mcpgoResult(a answer, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		return nil, err
	}
	if a.isError {
		return mcp.NewToolResultError(a.text), nil
	}
	return mcp.NewToolResultStructured(jsonValue(a.structured), a.text), nil
}

// jsonValue returns v as the generic JSON value both SDKs send.
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
