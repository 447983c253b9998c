package refunds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
)

// Tool names.
const (
	ToolIssueRefund   = "issue_refund"
	ToolRefundStatus  = "get_refund_status"
	ToolLookupOrder   = "lookup_order"
	ToolExportRefunds = "export_refunds"
)

// Descriptions shared by both SDKs' tool definitions.
const (
	issueRefundDescription = "Refunds part or all of an order to the customer's original payment method. " +
		"Each successful call moves money: call it once per refund the customer asked for."
	refundStatusDescription = "Lists the refunds already written for an order. Use it to check whether an issue_refund call went through."
	lookupOrderDescription  = "Returns an order: customer, total, payment gateway and how much was refunded already."
	exportDescription       = "Exports the refunds of an order to the accounting system, as a report. It takes a while."
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
	gw         *Gateway
	fast, slow time.Duration
	export     time.Duration // how long an export takes
	holdFile   string        // see Config.HoldAfterWrite
}

// issueRefund refunds amount cents of an order through the fake payment
// gateway, for a call on session sessionID, and writes the refund row
// through q: the transaction that also holds the call's idempotency claim
// and records its outcome (the transactional handler form), so that the
// row and the claim commit together or not at all. It forwards idemkit's
// per-call idempotency key to the gateway (empty on a server without
// idemkit), as the seed article recommends: the claim protects against
// duplicate tool calls, the gateway's key against the window between the
// gateway's refund and the commit (a process killed there leaves neither
// row nor claim; the duplicate then runs once more, and the gateway answers
// it with the refund it made). The arguments were validated against the
// tool's schema (amount: a positive integer) before the call was claimed.
func (t *tools) issueRefund(ctx context.Context, q querier, orderID string, amount int64, sessionID string) (answer, error) {
	gatewayKey := idemkit.CallFromContext(ctx).IdempotencyKey()
	if gatewayKey != "" {
		// The desk's rows are keyed too: a row written under this key by
		// an attempt whose outcome was not recorded (possible only where
		// the claim is not in the row's transaction: the memory store) is
		// the refund.
		var r Refund
		var created int64
		err := q.row(ctx, `SELECT id, order_id, amount_cents, COALESCE(gateway_key, ''), gateway_ref, session_id, created_at FROM refunds WHERE gateway_key = ?`, gatewayKey).
			Scan(&r.ID, &r.OrderID, &r.AmountCents, &r.GatewayKey, &r.GatewayRef, &r.SessionID, &created)
		if err == nil {
			instrument.RecordWrite(ctx, r.ID)
			return refunded(r, true), nil
		}
		if !errors.Is(err, sql.ErrNoRows) && !errors.Is(err, pgx.ErrNoRows) {
			return answer{}, err
		}
	}
	order, err := checkRefund(ctx, q, orderID, amount)
	switch {
	case errors.Is(err, ErrNoOrder):
		return toolError("There is no order %s. Check the order ID.", orderID), nil
	case errors.Is(err, ErrOverRefund):
		return toolError("Refund refused by the gateway: %v. Nothing was refunded.", err), nil
	case err != nil:
		return answer{}, err
	}
	latency := t.fast
	if order.Gateway == SlowGateway {
		latency = t.slow
	}
	// The gateway's latency. A cancelled task stops here, before the
	// gateway (a plain call's context is not cancelled by its client
	// hanging up: see mcpgo.AddTxTool).
	select {
	case <-ctx.Done():
		return answer{}, fmt.Errorf("issue_refund: stopped before the gateway was called: %w", context.Cause(ctx))
	case <-time.After(latency):
	}
	// The gateway is an external service: its refund does not roll back
	// with the desk's transaction; its idempotency key deduplicates it.
	ref, replayedByGateway, err := t.gw.Refund(context.WithoutCancel(ctx), gatewayKey, orderID, amount)
	if err != nil {
		return answer{}, fmt.Errorf("issue_refund: gateway: %w", err)
	}
	r := Refund{ID: newRefundID(), OrderID: orderID, AmountCents: amount, GatewayKey: gatewayKey, GatewayRef: ref, SessionID: sessionID, CreatedAt: time.Now()}
	if err := insertRefund(ctx, q, r); err != nil {
		return answer{}, fmt.Errorf("issue_refund: write the refund: %w", err)
	}
	if t.holdFile != "" {
		// Fault injection for the crash tests: the row is written, the
		// transaction not committed; stay here until the process is killed.
		if err := os.WriteFile(t.holdFile, []byte(r.ID), 0o644); err != nil {
			return answer{}, err
		}
		<-ctx.Done()
		return answer{}, ctx.Err()
	}
	instrument.RecordWrite(ctx, r.ID)
	return refunded(r, replayedByGateway), nil
}

// refunded is issue_refund's answer for refund r.
func refunded(r Refund, replayedByGateway bool) answer {
	text := fmt.Sprintf("Refunded %s on order %s (refund %s).", money(r.AmountCents), r.OrderID, r.ID)
	if replayedByGateway {
		text += " The payment gateway recognised the idempotency key and returned the refund it had already made."
	}
	return answer{text: text, structured: map[string]any{
		"refund_id":    r.ID,
		"order_id":     r.OrderID,
		"amount_cents": r.AmountCents,
		"status":       "succeeded",
	}}
}

// exportRefunds is the export_refunds job's work: it reports its progress
// for the export's duration, then records the export (its side effect).
func (t *tools) exportRefunds(ctx context.Context, orderID string) (answer, error) {
	if _, err := t.db.Order(ctx, orderID); err != nil {
		return notFoundOr(err, orderID)
	}
	const steps = 4
	for i := range steps {
		if err := instrument.Progress(ctx, float64(i), steps, "exporting the refunds of "+orderID); err != nil {
			return answer{}, err
		}
		select {
		case <-ctx.Done():
			return answer{}, ctx.Err()
		case <-time.After(t.export / steps):
		}
	}
	list, err := t.db.Refunds(ctx, orderID)
	if err != nil {
		return answer{}, err
	}
	id, err := t.db.addExport(ctx, orderID, len(list))
	if err != nil {
		return answer{}, err
	}
	instrument.RecordWrite(ctx, id)
	return answer{text: fmt.Sprintf("Exported the %d refund(s) of order %s to accounting (export %s).", len(list), orderID, id),
		structured: map[string]any{"export_id": id, "order_id": orderID, "refunds": len(list)}}, nil
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
