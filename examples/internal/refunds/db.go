package refunds

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// Gateways a seeded order can be paid through. The fake payment gateway
// answers a refund of a SlowGateway order after Config.SlowLatency, the
// others after Config.FastLatency.
const (
	FastGateway = "fastpay"
	SlowGateway = "slowpay"
)

// Order is one row of the orders table.
type Order struct {
	ID          string `json:"order_id"`
	Customer    string `json:"customer"`
	TotalCents  int64  `json:"total_cents"`
	Gateway     string `json:"gateway"`
	RefundedCts int64  `json:"refunded_cents"`
}

// Refund is one row of the refunds table: the side effect of issue_refund.
type Refund struct {
	ID          string    `json:"refund_id"`
	OrderID     string    `json:"order_id"`
	AmountCents int64     `json:"amount_cents"`
	GatewayKey  string    `json:"gateway_key,omitempty"`
	SessionID   string    `json:"session_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// DB is the refund desk's own database: the orders it sells and the refunds
// written against them. It is a separate SQLite file from the idemkit store,
// standing for the system of record a real refund tool writes to.
type DB struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS orders (
	id          TEXT PRIMARY KEY,
	customer    TEXT NOT NULL,
	total_cents INTEGER NOT NULL,
	gateway     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refunds (
	id           TEXT PRIMARY KEY,
	order_id     TEXT NOT NULL REFERENCES orders(id),
	amount_cents INTEGER NOT NULL,
	-- The idempotency key forwarded to the payment gateway. NULL when the
	-- caller had none (a server without idemkit): the gateway cannot
	-- deduplicate such refunds.
	gateway_key  TEXT UNIQUE,
	session_id   TEXT NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order ON refunds(order_id);
`

// SeedOrders are the orders every new database holds: ord_1001 to ord_1016,
// each of 100.00 with customer alice; every fourth one is paid through the
// slow gateway.
func SeedOrders() []Order {
	out := make([]Order, 0, 16)
	for i := 1; i <= 16; i++ {
		gw := FastGateway
		if i%4 == 0 {
			gw = SlowGateway
		}
		out = append(out, Order{ID: fmt.Sprintf("ord_%d", 1000+i), Customer: "alice", TotalCents: 10000, Gateway: gw})
	}
	return out
}

// OpenDB opens (creating and seeding when new) the orders database at path,
// or an in-memory one for ":memory:".
func OpenDB(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("refunds: OpenDB needs a path")
	}
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	dsn := ":memory:?" + q.Encode()
	if path != ":memory:" {
		q.Set("_journal_mode", "WAL")
		dsn = "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) + "?" + q.Encode()
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("refunds: open %s: %w", path, err)
	}
	// One writer at a time is all SQLite does; one connection also keeps a
	// ":memory:" database alive.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("refunds: create schema in %s: %w", path, err)
	}
	for _, o := range SeedOrders() {
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, customer, total_cents, gateway) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
			o.ID, o.Customer, o.TotalCents, o.Gateway); err != nil {
			db.Close()
			return nil, fmt.Errorf("refunds: seed orders in %s: %w", path, err)
		}
	}
	return &DB{db: db}, nil
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// ErrNoOrder is returned for an order ID that is not in the orders table.
var ErrNoOrder = errors.New("no such order")

// ErrOverRefund is returned when a refund would take an order's refunds
// above its total.
var ErrOverRefund = errors.New("refund exceeds the amount left to refund")

// Order returns an order with the sum of its refunds.
func (d *DB) Order(ctx context.Context, id string) (Order, error) {
	var o Order
	err := d.db.QueryRowContext(ctx, `SELECT o.id, o.customer, o.total_cents, o.gateway,
		COALESCE((SELECT SUM(amount_cents) FROM refunds r WHERE r.order_id = o.id), 0)
		FROM orders o WHERE o.id = ?`, id).Scan(&o.ID, &o.Customer, &o.TotalCents, &o.Gateway, &o.RefundedCts)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: %s", ErrNoOrder, id)
	}
	return o, err
}

// Refunds returns the refunds of an order ("" for all), oldest first.
func (d *DB) Refunds(ctx context.Context, orderID string) ([]Refund, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT id, order_id, amount_cents, COALESCE(gateway_key, ''), session_id, created_at
		FROM refunds WHERE ? = '' OR order_id = ? ORDER BY created_at, id`, orderID, orderID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Refund
	for rows.Next() {
		var r Refund
		var created int64
		if err := rows.Scan(&r.ID, &r.OrderID, &r.AmountCents, &r.GatewayKey, &r.SessionID, &created); err != nil {
			return nil, err
		}
		r.CreatedAt = time.Unix(0, created)
		out = append(out, r)
	}
	return out, rows.Err()
}

// writeRefund is the payment gateway's commit: it inserts a refund, unless
// a refund with the same non-empty gateway key exists, in which case it
// returns that one (the gateway replays its own idempotent requests, like
// Stripe's Idempotency-Key). existing reports the replay.
func (d *DB) writeRefund(ctx context.Context, orderID string, amount int64, gatewayKey, sessionID string) (r Refund, existing bool, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return Refund{}, false, err
	}
	defer tx.Rollback()
	if gatewayKey != "" {
		var created int64
		err := tx.QueryRowContext(ctx, `SELECT id, order_id, amount_cents, gateway_key, session_id, created_at FROM refunds WHERE gateway_key = ?`, gatewayKey).
			Scan(&r.ID, &r.OrderID, &r.AmountCents, &r.GatewayKey, &r.SessionID, &created)
		if err == nil {
			r.CreatedAt = time.Unix(0, created)
			return r, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Refund{}, false, err
		}
	}
	var total, refunded int64
	err = tx.QueryRowContext(ctx, `SELECT total_cents, COALESCE((SELECT SUM(amount_cents) FROM refunds WHERE order_id = ?), 0) FROM orders WHERE id = ?`,
		orderID, orderID).Scan(&total, &refunded)
	if errors.Is(err, sql.ErrNoRows) {
		return Refund{}, false, fmt.Errorf("%w: %s", ErrNoOrder, orderID)
	}
	if err != nil {
		return Refund{}, false, err
	}
	if refunded+amount > total {
		return Refund{}, false, fmt.Errorf("%w: %s has %d of %d cents left", ErrOverRefund, orderID, total-refunded, total)
	}
	r = Refund{ID: newRefundID(), OrderID: orderID, AmountCents: amount, GatewayKey: gatewayKey, SessionID: sessionID, CreatedAt: time.Now()}
	var key any
	if gatewayKey != "" {
		key = gatewayKey
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (id, order_id, amount_cents, gateway_key, session_id, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		r.ID, r.OrderID, r.AmountCents, key, r.SessionID, r.CreatedAt.UnixNano()); err != nil {
		return Refund{}, false, err
	}
	return r, false, tx.Commit()
}

func newRefundID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "re_" + hex.EncodeToString(b[:])
}
