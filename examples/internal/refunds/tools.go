package refunds

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

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
	gw         *GatewayClient // the payment gateway, over HTTP
	fast, slow time.Duration
	export     time.Duration // how long an export takes
	holdFile   string        // see Config.HoldAfterWrite
	// holdAfterPayment: see Config.HoldAfterPayment.
	holdAfterPayment string
	beforePayment    func(ctx context.Context, orderID string) // see Config
}

// payment is what issue_refund's external phase hands to its local
// phase: the gateway's refund, or the answer to give instead.
type payment struct {
	// key is idemkit's per-call idempotency key, which the gateway
	// client's downstream.Transport forwards in Idempotency-Key ("" on a
	// server without idemkit: the request goes without one).
	key string
	// ref is the gateway's refund; replayed says that the gateway
	// recognised the key and returned the refund it had made before.
	ref      string
	replayed bool
	// existing is the refund row already written under key (see
	// refundExternal); the local phase answers with it.
	existing *Refund
	// refusal, when set, is the answer: nothing was refunded.
	refusal *answer
}

// refundExternal is issue_refund's external phase: it runs outside any
// database transaction, so that neither a slow payment nor a slow
// gateway holds anything another call or a read needs. It checks the
// order (a read of the last committed state), then refunds through the
// payment gateway's HTTP API, whose client (downstream.Transport) forwards
// idemkit's per-call downstream key in Idempotency-Key, as the seed
// article recommends: the claim protects against duplicate tool
// calls, the gateway's key against the window between the payment and the
// commit of the refund row (a process killed there leaves the call in
// progress without a row; after the lease, the duplicate that takes it
// over pays again with the same key, the gateway answers with the refund
// it made, and the row is written once). The arguments were validated
// against the tool's schema (amount: a positive integer) before the call
// was claimed.
func (t *tools) refundExternal(ctx context.Context, orderID string, amount int64) (payment, error) {
	p := payment{key: idemkit.CallFromContext(ctx).IdempotencyKey()}
	if p.key != "" {
		// The desk's rows are keyed too: a row written under this key by
		// an attempt whose outcome was not recorded (possible only where
		// the row does not commit with the outcome: the memory store, a
		// store in a file of its own) is the refund.
		r, ok, err := refundByKey(ctx, t.db.r(), p.key)
		if err != nil {
			return payment{}, err
		}
		if ok {
			p.existing = &r
			return p, nil
		}
	}
	order, err := checkRefund(ctx, t.db.r(), orderID, amount)
	switch {
	case errors.Is(err, ErrNoOrder):
		a := toolError("There is no order %s. Check the order ID.", orderID)
		p.refusal = &a
		return p, nil
	case errors.Is(err, ErrOverRefund):
		a := toolError("Refund refused by the gateway: %v. Nothing was refunded.", err)
		p.refusal = &a
		return p, nil
	case err != nil:
		return payment{}, err
	}
	if t.beforePayment != nil {
		t.beforePayment(ctx, orderID)
	}
	latency := t.fast
	if order.Gateway == SlowGateway {
		latency = t.slow
	}
	// The gateway's latency. A cancelled task stops here, before the
	// gateway (a plain call's context is not cancelled by its client
	// hanging up: see mcpgo.AddPhasedTool).
	select {
	case <-ctx.Done():
		return payment{}, fmt.Errorf("issue_refund: stopped before the gateway was called: %w", context.Cause(ctx))
	case <-time.After(latency):
	}
	// The request's context keeps the call (downstream.Transport reads
	// its key there) without its cancellation: a payment once sent is
	// waited for, bounded by the client's timeout.
	ref, replayed, err := t.gw.Refund(context.WithoutCancel(ctx), orderID, amount, order.TotalCents)
	if errors.Is(err, ErrChargeRefunded) || errors.Is(err, ErrKeyReused) {
		a := toolError("Refund refused by the gateway: %v. Nothing was refunded.", err)
		p.refusal = &a
		return p, nil
	}
	if err != nil {
		return payment{}, fmt.Errorf("issue_refund: gateway: %w", err)
	}
	p.ref, p.replayed = ref, replayed
	if t.holdAfterPayment != "" {
		// Fault injection for the crash tests: the gateway has refunded,
		// the row is not written; stay here until the process is killed.
		if err := os.WriteFile(t.holdAfterPayment, []byte(ref), 0o644); err != nil {
			return payment{}, err
		}
		<-ctx.Done()
		return payment{}, ctx.Err()
	}
	return p, nil
}

// refundLocal is issue_refund's local phase: it writes the refund row of
// payment p through q, a short transaction (with idemkit's SQL stores, the
// one in which the call's outcome is recorded, so that the row and the
// outcome commit together or not at all), and returns the tool's answer.
func (t *tools) refundLocal(ctx context.Context, q querier, orderID string, amount int64, sessionID string, p payment) (answer, error) {
	if p.refusal != nil {
		return *p.refusal, nil
	}
	if p.existing == nil && p.key != "" {
		// Committed since the external phase looked (by an attempt whose
		// lease ran out, where rows do not commit with outcomes).
		r, ok, err := refundByKey(ctx, q, p.key)
		if err != nil {
			return answer{}, err
		}
		if ok {
			p.existing = &r
		}
	}
	if p.existing != nil {
		instrument.RecordWrite(ctx, p.existing.ID)
		return refunded(*p.existing, true), nil
	}
	r := Refund{ID: newRefundID(), OrderID: orderID, AmountCents: amount, GatewayKey: p.key, GatewayRef: p.ref, SessionID: sessionID, CreatedAt: time.Now()}
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
	return refunded(r, p.replayed), nil
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
