package refunds

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument/gosdk"
	idemjobs "github.com/idemkit-mcp/idemkit/instrument/jobs"
)

// The refund desk's tools for the official Go SDK: the same names,
// schemas and answers as the mcp-go ones.

type issueRefundIn struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

type orderIn struct {
	OrderID string `json:"order_id"`
}

func orderSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:       "object",
		Properties: map[string]*jsonschema.Schema{"order_id": {Type: "string", Description: orderIDDescription}},
		Required:   []string{"order_id"},
	}
}

func addGoSDKTools(s *mcp.Server, t *tools, mode txMode, g *idemkit.Guard, jobs *idemjobs.Runner) {
	one := 1.0
	f := false
	schema := orderSchema()
	schema.Properties["amount_cents"] = &jsonschema.Schema{Type: "integer", Minimum: &one, Description: amountDescription}
	schema.Required = append(schema.Required, "amount_cents")
	// args reads issue_refund's arguments; bad is the answer to a call
	// that lacks them.
	args := func(req *mcp.CallToolRequest) (orderID string, amount int64, sessionID string, bad *answer) {
		var in issueRefundIn
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.OrderID == "" || in.AmountCents < 1 {
			a := toolError("issue_refund needs order_id, a string such as ord_1001, and amount_cents, a positive integer. Nothing was refunded.")
			return "", 0, "", &a
		}
		if req.Session != nil {
			sessionID = req.Session.ID()
		}
		return in.OrderID, in.AmountCents, sessionID, nil
	}
	external := func(ctx context.Context, req *mcp.CallToolRequest) (payment, error) {
		orderID, amount, _, bad := args(req)
		if bad != nil {
			return payment{refusal: bad}, nil
		}
		return t.refundExternal(ctx, orderID, amount)
	}
	local := func(ctx context.Context, q querier, req *mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
		orderID, amount, sessionID, _ := args(req)
		res, _, err := gosdkResult(t.refundLocal(ctx, q, orderID, amount, sessionID, p))
		return res, err
	}
	tool := &mcp.Tool{Name: ToolIssueRefund, Description: issueRefundDescription, InputSchema: schema}
	switch mode {
	case txSQLite:
		// The phased handler form: the claim commits, the payment runs
		// outside any transaction, then the refund row and the recorded
		// outcome commit together.
		gosdk.AddPhasedTool(s, g.Store().(*sqlitestore.Store), tool, external,
			func(ctx context.Context, tx *sql.Tx, req *mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
				return local(ctx, t.db.txQ(tx), req, p)
			})
	case txPostgres:
		gosdk.AddPhasedTool(s, g.Store().(*pgstore.Store), tool, external,
			func(ctx context.Context, tx pgx.Tx, req *mcp.CallToolRequest, p payment) (*mcp.CallToolResult, error) {
				return local(ctx, pgQ{db: tx}, req, p)
			})
	default:
		s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
			// A refund that has reached the gateway is not abandoned
			// because the caller hung up (nor is mcp-go's own task of it,
			// whose context ends with its request).
			ctx = context.WithoutCancel(ctx)
			p, err := external(ctx, req)
			if err != nil {
				return nil, err
			}
			if p.refusal != nil {
				res, _, err := gosdkResult(*p.refusal, nil)
				return res, err
			}
			err = t.db.inTx(ctx, func(ctx context.Context, q querier) error {
				res, err = local(ctx, q, req, p)
				return err
			})
			return res, err
		})
	}
	read := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f}
	mcp.AddTool(s, &mcp.Tool{Name: ToolRefundStatus, Description: refundStatusDescription, InputSchema: orderSchema(), Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, any, error) {
			return gosdkResult(t.refundStatus(ctx, in.OrderID))
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolLookupOrder, Description: lookupOrderDescription, InputSchema: orderSchema(), Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, any, error) {
			return gosdkResult(t.lookupOrder(ctx, in.OrderID))
		})
	if jobs != nil {
		gosdk.AddJobTool(s, jobs, &mcp.Tool{Name: ToolExportRefunds, Description: exportDescription, InputSchema: orderSchema()},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var in orderIn
				_ = json.Unmarshal(req.Params.Arguments, &in)
				res, _, err := gosdkResult(t.exportRefunds(ctx, in.OrderID))
				return res, err
			})
	}
}

func gosdkResult(a answer, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return nil, nil, err
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.text}}, IsError: a.isError}
	if !a.isError {
		res.StructuredContent = jsonValue(a.structured)
	}
	return res, nil, nil
}
