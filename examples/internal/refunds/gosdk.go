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
	refund := func(ctx context.Context, q querier, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in issueRefundIn
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.OrderID == "" || in.AmountCents < 1 {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
				Text: "issue_refund needs order_id, a string such as ord_1001, and amount_cents, a positive integer. Nothing was refunded."}}}, nil
		}
		sessionID := ""
		if req.Session != nil {
			sessionID = req.Session.ID()
		}
		res, _, err := gosdkResult(t.issueRefund(ctx, q, in.OrderID, in.AmountCents, sessionID))
		return res, err
	}
	tool := &mcp.Tool{Name: ToolIssueRefund, Description: issueRefundDescription, InputSchema: schema}
	switch mode {
	case txSQLite:
		// The transactional handler form: the refund row, the claim and
		// the recorded outcome commit together.
		gosdk.AddTxTool(s, g.Store().(*sqlitestore.Store), tool, func(ctx context.Context, tx *sql.Tx, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return refund(ctx, sqlQ{db: tx}, req)
		})
	case txPostgres:
		gosdk.AddTxTool(s, g.Store().(*pgstore.Store), tool, func(ctx context.Context, tx pgx.Tx, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return refund(ctx, pgQ{db: tx}, req)
		})
	default:
		s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
			err = t.db.inTx(ctx, func(ctx context.Context, q querier) error {
				res, err = refund(ctx, q, req)
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
