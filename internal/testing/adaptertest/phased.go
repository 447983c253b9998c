package adaptertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// PhasedTool: a phased tool's external part runs outside any transaction,
// with the call's idempotency key, and its writes and its outcome commit
// together. While one call waits in its external part, a duplicate is told
// it is in progress, another call of the tool runs to its end and a read
// answers (on SQLite a transaction held across the wait would stop both).
// A handler error rolls the writes back and releases the claim; a commit
// that fails keeps no write, says so, and the retry completes the call
// with the same key at the external service.
func testPhasedTool(t *testing.T, h Harness) {
	skipUnlessDeclared(t, h, false)
	store, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "phased.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY);
		CREATE TABLE refunds (id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id), payment TEXT NOT NULL);
		INSERT INTO orders VALUES ('o-1'), ('o-2')`); err != nil {
		t.Fatal(err)
	}

	// The external service: a payment gateway that deduplicates by the
	// key it is sent.
	var (
		mu        sync.Mutex
		externals []string              // the key of every external call
		payments  = map[string]string{} // key -> payment reference
		entered   = make(chan struct{})
		release   = make(chan struct{})
		failLocal atomic.Bool
		locals    counter
	)
	external := func(ctx context.Context, args map[string]any) (any, error) {
		key := idemkit.CallFromContext(ctx).IdempotencyKey()
		if key == "" {
			return nil, errors.New("the external part ran without the call's idempotency key")
		}
		if args["hold"] == true {
			close(entered)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		externals = append(externals, key)
		if _, ok := payments[key]; !ok {
			payments[key] = fmt.Sprintf("pay_%d", len(payments)+1)
		}
		return payments[key], nil
	}
	local := func(ctx context.Context, tx *sql.Tx, args map[string]any, ext any) (Result, error) {
		id := fmt.Sprintf("re_%d", locals.inc())
		order, _ := args["order_id"].(string)
		if args["defer_check"] == true {
			if _, err := tx.ExecContext(ctx, `PRAGMA defer_foreign_keys = ON`); err != nil {
				return Result{}, err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (id, order_id, payment) VALUES (?, ?, ?)`, id, order, ext); err != nil {
			return Result{}, err
		}
		if failLocal.Load() {
			return Result{}, errors.New("the refund could not be recorded")
		}
		instrument.RecordWrite(ctx, id)
		return Result{Text: []string{fmt.Sprintf("refunded %s as %s (%s)", order, id, ext)}}, nil
	}
	count := func(order string) int {
		var n int
		if err := store.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM refunds WHERE order_id = ?`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	status := Tool{Name: "status", ReadOnly: true, Idempotent: true, Run: func(ctx context.Context, args map[string]any) (Result, error) {
		order, _ := args["order_id"].(string)
		return Result{Text: []string{fmt.Sprintf("%d refunds", count(order))}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, store: store, tools: []Tool{status},
		phased: []PhasedTool{{Name: "refund", External: external, Local: local}}, phRunner: store})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	paid := func() (calls, distinct int) {
		mu.Lock()
		defer mu.Unlock()
		return len(externals), len(payments)
	}

	first := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100}, nil)
	second := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100}, nil)
	if text(first) != "refunded o-1 as re_1 (pay_1)" || text(second) != text(first) || marker(second, sc.ReplayMetaKey)["write_id"] != "re_1" || count("o-1") != 1 {
		t.Fatalf("phased replay: %v / %v, %d rows", first, second, count("o-1"))
	}
	if calls, _ := paid(); calls != 1 {
		t.Fatalf("%d external calls, want 1", calls)
	}
	spans := r.spans("tools/call refund")
	if a := attrs(spans[0]); a[sc.Outcome] != sc.OutcomeExecuted || a[sc.WriteID] != "re_1" {
		t.Errorf("first span %v", a)
	}
	if a := attrs(spans[1]); a[sc.Outcome] != sc.OutcomeReplayed || a[sc.WriteID] != "re_1" {
		t.Errorf("replay span %v", a)
	}

	// While a call waits in its external part: its duplicate is in
	// progress, a read answers, another call runs to its end.
	held := map[string]any{"order_id": "o-1", "amount_cents": 200, "hold": true}
	heldDone := make(chan map[string]any, 1)
	go func() {
		res, _ := c.CallTool(ctx, "refund", held, nil)
		heldDone <- res
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held call never reached its external part")
	}
	if dup := call(t, c, "refund", held, nil); !isError(dup) || marker(dup, sc.RefusalMetaKey)["reason"] != sc.RefusalInProgress {
		t.Errorf("a duplicate during the external part: %v, want in progress", dup)
	}
	if st := call(t, c, "status", map[string]any{"order_id": "o-1"}, nil); text(st) != "1 refunds" {
		t.Errorf("a read during the external part: %v", st)
	}
	if other := call(t, c, "refund", map[string]any{"order_id": "o-2", "amount_cents": 5}, nil); isError(other) || count("o-2") != 1 {
		t.Errorf("another call during the external part: %v, %d rows", other, count("o-2"))
	}
	close(release)
	if res := <-heldDone; isError(res) || count("o-1") != 2 {
		t.Fatalf("the held call: %v, %d rows of o-1", res, count("o-1"))
	}

	// A handler error in the local part: its write is rolled back, the
	// claim released; the retry pays with the same key (one payment) and
	// writes once.
	failLocal.Store(true)
	again := map[string]any{"order_id": "o-2", "amount_cents": 6}
	if _, err := c.CallTool(ctx, "refund", again, nil); err == nil {
		t.Fatal("a handler error must reach the client as an error")
	}
	if count("o-2") != 1 {
		t.Fatalf("the failed call's write survived: %d rows of o-2", count("o-2"))
	}
	failLocal.Store(false)
	callsBefore, paymentsBefore := paid()
	if res := call(t, c, "refund", again, nil); isError(res) || count("o-2") != 2 {
		t.Fatalf("the retry after a handler error: %v, %d rows", res, count("o-2"))
	}
	if calls, distinct := paid(); calls != callsBefore+1 || distinct != paymentsBefore {
		t.Fatalf("the retry made %d external calls and %d new payments; want 1 call with the same key, no new payment", calls-callsBefore, distinct-paymentsBefore)
	}
	if a := attrs(last(r.spans("tools/call refund"))); a[sc.Outcome] != sc.OutcomeTakeover {
		t.Errorf("the retry's span %v, want a takeover", a)
	}

	// A commit that fails after the write: no write remains, the answer
	// says so and that a retry completes the call; the retry does, with the
	// same key at the gateway.
	bad := map[string]any{"order_id": "o-404", "amount_cents": 7, "defer_check": true}
	res := call(t, c, "refund", bad, nil)
	if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != sc.RefusalStoreUnavailable ||
		!strings.Contains(text(res), "none of its writes were kept") || !strings.Contains(text(res), "the retry completes it") {
		t.Fatalf("a failed commit's answer %v", res)
	}
	if count("o-404") != 0 {
		t.Fatalf("the uncommitted write survived: %d rows", count("o-404"))
	}
	if a := attrs(last(r.spans("tools/call refund"))); a[sc.RefusalReason] != sc.RefusalStoreUnavailable || a[sc.FinishError] != sc.FinishStoreError || a[sc.Outcome] != nil {
		t.Errorf("the rolled-back call's span %v", a)
	}
	if _, err := store.DB().ExecContext(ctx, `INSERT INTO orders VALUES ('o-404')`); err != nil {
		t.Fatal(err)
	}
	callsBefore, paymentsBefore = paid()
	if res := call(t, c, "refund", bad, nil); isError(res) || count("o-404") != 1 {
		t.Fatalf("the retry after the failed commit: %v, %d rows", res, count("o-404"))
	}
	if calls, distinct := paid(); calls != callsBefore+1 || distinct != paymentsBefore {
		t.Fatalf("the retry after the failed commit made %d external calls, %d new payments; want 1 and 0", calls-callsBefore, distinct-paymentsBefore)
	}
	if res := call(t, c, "refund", bad, nil); marker(res, sc.ReplayMetaKey) == nil || count("o-404") != 1 {
		t.Fatalf("the duplicate of the retry: %v, %d rows", res, count("o-404"))
	}
}
