package refunds

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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

// Refund is one row of the refunds table: the side effect of issue_refund,
// written by the refund desk in its own database.
type Refund struct {
	ID          string `json:"refund_id"`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	// GatewayKey is the idempotency key forwarded to the payment gateway
	// (empty without idemkit); GatewayRef the gateway's own refund ID.
	GatewayKey string    `json:"gateway_key,omitempty"`
	GatewayRef string    `json:"gateway_ref,omitempty"`
	SessionID  string    `json:"session_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// DB is the refund desk's own database: the orders it sells and the
// refunds written against them, in SQLite or PostgreSQL. With idemkit's
// SQLite or PostgreSQL store it is the store's database, so that a refund
// row commits in the transaction that records the call's outcome
// (mcpgo.AddPhasedTool, gosdk.AddPhasedTool).
//
// Its reads (lookup_order, get_refund_status, the check before a payment)
// never wait for a writer: on SQLite they run on a pool of read-only
// connections under WAL (the store's ReadDB, or OpenDB's own), on
// PostgreSQL on the pool, where nothing a read needs is locked.
type DB struct {
	sql   *sql.DB       // SQLite: the writer; nil on PostgreSQL
	read  *sql.DB       // SQLite: the read-only pool (sql itself for ":memory:")
	pg    *pgxpool.Pool // PostgreSQL; nil on SQLite
	owned bool          // Close closes sql and read

	// stmts are the statements of the desk's write transactions, prepared
	// on sql when the desk opens (query -> *sql.Stmt), so that SQLite does
	// not parse them while a transaction holds its write lock. (Preparing
	// one later could wait for the connection the transaction holds.)
	stmts map[string]*sql.Stmt
}

const sqliteSchema = `
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
	-- caller had none (a server without idemkit): nothing deduplicates such
	-- refunds. UNIQUE: one refund row per key, whatever happens.
	gateway_key  TEXT UNIQUE,
	gateway_ref  TEXT NOT NULL DEFAULT '',
	session_id   TEXT NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order ON refunds(order_id);
CREATE TABLE IF NOT EXISTS exports (
	id         TEXT PRIMARY KEY,
	order_id   TEXT NOT NULL,
	refunds    INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
`

const postgresSchema = `
CREATE TABLE IF NOT EXISTS orders (
	id          text PRIMARY KEY,
	customer    text NOT NULL,
	total_cents bigint NOT NULL,
	gateway     text NOT NULL
);
CREATE TABLE IF NOT EXISTS refunds (
	id           text PRIMARY KEY,
	order_id     text NOT NULL REFERENCES orders(id),
	amount_cents bigint NOT NULL,
	gateway_key  text UNIQUE,
	gateway_ref  text NOT NULL DEFAULT '',
	session_id   text NOT NULL DEFAULT '',
	created_at   bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order ON refunds(order_id);
CREATE TABLE IF NOT EXISTS exports (
	id         text PRIMARY KEY,
	order_id   text NOT NULL,
	refunds    bigint NOT NULL,
	created_at bigint NOT NULL
);
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

// sqliteDSN returns the DSN of the SQLite file at path (":memory:" for a
// database in memory).
func sqliteDSN(path string) string {
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	if path == ":memory:" {
		return ":memory:?" + q.Encode()
	}
	q.Set("_journal_mode", "WAL")
	return sqliteFile(path) + "?" + q.Encode()
}

func sqliteFile(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// readConns is the size of OpenDB's read-only pool.
const readConns = 4

// openReadPool opens read-only connections (PRAGMA query_only) on the WAL
// file at path: they read the last committed state without waiting for
// the writer.
func openReadPool(ctx context.Context, path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_query_only", "1")
	db, err := sql.Open("sqlite", sqliteFile(path)+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(readConns)
	db.SetMaxIdleConns(readConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// OpenDB opens (creating and seeding when new) the orders database at path,
// a SQLite file, or an in-memory one for ":memory:", on a connection pool of
// its own. (A server whose idemkit store is SQLite keeps the desk in the
// store's database instead: NewSQLiteDB.)
func OpenDB(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("refunds: OpenDB needs a path")
	}
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("refunds: open %s: %w", path, err)
	}
	// One writer at a time is all SQLite does; one connection also keeps a
	// ":memory:" database alive.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	d, err := NewSQLiteDB(ctx, db, nil)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("refunds: %s: %w", path, err)
	}
	d.owned = true
	if path != ":memory:" {
		// Opened after the writer made the file WAL.
		if d.read, err = openReadPool(ctx, path); err != nil {
			db.Close()
			return nil, fmt.Errorf("refunds: open the read pool of %s: %w", path, err)
		}
	}
	return d, nil
}

// NewSQLiteDB creates (when missing) and seeds the desk's tables in the
// SQLite database db (an idemkit sqlitestore.Store's DB(), so that refund
// rows commit with the outcomes of their calls), and returns the desk on
// it, reading through read (the store's ReadDB(); nil: db). Close closes
// neither.
func NewSQLiteDB(ctx context.Context, db, read *sql.DB) (*DB, error) {
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		return nil, fmt.Errorf("refunds: create the desk's schema: %w", err)
	}
	// A database made before gateway_ref existed.
	if _, err := db.ExecContext(ctx, `ALTER TABLE refunds ADD COLUMN gateway_ref TEXT NOT NULL DEFAULT ''`); err != nil &&
		!strings.Contains(err.Error(), "duplicate column") {
		return nil, fmt.Errorf("refunds: add refunds.gateway_ref: %w", err)
	}
	if read == nil {
		read = db
	}
	d := &DB{sql: db, read: read}
	if err := d.prepareWrites(ctx); err != nil {
		return nil, err
	}
	for _, o := range SeedOrders() {
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, customer, total_cents, gateway) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
			o.ID, o.Customer, o.TotalCents, o.Gateway); err != nil {
			return nil, fmt.Errorf("refunds: seed orders: %w", err)
		}
	}
	return d, nil
}

// NewPostgresDB creates (when missing) and seeds the desk's tables in the
// PostgreSQL database of pool (an idemkit pgstore.Store's), and returns the
// desk on it. Many replicas may call it at once. Close does not close pool.
func NewPostgresDB(ctx context.Context, pool *pgxpool.Pool) (*DB, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Replicas starting together create the schema one at a time.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7220551)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, postgresSchema); err != nil {
			return err
		}
		for _, o := range SeedOrders() {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents, gateway) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
				o.ID, o.Customer, o.TotalCents, o.Gateway); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("refunds: create the desk's schema in PostgreSQL: %w", err)
	}
	return &DB{pg: pool}, nil
}

// Close closes the database when OpenDB opened it (and the desk's
// prepared statements in any case).
func (d *DB) Close() error {
	for _, st := range d.stmts {
		_ = st.Close()
	}
	if !d.owned {
		return nil
	}
	err := d.sql.Close()
	if d.read != nil && d.read != d.sql {
		err = errors.Join(err, d.read.Close())
	}
	return err
}

// SQL returns the SQLite database, or nil on PostgreSQL.
func (d *DB) SQL() *sql.DB { return d.sql }

// Postgres returns the PostgreSQL pool, or nil on SQLite.
func (d *DB) Postgres() *pgxpool.Pool { return d.pg }

// ErrNoOrder is returned for an order ID that is not in the orders table.
var ErrNoOrder = errors.New("no such order")

// ErrOverRefund is returned when a refund would take an order's refunds
// above its total.
var ErrOverRefund = errors.New("refund exceeds the amount left to refund")

// querier runs the desk's statements on one backend: a connection pool, or
// one transaction. Statements are written with ? placeholders.
type querier interface {
	exec(ctx context.Context, q string, args ...any) error
	row(ctx context.Context, q string, args ...any) scanner
	query(ctx context.Context, q string, args ...any) (rows, error)
}

type scanner interface{ Scan(dest ...any) error }

type rows interface {
	scanner
	Next() bool
	Err() error
	Close()
}

// sqlQ runs statements on an *sql.DB or an *sql.Tx.
type sqlQ struct {
	db interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}
}

func (q sqlQ) exec(ctx context.Context, s string, args ...any) error {
	_, err := q.db.ExecContext(ctx, s, args...)
	return err
}
func (q sqlQ) row(ctx context.Context, s string, args ...any) scanner {
	return q.db.QueryRowContext(ctx, s, args...)
}
func (q sqlQ) query(ctx context.Context, s string, args ...any) (rows, error) {
	r, err := q.db.QueryContext(ctx, s, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

// sqlTxQ runs statements in tx, a write transaction on the desk's SQLite
// database, through statements prepared once.
type sqlTxQ struct {
	d  *DB
	tx *sql.Tx
}

// prepareWrites prepares the statements of the desk's write transactions.
func (d *DB) prepareWrites(ctx context.Context) error {
	d.stmts = map[string]*sql.Stmt{}
	for _, q := range []string{insertRefundSQL, refundByKeySQL} {
		st, err := d.sql.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("refunds: prepare %q: %w", q, err)
		}
		d.stmts[q] = st
	}
	return nil
}

// on returns the prepared statement of s in the transaction, or nil.
func (q sqlTxQ) on(ctx context.Context, s string) *sql.Stmt {
	if st := q.d.stmts[s]; st != nil {
		return q.tx.StmtContext(ctx, st)
	}
	return nil
}

func (q sqlTxQ) exec(ctx context.Context, s string, args ...any) error {
	var err error
	if st := q.on(ctx, s); st != nil {
		_, err = st.ExecContext(ctx, args...)
	} else {
		_, err = q.tx.ExecContext(ctx, s, args...)
	}
	return err
}

func (q sqlTxQ) row(ctx context.Context, s string, args ...any) scanner {
	if st := q.on(ctx, s); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.tx.QueryRowContext(ctx, s, args...)
}

func (q sqlTxQ) query(ctx context.Context, s string, args ...any) (rows, error) {
	return sqlQ{db: q.tx}.query(ctx, s, args...)
}

// txQ returns the querier of tx, a transaction on the desk's SQLite
// database (the store's, in the phased handler form).
func (d *DB) txQ(tx *sql.Tx) querier { return sqlTxQ{d: d, tx: tx} }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// pgQ runs statements on a pool or a pgx.Tx, with $n placeholders.
type pgQ struct {
	db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		QueryRow(context.Context, string, ...any) pgx.Row
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}
}

func (q pgQ) exec(ctx context.Context, s string, args ...any) error {
	_, err := q.db.Exec(ctx, dollars(s), args...)
	return err
}
func (q pgQ) row(ctx context.Context, s string, args ...any) scanner {
	return q.db.QueryRow(ctx, dollars(s), args...)
}
func (q pgQ) query(ctx context.Context, s string, args ...any) (rows, error) {
	return q.db.Query(ctx, dollars(s), args...)
}

// dollars numbers a statement's ? placeholders for PostgreSQL.
func dollars(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// q returns the querier of the desk's pool (its writer on SQLite).
func (d *DB) q() querier {
	if d.pg != nil {
		return pgQ{db: d.pg}
	}
	return sqlQ{db: d.sql}
}

// r returns the querier of the desk's reads: on SQLite its read-only pool.
func (d *DB) r() querier {
	if d.pg != nil {
		return pgQ{db: d.pg}
	}
	return sqlQ{db: d.read}
}

// Order returns an order with the sum of its refunds, as last committed.
func (d *DB) Order(ctx context.Context, id string) (Order, error) {
	return order(ctx, d.r(), id)
}

func order(ctx context.Context, q querier, id string) (Order, error) {
	var o Order
	err := q.row(ctx, `SELECT o.id, o.customer, o.total_cents, o.gateway FROM orders o WHERE o.id = ?`, id).
		Scan(&o.ID, &o.Customer, &o.TotalCents, &o.Gateway)
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: %s", ErrNoOrder, id)
	}
	if err != nil {
		return Order{}, err
	}
	err = q.row(ctx, `SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = ?`, id).Scan(&o.RefundedCts)
	return o, err
}

// Refunds returns the refunds of an order ("" for all), oldest first, as
// last committed.
func (d *DB) Refunds(ctx context.Context, orderID string) ([]Refund, error) {
	const columns = `SELECT id, order_id, amount_cents, COALESCE(gateway_key, ''), gateway_ref, session_id, created_at FROM refunds `
	var (
		rs  rows
		err error
	)
	if orderID == "" {
		rs, err = d.r().query(ctx, columns+`ORDER BY created_at, id`)
	} else {
		// Through the order's index, whatever the table's size.
		rs, err = d.r().query(ctx, columns+`WHERE order_id = ? ORDER BY created_at, id`, orderID)
	}
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Refund
	for rs.Next() {
		var r Refund
		var created int64
		if err := rs.Scan(&r.ID, &r.OrderID, &r.AmountCents, &r.GatewayKey, &r.GatewayRef, &r.SessionID, &created); err != nil {
			return nil, err
		}
		r.CreatedAt = time.Unix(0, created)
		out = append(out, r)
	}
	return out, rs.Err()
}

// checkRefund reads the order of a refund of amount cents, as last
// committed, and refuses a refund over what is left: the desk's early
// answer. The gateway, which holds the money, decides (it refuses a refund
// over what is left of the charge, in its own transaction).
func checkRefund(ctx context.Context, q querier, orderID string, amount int64) (Order, error) {
	o, err := order(ctx, q, orderID)
	if err != nil {
		return Order{}, err
	}
	if o.RefundedCts+amount > o.TotalCents {
		return Order{}, fmt.Errorf("%w: %s has %d of %d cents left", ErrOverRefund, orderID, o.TotalCents-o.RefundedCts, o.TotalCents)
	}
	return o, nil
}

// refundByKey returns the refund row written under the gateway key, if
// any.
func refundByKey(ctx context.Context, q querier, key string) (Refund, bool, error) {
	var r Refund
	var created int64
	err := q.row(ctx, refundByKeySQL, key).
		Scan(&r.ID, &r.OrderID, &r.AmountCents, &r.GatewayKey, &r.GatewayRef, &r.SessionID, &created)
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, false, nil
	}
	r.CreatedAt = time.Unix(0, created)
	return r, err == nil, err
}

// insertRefund writes a refund row.
func insertRefund(ctx context.Context, q querier, r Refund) error {
	var key any
	if r.GatewayKey != "" {
		key = r.GatewayKey
	}
	return q.exec(ctx, insertRefundSQL, r.ID, r.OrderID, r.AmountCents, key, r.GatewayRef, r.SessionID, r.CreatedAt.UnixNano())
}

// The statements of the desk's write transactions.
const (
	insertRefundSQL = `INSERT INTO refunds (id, order_id, amount_cents, gateway_key, gateway_ref, session_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
	refundByKeySQL  = `SELECT id, order_id, amount_cents, COALESCE(gateway_key, ''), gateway_ref, session_id, created_at FROM refunds WHERE gateway_key = ?`
)

// inTx runs fn in a short transaction of the desk's own pool (a server
// whose store cannot share it: the memory store, a store in another file,
// or none). A refund that has reached the gateway is not abandoned because
// the caller hung up: the transaction is not bound to the request's
// cancellation, as the phased handler form's is not.
func (d *DB) inTx(ctx context.Context, fn func(ctx context.Context, q querier) error) error {
	ctx = context.WithoutCancel(ctx)
	if d.pg != nil {
		return pgx.BeginFunc(ctx, d.pg, func(tx pgx.Tx) error { return fn(ctx, pgQ{db: tx}) })
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, d.txQ(tx)); err != nil {
		return err
	}
	return tx.Commit()
}

// addExport records that the refunds of an order were exported (the side
// effect of the export_refunds job), and returns the export's ID.
func (d *DB) addExport(ctx context.Context, orderID string, refunds int) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "exp_" + hex.EncodeToString(b[:])
	return id, d.q().exec(ctx, `INSERT INTO exports (id, order_id, refunds, created_at) VALUES (?, ?, ?, ?)`, id, orderID, refunds, time.Now().UnixNano())
}

// Exports returns how many exports of an order's refunds were made.
func (d *DB) Exports(ctx context.Context, orderID string) (int, error) {
	var n int
	err := d.q().row(ctx, `SELECT count(*) FROM exports WHERE order_id = ?`, orderID).Scan(&n)
	return n, err
}

func newRefundID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "re_" + hex.EncodeToString(b[:])
}
