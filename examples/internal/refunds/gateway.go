package refunds

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit/downstream"
)

// Gateway is the fake payment gateway: an external service the refund
// desk calls over HTTP to move the money (ServeHTTP), with a ledger of its
// own (a SQLite file standing for the provider's database, outside the
// desk's transactions). It deduplicates refunds by the Idempotency-Key
// header for Window, as Stripe does for 24 hours: idemkit protects the
// tool call, the key protects the window between the gateway's refund and
// the desk's commit. The desk forwards its key with downstream.Transport
// (see GatewayClient). Its methods are safe for concurrent use.
type Gateway struct {
	db *sql.DB
	// Window is how long the gateway remembers an idempotency key: a
	// request with a key seen less than Window ago is answered with that
	// request's refund; after it, the key is forgotten and the request is
	// a new refund. Defaults to DefaultGatewayWindow (24 hours).
	Window time.Duration

	now func() time.Time // the gateway's clock (tests move it); nil: time.Now

	mu       sync.Mutex // protects requests
	requests []GatewayRequest
}

// DefaultGatewayWindow is how long the gateway remembers an idempotency
// key by default: Stripe's 24 hours.
const DefaultGatewayWindow = 24 * time.Hour

// GatewayPath is the path of the gateway's refund endpoint.
const GatewayPath = "/v1/refunds"

// GatewayRequest is one refund request the gateway answered, as its
// request log keeps it (see Gateway.Requests).
type GatewayRequest struct {
	// Key is the request's Idempotency-Key header ("": none).
	Key     string
	OrderID string
	Amount  int64
	// Ref is the refund it answered with ("" for a refusal).
	Ref string
	// Replayed says that Key was known: the answer is the earlier
	// request's refund, and no money moved.
	Replayed bool
	// Status is the HTTP status of the answer.
	Status int
}

const gatewaySchema = `
CREATE TABLE IF NOT EXISTS gateway_refunds (
	ref          TEXT PRIMARY KEY,
	idem_key     TEXT UNIQUE,              -- NULL: a request without a key, or one whose key was forgotten after the window
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

// ErrKeyReused is the gateway's refusal of a request whose idempotency key
// an earlier request with other parameters used (Stripe answers it with
// 400 idempotency_error): nothing moved.
var ErrKeyReused = errors.New("the idempotency key was used by a request with other parameters")

func (g *Gateway) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

func (g *Gateway) window() time.Duration {
	if g.Window > 0 {
		return g.Window
	}
	return DefaultGatewayWindow
}

// Refund moves amount cents back to the customer of orderID, whose charge
// was charged cents, and returns the gateway's refund reference. A request
// with the key (non-empty) of one made less than Window ago is answered
// with that one's reference, and replayed is true: nothing is refunded
// twice; a key older than Window is forgotten, and the request is a new
// refund. A key reused with another order or amount is refused with an
// error matching ErrKeyReused. A refund that would take the order's
// refunds over the charge is refused with an error matching
// ErrChargeRefunded: the gateway, which holds the money, is what
// guarantees that, since the desk checks before it pays without holding a
// lock.
func (g *Gateway) Refund(ctx context.Context, key, orderID string, amount, charged int64) (ref string, replayed bool, err error) {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback()
	now := g.clock()
	if key != "" {
		var (
			order   string
			cents   int64
			created int64
		)
		err := tx.QueryRowContext(ctx, `SELECT ref, order_id, amount_cents, created_at FROM gateway_refunds WHERE idem_key = ?`, key).Scan(&ref, &order, &cents, &created)
		switch {
		case err == nil && now.Sub(time.Unix(0, created)) < g.window():
			if order != orderID || cents != amount {
				return "", false, fmt.Errorf("%w: %s was refunded %d cents on %s under this key", ErrKeyReused, ref, cents, order)
			}
			return ref, true, nil
		case err == nil:
			// The key is past the window: forgotten, as a provider does.
			if _, err := tx.ExecContext(ctx, `UPDATE gateway_refunds SET idem_key = NULL WHERE ref = ?`, ref); err != nil {
				return "", false, err
			}
		case !errors.Is(err, sql.ErrNoRows):
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
		ref, k, orderID, amount, now.UnixNano()); err != nil {
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

// Requests returns the refund requests for orderID ("" for all orders)
// that this Gateway answered over HTTP since it was opened, in order.
func (g *Gateway) Requests(orderID string) []GatewayRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []GatewayRequest
	for _, r := range g.requests {
		if orderID == "" || r.OrderID == orderID {
			out = append(out, r)
		}
	}
	return out
}

// refundRequest is the body of a POST to GatewayPath.
type refundRequest struct {
	OrderID      string `json:"order_id"`
	AmountCents  int64  `json:"amount_cents"`
	ChargedCents int64  `json:"charged_cents"`
}

// refundResponse is the gateway's answer: a refund, or an error.
type refundResponse struct {
	Ref   string        `json:"ref,omitempty"`
	Error *gatewayError `json:"error,omitempty"`
}

type gatewayError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ServeHTTP serves the gateway's refund API: POST GatewayPath with a JSON
// body {"order_id", "amount_cents", "charged_cents"} and, optionally, an
// Idempotency-Key header. It answers 200 {"ref"} (with
// "Idempotent-Replayed: true" when the key was known and nothing moved),
// 402 charge_already_refunded, 422 idempotency_key_reused, or 400, 404,
// 405 and 500 with {"error": {"code", "message"}}.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != GatewayPath {
		writeGateway(w, http.StatusNotFound, refundResponse{Error: &gatewayError{"not_found", "POST " + GatewayPath}})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeGateway(w, http.StatusMethodNotAllowed, refundResponse{Error: &gatewayError{"method_not_allowed", "POST " + GatewayPath}})
		return
	}
	var in refundRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&in); err != nil || in.OrderID == "" || in.AmountCents <= 0 {
		writeGateway(w, http.StatusBadRequest, refundResponse{Error: &gatewayError{"invalid_request", "want a JSON body with order_id and a positive amount_cents"}})
		return
	}
	key := r.Header.Get(downstream.DefaultHeader)
	ref, replayed, err := g.Refund(r.Context(), key, in.OrderID, in.AmountCents, in.ChargedCents)
	status, out := http.StatusOK, refundResponse{Ref: ref}
	switch {
	case errors.Is(err, ErrChargeRefunded):
		status, out = http.StatusPaymentRequired, refundResponse{Error: &gatewayError{"charge_already_refunded", err.Error()}}
	case errors.Is(err, ErrKeyReused):
		status, out = http.StatusUnprocessableEntity, refundResponse{Error: &gatewayError{"idempotency_key_reused", err.Error()}}
	case err != nil:
		status, out = http.StatusInternalServerError, refundResponse{Error: &gatewayError{"ledger_error", err.Error()}}
	}
	g.mu.Lock()
	g.requests = append(g.requests, GatewayRequest{Key: key, OrderID: in.OrderID, Amount: in.AmountCents, Ref: out.Ref, Replayed: replayed, Status: status})
	g.mu.Unlock()
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeGateway(w, status, out)
}

func writeGateway(w http.ResponseWriter, status int, body refundResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// ServeGateway serves g over HTTP on a loopback port and returns its base
// URL (for GatewayClient, or the desk's -gateway-url) and a function that
// stops the server (it waits for requests in flight until ctx is done).
func ServeGateway(g *Gateway) (url string, stop func(ctx context.Context) error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("refunds: serve the payment gateway: %w", err)
	}
	hs := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), hs.Shutdown, nil
}

// GatewayClient is the desk's client of the payment gateway's HTTP API
// (Gateway.ServeHTTP, or any service that speaks it). Its requests go
// through downstream.Transport: inside a protected call each carries the
// call's downstream key in Idempotency-Key (the same on every attempt of
// one record, a new one for a new record); outside one (the desk without
// idemkit) none. It is safe for concurrent use.
type GatewayClient struct {
	url  string
	http *http.Client
}

// NewGatewayClient returns a client of the gateway at baseURL
// ("http://127.0.0.1:8081"). Each request is bounded by 30 seconds.
func NewGatewayClient(baseURL string) *GatewayClient {
	base := http.DefaultTransport.(*http.Transport).Clone()
	// The desk's refunds in flight reuse their connections (the default
	// keeps 2 idle per host: every refund beyond them would dial).
	base.MaxIdleConns, base.MaxIdleConnsPerHost = 512, 512
	return &GatewayClient{
		url:  strings.TrimRight(baseURL, "/") + GatewayPath,
		http: &http.Client{Transport: &downstream.Transport{Base: base}, Timeout: 30 * time.Second},
	}
}

// Refund asks the gateway to refund amount cents of orderID's charge of
// charged cents, with ctx's downstream key (see GatewayClient), and
// returns its refund reference; replayed says the gateway recognised the
// key and returned the refund it had made. A refusal matches
// ErrChargeRefunded or ErrKeyReused (nothing moved); any other error
// leaves it unknown whether the gateway refunded: a retry with the same
// key finds out.
func (c *GatewayClient) Refund(ctx context.Context, orderID string, amount, charged int64) (ref string, replayed bool, err error) {
	body, _ := json.Marshal(refundRequest{OrderID: orderID, AmountCents: amount, ChargedCents: charged})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	var out refundResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&out); err != nil {
		return "", false, fmt.Errorf("the gateway answered HTTP %d with an unreadable body: %w", resp.StatusCode, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK && out.Ref != "":
		return out.Ref, resp.Header.Get("Idempotent-Replayed") == "true", nil
	case out.Error != nil && out.Error.Code == "charge_already_refunded":
		return "", false, fmt.Errorf("%w: %s", ErrChargeRefunded, strings.TrimPrefix(out.Error.Message, ErrChargeRefunded.Error()+": "))
	case out.Error != nil && out.Error.Code == "idempotency_key_reused":
		return "", false, fmt.Errorf("%w: %s", ErrKeyReused, strings.TrimPrefix(out.Error.Message, ErrKeyReused.Error()+": "))
	case out.Error != nil:
		return "", false, fmt.Errorf("the gateway answered HTTP %d %s: %s", resp.StatusCode, out.Error.Code, out.Error.Message)
	}
	return "", false, fmt.Errorf("the gateway answered HTTP %d without a refund", resp.StatusCode)
}
