package refunds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The payment server, over real HTTP, deduplicates by the Idempotency-Key
// header for 24 hours: a repeat within them gets the first refund back
// (nothing moves), a key reused with another amount is refused, a key
// older than 24 hours is a new refund, and requests without a key are
// never deduplicated.
func TestGateway_DeduplicatesByIdempotencyKeyFor24Hours(t *testing.T) {
	ctx := context.Background()
	gw, err := OpenGateway(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	clock := newFakeClock()
	gw.now = clock.Now
	url, stop, err := ServeGateway(gw)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	post := func(key string, amount int64) (status int, ref string, replayed bool) {
		t.Helper()
		body, _ := json.Marshal(refundRequest{OrderID: "ord_1001", AmountCents: amount, ChargedCents: 10000})
		req, _ := http.NewRequest(http.MethodPost, url+GatewayPath, bytes.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out refundResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out.Ref, resp.Header.Get("Idempotent-Replayed") == "true"
	}
	charges := func() int {
		n, err := gw.Refunds(ctx, "ord_1001")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	st, first, rep := post("k1", 500)
	if st != http.StatusOK || first == "" || rep || charges() != 1 {
		t.Fatalf("first request: %d %q replayed=%v, %d charges; want a new refund", st, first, rep, charges())
	}
	if st, ref, rep := post("k1", 500); st != http.StatusOK || ref != first || !rep || charges() != 1 {
		t.Fatalf("the same key again: %d %q replayed=%v, %d charges; want the first refund replayed", st, ref, rep, charges())
	}
	if st, _, _ := post("k1", 700); st != http.StatusUnprocessableEntity || charges() != 1 {
		t.Fatalf("the key with another amount: %d, %d charges; want 422 and nothing charged", st, charges())
	}
	clock.Advance(24*time.Hour - time.Minute)
	if st, ref, rep := post("k1", 500); st != http.StatusOK || ref != first || !rep || charges() != 1 {
		t.Fatalf("the same key 23h59m later: %d %q replayed=%v, %d charges; want the replay", st, ref, rep, charges())
	}
	clock.Advance(2 * time.Minute)
	st, later, rep := post("k1", 500)
	if st != http.StatusOK || later == first || rep || charges() != 2 {
		t.Fatalf("the same key after 24h: %d %q replayed=%v, %d charges; want a new refund", st, later, rep, charges())
	}
	if st, a, _ := post("", 500); st != http.StatusOK || a == "" || charges() != 3 {
		t.Fatalf("a request without a key: %d, %d charges", st, charges())
	}
	if st, _, _ := post("", 500); st != http.StatusOK || charges() != 4 {
		t.Fatalf("another request without a key: %d, %d charges; want it charged too", st, charges())
	}
	if st, _, _ := post("k2", 10000); st != http.StatusPaymentRequired || charges() != 4 {
		t.Fatalf("a refund over the charge: %d, %d charges; want 402 and nothing charged", st, charges())
	}
	reqs := gw.Requests("ord_1001")
	if len(reqs) != 8 || reqs[0].Key != "k1" || !reqs[1].Replayed || reqs[5].Key != "" {
		t.Fatalf("request log: %+v", reqs)
	}
}

// The desk's gateway client forwards the running call's downstream key
// (downstream.Transport) and none outside a protected call; the refusals
// come back as the errors the desk answers with.
func TestGatewayClient_ForwardsTheCallsKey(t *testing.T) {
	ctx := context.Background()
	gw, err := OpenGateway(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	url, stop, err := ServeGateway(gw)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	c := NewGatewayClient(url)
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := idemkit.NewKey("user:alice", ToolIssueRefund, []byte(`{"order_id":"ord_1002"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var callKey string
	if _, err := g.Do(ctx, k, func(ctx context.Context) (idemkit.Response, error) {
		callKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		if _, _, err := c.Refund(context.WithoutCancel(ctx), "ord_1002", 500, 10000); err != nil {
			return idemkit.Response{}, err
		}
		_, _, err := c.Refund(ctx, "ord_1002", 600, 10000) // the same key, another amount
		if !errors.Is(err, ErrKeyReused) {
			t.Errorf("the key reused with another amount: %v, want ErrKeyReused", err)
		}
		return idemkit.Response{Body: []byte("ok")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Refund(ctx, "ord_1002", 500, 10000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Refund(ctx, "ord_1002", 20000, 10000); !errors.Is(err, ErrChargeRefunded) || !strings.Contains(err.Error(), "cents left on ord_1002") {
		t.Errorf("a refund over the charge: %v, want ErrChargeRefunded with the gateway's reason", err)
	}
	reqs := gw.Requests("ord_1002")
	if len(reqs) != 4 || callKey == "" || reqs[0].Key != callKey || reqs[1].Key != callKey || reqs[2].Key != "" || reqs[3].Key != "" {
		t.Fatalf("requests %+v; want the call's key %s on the two inside it, none outside", reqs, callKey)
	}
}

// A deliberate repeat after idemkit's window is a new record, so it
// reaches the payment server (which remembers keys for 24 hours) with a
// new key, as a new refund: the money moves twice, as the user asked. The
// duplicate inside the window is a replay and reaches no one. In every
// mode with a store.
func TestDesk_ARepeatAfterTheWindowIsANewPayment(t *testing.T) {
	for _, mode := range []string{modeSQLite, modeSQLiteApart, modePostgres, modeMemory} {
		t.Run(mode, func(t *testing.T) {
			clock := newFakeClock()
			rig := startDeskMode(t, mode, deskOptions{fast: time.Millisecond, guard: &idemkit.Config{Window: 10 * time.Minute, Now: clock.Now}})
			c := deskClient(t, rig.url)
			ctx := context.Background()
			args := map[string]any{"order_id": "ord_1003", "amount_cents": 500}
			first, err := callTool(ctx, c, ToolIssueRefund, args)
			if err != nil || first.IsError || !strings.Contains(resultText(first), "Refunded $5.00") {
				t.Fatalf("first refund: %v, %v", first, err)
			}
			dup, err := callTool(ctx, c, ToolIssueRefund, args)
			if err != nil || marker(dup, spancontract.ReplayMetaKey)["replayed"] != true {
				t.Fatalf("the duplicate within the window: %v, %v; want a replay", dup, err)
			}
			clock.Advance(11 * time.Minute)
			again, err := callTool(ctx, c, ToolIssueRefund, args)
			if err != nil || again.IsError || marker(again, spancontract.ReplayMetaKey) != nil ||
				strings.Contains(resultText(again), "recognised the idempotency key") {
				t.Fatalf("the repeat after the window: %v, %v; want a new refund, not the gateway's replay", again, err)
			}
			reqs := rig.gw.Requests("ord_1003")
			if len(reqs) != 2 || reqs[0].Key == "" || reqs[1].Key == "" || reqs[0].Key == reqs[1].Key || reqs[0].Replayed || reqs[1].Replayed {
				t.Fatalf("the payment server's requests: %+v; want two new refunds with two keys", reqs)
			}
			charges, err := rig.gw.Refunds(ctx, "ord_1003")
			if err != nil || charges != 2 {
				t.Fatalf("%d charges (%v), want 2", charges, err)
			}
			rows, err := rig.db.Refunds(ctx, "ord_1003")
			if err != nil || len(rows) != 2 || rows[0].GatewayKey != reqs[0].Key || rows[1].GatewayKey != reqs[1].Key {
				t.Fatalf("refund rows %+v (%v); want two, each with its request's key", rows, err)
			}
		})
	}
}

// elicitor answers the desk's questions as a user would, and remembers
// them.
type elicitor struct {
	mu        sync.Mutex // protects questions and answer
	questions []string
	answer    mcp.ElicitationResponseAction
}

func (e *elicitor) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.questions = append(e.questions, req.Params.Message)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: e.answer}}, nil
}

func (e *elicitor) asked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.questions...)
}

func (e *elicitor) set(a mcp.ElicitationResponseAction) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.answer = a
}

// With -confirm-above-cents, the desk asks the user before a refund above
// the threshold and pays only once they accept: below it no question; a
// decline pays nothing; a client that cannot be asked is refused.
func TestDesk_AsksBeforeARefundAboveTheThreshold(t *testing.T) {
	rig := startDeskMode(t, modeSQLite, deskOptions{fast: time.Millisecond, confirmAbove: 1000})
	ctx := context.Background()
	user := &elicitor{answer: mcp.ElicitationResponseActionDecline}
	tr, err := transport.NewStreamableHTTP(rig.url, transportAlice()...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithElicitationHandler(user))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, initRequest()); err != nil {
		t.Fatal(err)
	}
	charges := func(order string) int {
		n, err := rig.gw.Refunds(ctx, order)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	small, err := callTool(ctx, c, ToolIssueRefund, map[string]any{"order_id": "ord_1005", "amount_cents": 1000})
	if err != nil || small.IsError || len(user.asked()) != 0 || charges("ord_1005") != 1 {
		t.Fatalf("a refund at the threshold: %v, %v, questions %q; want it paid without a question", small, err, user.asked())
	}
	large := map[string]any{"order_id": "ord_1006", "amount_cents": 2500}
	declined, err := callTool(ctx, c, ToolIssueRefund, large)
	if err != nil || !declined.IsError || marker(declined, spancontract.RefusalMetaKey)["reason"] != spancontract.RefusalDeclined || charges("ord_1006") != 0 {
		t.Fatalf("a declined refund: %v, %v, %d charges; want refused (declined) and nothing paid", declined, err, charges("ord_1006"))
	}
	user.set(mcp.ElicitationResponseActionAccept)
	accepted, err := callTool(ctx, c, ToolIssueRefund, large)
	if err != nil || accepted.IsError || charges("ord_1006") != 1 {
		t.Fatalf("an accepted refund: %v, %v, %d charges; want it paid once", accepted, err, charges("ord_1006"))
	}
	if q := user.asked(); len(q) != 2 || q[0] != "Refund $25.00 on ord_1006?" || q[1] != q[0] {
		t.Fatalf("questions %q; want \"Refund $25.00 on ord_1006?\" twice", q)
	}

	mute := deskClient(t, rig.url) // declares no elicitation capability
	res, err := callTool(ctx, mute, ToolIssueRefund, map[string]any{"order_id": "ord_1007", "amount_cents": 2500})
	if err != nil || !res.IsError || marker(res, spancontract.RefusalMetaKey)["reason"] != spancontract.RefusalConfirmationUnavailable || charges("ord_1007") != 0 {
		t.Fatalf("a client that cannot be asked: %v, %v, %d charges; want refused (confirmation_unavailable), nothing paid", res, err, charges("ord_1007"))
	}
}
