package refunds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
)

// Tool names.
const (
	ToolIssueRefund  = "issue_refund"
	ToolRefundStatus = "get_refund_status"
	ToolLookupOrder  = "lookup_order"
)

// tools holds the handlers' dependencies.
type tools struct {
	db         *DB
	fast, slow time.Duration
}

// issueRefundTool is the one non-idempotent write: unannotated, so the MCP
// defaults (readOnly false, destructive true, idempotent false) apply and
// idemkit protects it.
func issueRefundTool() mcp.Tool {
	return mcp.NewTool(ToolIssueRefund,
		mcp.WithDescription("Refunds part or all of an order to the customer's original payment method. "+
			"Each successful call moves money: call it once per refund the customer asked for."),
		mcp.WithString("order_id", mcp.Required(), mcp.Description("The order to refund, for example ord_1001.")),
		mcp.WithInteger("amount_cents", mcp.Required(), mcp.Min(1), mcp.Description("The amount to refund, in cents.")),
	)
}

func refundStatusTool() mcp.Tool {
	return mcp.NewTool(ToolRefundStatus,
		mcp.WithDescription("Lists the refunds already written for an order. Use it to check whether an issue_refund call went through."),
		mcp.WithString("order_id", mcp.Required(), mcp.Description("The order to look at.")),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
	)
}

func lookupOrderTool() mcp.Tool {
	return mcp.NewTool(ToolLookupOrder,
		mcp.WithDescription("Returns an order: customer, total, payment gateway and how much was refunded already."),
		mcp.WithString("order_id", mcp.Required(), mcp.Description("The order to look up.")),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
	)
}

// issueRefund refunds an order through the fake payment gateway. It
// forwards idemkit's per-call idempotency key to the gateway (empty on a
// server without idemkit), as the seed article recommends: the Guard
// protects against duplicate tool calls, the gateway's key against the
// window between the claim and the commit.
func (t *tools) issueRefund(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	orderID, err := req.RequireString("order_id")
	if err != nil {
		return mcp.NewToolResultError("issue_refund needs order_id, a string such as ord_1001. Nothing was refunded."), nil
	}
	amount, err := req.RequireInt("amount_cents")
	if err != nil || amount <= 0 {
		return mcp.NewToolResultError("issue_refund needs amount_cents, a positive integer. Nothing was refunded."), nil
	}
	order, err := t.db.Order(ctx, orderID)
	if err != nil {
		return notFoundOr(err, orderID)
	}
	sessionID := ""
	if s := server.ClientSessionFromContext(ctx); s != nil {
		sessionID = s.SessionID()
	}
	gatewayKey := idemkit.CallFromContext(ctx).IdempotencyKey()

	// A refund that has reached the gateway is not abandoned because the
	// caller hung up: the gateway call and the write run detached from the
	// request's cancellation, as they would at a real payment provider.
	work := context.WithoutCancel(ctx)
	latency := t.fast
	if order.Gateway == SlowGateway {
		latency = t.slow
	}
	time.Sleep(latency)
	r, replayedByGateway, err := t.db.writeRefund(work, orderID, int64(amount), gatewayKey, sessionID)
	if errors.Is(err, ErrOverRefund) {
		return mcp.NewToolResultError(fmt.Sprintf("Refund refused by the gateway: %v. Nothing was refunded.", err)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("issue_refund: gateway: %w", err)
	}
	instrument.RecordWrite(ctx, r.ID)
	text := fmt.Sprintf("Refunded %s on order %s (refund %s).", money(r.AmountCents), r.OrderID, r.ID)
	if replayedByGateway {
		text += " The payment gateway recognised the idempotency key and returned the refund it had already made."
	}
	return mcp.NewToolResultStructured(map[string]any{
		"refund_id":    r.ID,
		"order_id":     r.OrderID,
		"amount_cents": r.AmountCents,
		"status":       "succeeded",
	}, text), nil
}

func (t *tools) refundStatus(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	orderID, err := req.RequireString("order_id")
	if err != nil {
		return mcp.NewToolResultError("get_refund_status needs order_id."), nil
	}
	if _, err := t.db.Order(ctx, orderID); err != nil {
		return notFoundOr(err, orderID)
	}
	list, err := t.db.Refunds(ctx, orderID)
	if err != nil {
		return nil, err
	}
	text := fmt.Sprintf("Order %s has %d refund(s).", orderID, len(list))
	for _, r := range list {
		text += fmt.Sprintf(" %s: %s.", r.ID, money(r.AmountCents))
	}
	return mcp.NewToolResultStructured(map[string]any{"order_id": orderID, "refunds": list}, text), nil
}

func (t *tools) lookupOrder(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	orderID, err := req.RequireString("order_id")
	if err != nil {
		return mcp.NewToolResultError("lookup_order needs order_id."), nil
	}
	o, err := t.db.Order(ctx, orderID)
	if err != nil {
		return notFoundOr(err, orderID)
	}
	text := fmt.Sprintf("Order %s: %s paid by %s via %s, %s refunded so far.", o.ID, money(o.TotalCents), o.Customer, o.Gateway, money(o.RefundedCts))
	return mcp.NewToolResultStructured(o, text), nil
}

func notFoundOr(err error, orderID string) (*mcp.CallToolResult, error) {
	if errors.Is(err, ErrNoOrder) {
		return mcp.NewToolResultError(fmt.Sprintf("There is no order %s. Check the order ID.", orderID)), nil
	}
	return nil, err
}

func money(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }
