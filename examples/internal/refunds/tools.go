package refunds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
)

// Tool names.
const (
	ToolIssueRefund  = "issue_refund"
	ToolRefundStatus = "get_refund_status"
	ToolLookupOrder  = "lookup_order"
)

// Descriptions shared by both SDKs' tool definitions.
const (
	issueRefundDescription = "Refunds part or all of an order to the customer's original payment method. " +
		"Each successful call moves money: call it once per refund the customer asked for."
	refundStatusDescription = "Lists the refunds already written for an order. Use it to check whether an issue_refund call went through."
	lookupOrderDescription  = "Returns an order: customer, total, payment gateway and how much was refunded already."
	orderIDDescription      = "The order, for example ord_1001."
	amountDescription       = "The amount to refund, in cents: a positive integer."
)

// answer is a tool's result, independent of the SDK that sends it.
type answer struct {
	text       string
	structured any
	isError    bool
}

func toolError(format string, args ...any) answer {
	return answer{text: fmt.Sprintf(format, args...), isError: true}
}

// tools holds the handlers' dependencies.
type tools struct {
	db         *DB
	fast, slow time.Duration
}

// issueRefund refunds amount cents of an order through the fake payment
// gateway, for a call on session sessionID. It forwards idemkit's per-call
// idempotency key to the gateway (empty on a server without idemkit), as
// the seed article recommends: the Guard protects against duplicate tool
// calls, the gateway's key against the window between the claim and the
// commit. The arguments were validated against the tool's schema (amount: a
// positive integer) before the call was claimed.
func (t *tools) issueRefund(ctx context.Context, orderID string, amount int64, sessionID string) (answer, error) {
	order, err := t.db.Order(ctx, orderID)
	if err != nil {
		return notFoundOr(err, orderID)
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
	r, replayedByGateway, err := t.db.writeRefund(work, orderID, amount, gatewayKey, sessionID)
	if errors.Is(err, ErrOverRefund) {
		return toolError("Refund refused by the gateway: %v. Nothing was refunded.", err), nil
	}
	if err != nil {
		return answer{}, fmt.Errorf("issue_refund: gateway: %w", err)
	}
	instrument.RecordWrite(ctx, r.ID)
	text := fmt.Sprintf("Refunded %s on order %s (refund %s).", money(r.AmountCents), r.OrderID, r.ID)
	if replayedByGateway {
		text += " The payment gateway recognised the idempotency key and returned the refund it had already made."
	}
	return answer{text: text, structured: map[string]any{
		"refund_id":    r.ID,
		"order_id":     r.OrderID,
		"amount_cents": r.AmountCents,
		"status":       "succeeded",
	}}, nil
}

func (t *tools) refundStatus(ctx context.Context, orderID string) (answer, error) {
	if _, err := t.db.Order(ctx, orderID); err != nil {
		return notFoundOr(err, orderID)
	}
	list, err := t.db.Refunds(ctx, orderID)
	if err != nil {
		return answer{}, err
	}
	text := fmt.Sprintf("Order %s has %d refund(s).", orderID, len(list))
	for _, r := range list {
		text += fmt.Sprintf(" %s: %s.", r.ID, money(r.AmountCents))
	}
	return answer{text: text, structured: map[string]any{"order_id": orderID, "refunds": list}}, nil
}

func (t *tools) lookupOrder(ctx context.Context, orderID string) (answer, error) {
	o, err := t.db.Order(ctx, orderID)
	if err != nil {
		return notFoundOr(err, orderID)
	}
	text := fmt.Sprintf("Order %s: %s paid by %s via %s, %s refunded so far.", o.ID, money(o.TotalCents), o.Customer, o.Gateway, money(o.RefundedCts))
	return answer{text: text, structured: o}, nil
}

func notFoundOr(err error, orderID string) (answer, error) {
	if errors.Is(err, ErrNoOrder) {
		return toolError("There is no order %s. Check the order ID.", orderID), nil
	}
	return answer{}, err
}

func money(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }
