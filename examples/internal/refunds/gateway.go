package refunds

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Gateway is the fake payment gateway: an external service the refund
// desk calls to move the money, with a ledger of its own (a SQLite file
// standing for the provider's database, outside the desk's transactions).
// It deduplicates refunds by the idempotency key the desk forwards, as
// Stripe's Idempotency-Key does: idemkit protects the tool call, the key
// protects the window between the gateway's refund and the desk's commit.
type Gateway struct {
	db *sql.DB
}

const gatewaySchema = `
CREATE TABLE IF NOT EXISTS gateway_refunds (
	ref          TEXT PRIMARY KEY,
	idem_key     TEXT UNIQUE,              -- NULL: a request without a key, never deduplicated
	order_id     TEXT NOT NULL,
	amount_cents INTEGER NOT NULL,
	created_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_refunds_order ON gateway_refunds(order_id);`

// OpenGateway opens (creating it when new) the gateway's ledger at path, a
// SQLite file, or in memory for ":memory:".
func OpenGateway(ctx context.Context, path string) (*Gateway, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("refunds: open the gateway ledger %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if _, err := db.ExecContext(ctx, gatewaySchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("refunds: create the gateway ledger in %s: %w", path, err)
	}
	return &Gateway{db: db}, nil
}

// Close closes the ledger.
func (g *Gateway) Close() error { return g.db.Close() }

// ErrChargeRefunded is the gateway's refusal of a refund over what is left
// of the charge (a provider refuses it, as Stripe does): nothing moved.
var ErrChargeRefunded = errors.New("the refund exceeds what is left of the charge")

// Refund moves amount cents back to the customer of orderID, whose charge
// was charged cents, and returns the gateway's refund reference. A request
// with the key of an earlier one (non-empty) is answered with that one's
// reference, and replayed is true: nothing is refunded twice. A refund
// that would take the order's refunds over the charge is refused with an
// error matching ErrChargeRefunded: the gateway, which holds the money,
// is what guarantees that, since the desk checks before it pays without
// holding a lock.
func (g *Gateway) Refund(ctx context.Context, key, orderID string, amount, charged int64) (ref string, replayed bool, err error) {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback()
	if key != "" {
		err := tx.QueryRowContext(ctx, `SELECT ref FROM gateway_refunds WHERE idem_key = ?`, key).Scan(&ref)
		if err == nil {
			return ref, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", false, err
		}
	}
	var refunded int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(amount_cents), 0) FROM gateway_refunds WHERE order_id = ?`, orderID).Scan(&refunded); err != nil {
		return "", false, err
	}
	if refunded+amount > charged {
		return "", false, fmt.Errorf("%w: %d of %d cents left on %s", ErrChargeRefunded, charged-refunded, charged, orderID)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	ref = "gw_" + hex.EncodeToString(b[:])
	var k any
	if key != "" {
		k = key
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gateway_refunds (ref, idem_key, order_id, amount_cents, created_at) VALUES (?, ?, ?, ?, ?)`,
		ref, k, orderID, amount, time.Now().UnixNano()); err != nil {
		return "", false, err
	}
	return ref, false, tx.Commit()
}

// Refunds returns how many refunds the gateway made for orderID ("" for
// all orders): the money that really moved.
func (g *Gateway) Refunds(ctx context.Context, orderID string) (int, error) {
	var n int
	err := g.db.QueryRowContext(ctx, `SELECT count(*) FROM gateway_refunds WHERE order_id = ? OR ? = ''`, orderID, orderID).Scan(&n)
	return n, err
}
