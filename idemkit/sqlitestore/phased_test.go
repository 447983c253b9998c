package sqlitestore_test

import (
	"bytes"
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
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

const phasedSchema = `
CREATE TABLE IF NOT EXISTS ph_orders (id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS ph_refunds (
	id          INTEGER PRIMARY KEY,
	order_id    TEXT NOT NULL REFERENCES ph_orders(id),
	gateway_key TEXT NOT NULL
);
INSERT OR IGNORE INTO ph_orders (id) VALUES ('o-1');`

// phasedFixture is a store with the phased tests' tables, a Guard on it,
// and a fake payment gateway: an external service that counts its calls
// and deduplicates them by the key it is sent.
type phasedFixture struct {
	store *sqlitestore.Store
	guard *idemkit.Guard

	mu       sync.Mutex // protects the gateway
	calls    []string   // every key the gateway was called with
	payments map[string]string
}

func newPhasedFixture(t *testing.T, cfg *idemkit.Config) *phasedFixture {
	t.Helper()
	store := openFile(t, nil)
	if _, err := store.DB().Exec(phasedSchema); err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.NewGuard(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &phasedFixture{store: store, guard: g, payments: map[string]string{}}
}

// pay is the gateway: the reference of the payment made for key.
func (f *phasedFixture) pay(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, key)
	if ref, ok := f.payments[key]; ok {
		return ref
	}
	ref := fmt.Sprintf("pay_%d", len(f.payments)+1)
	f.payments[key] = ref
	return ref
}

func (f *phasedFixture) gateway() (calls []string, payments int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), len(f.payments)
}

// rows counts the local refund rows.
func (f *phasedFixture) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.store.ReadDB().QueryRow(`SELECT count(*) FROM ph_refunds`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// refund is a phased refund: the gateway outside any transaction, then
// the refund row in the local transaction. before runs at the start of
// the external phase, between runs between the two phases.
func (f *phasedFixture) refund(ctx context.Context, key idemkit.Key, before, between func()) (idemkit.Result, error) {
	var ref, gatewayKey string
	return f.store.DoPhased(ctx, f.guard, key, func(ctx context.Context) error {
		if before != nil {
			before()
		}
		gatewayKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		ref = f.pay(gatewayKey)
		if between != nil {
			between()
		}
		return nil
	}, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		res, err := tx.ExecContext(ctx, `INSERT INTO ph_refunds (order_id, gateway_key) VALUES ('o-1', ?)`, gatewayKey)
		if err != nil {
			return idemkit.Response{}, err
		}
		id, _ := res.LastInsertId()
		return idemkit.Response{Body: fmt.Appendf(nil, `{"refund":"re_%d","payment":%q}`, id, ref), WriteID: fmt.Sprintf("re_%d", id)}, nil
	})
}

func TestDoPhased_LocalWritesCommitWithTheOutcome(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := refundKey()
	res, err := f.refund(ctx, k, nil, nil)
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || res.WriteID != "re_1" {
		t.Fatalf("first call: %+v, %v; want executed, write re_1", res, err)
	}
	dup, err := f.refund(ctx, k, func() { t.Error("a duplicate ran the external phase") }, nil)
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dup.Body, res.Body) || dup.WriteID != "re_1" {
		t.Fatalf("duplicate: %+v, %v; want the replay of %s", dup, err, res.Body)
	}
	rec, err := f.store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()})
	if err != nil || rec.State != idemstore.StateCompleted || rec.WriteID != "re_1" || rec.Generation == 0 {
		t.Fatalf("record %+v, %v; want completed with write re_1, and a generation", rec, err)
	}
	// The key forwarded is the record's (see Call.IdempotencyKey).
	calls, payments := f.gateway()
	if len(calls) != 1 || payments != 1 || calls[0] != idemkit.DownstreamKey(k.ID(), rec.Generation) || f.rows(t) != 1 {
		t.Fatalf("gateway calls %v (%d payments), %d rows; want one call with the forwarded key, one row", calls, payments, f.rows(t))
	}
}

// While the external phase waits on the network, no transaction is open:
// another call claims, runs and finishes, a status read answers, and a
// duplicate is told at once that the call is in progress. (With DoInTx the
// transaction would hold SQLite's write lock for the whole wait.)
func TestDoPhased_ExternalPhaseHoldsNoTransaction(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := refundKey()
	inExternal, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.refund(ctx, k, nil, func() {
			close(inExternal)
			<-release
		})
		done <- err
	}()
	<-inExternal
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	other, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-2"}`), nil)
	if res, err := f.guard.Do(bounded, other, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("other")}, nil
	}); err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("another call during the external phase: %+v, %v", res, err)
	}
	if rec, err := f.guard.Lookup(bounded, k); err != nil || rec.State != idemstore.StateInProgress {
		t.Fatalf("a status read during the external phase: %+v, %v; want in progress", rec, err)
	}
	if _, err := f.refund(bounded, k, func() { t.Error("a duplicate ran during the first call") }, nil); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("a duplicate during the external phase: %v, want in progress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.rows(t) != 1 {
		t.Fatalf("%d rows, want 1", f.rows(t))
	}
}

// An attempt whose lease ran out during its external call is taken over;
// the takeover calls the gateway with the same key (the gateway answers
// with the first payment) and writes the row. The stale attempt's late
// commit is fenced: it fails with ErrLeaseLost and its row is rolled back.
// One row, one payment.
func TestDoPhased_StaleAttemptsCommitIsFencedAndRolledBack(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	f := newPhasedFixture(t, &idemkit.Config{Lease: time.Minute, Now: now})
	ctx := context.Background()
	k := refundKey()
	inExternal, release := make(chan struct{}), make(chan struct{})
	stale := make(chan error, 1)
	go func() {
		_, err := f.refund(ctx, k, nil, func() {
			close(inExternal)
			<-release
		})
		stale <- err
	}()
	<-inExternal
	clock.Add(int64(2 * time.Minute)) // the first attempt's lease has run out
	res, err := f.refund(ctx, k, nil, nil)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("the takeover: %+v, %v; want takeover, attempt 2", res, err)
	}
	close(release)
	if err := <-stale; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the stale attempt's commit: %v, want ErrLeaseLost", err)
	}
	calls, payments := f.gateway()
	if len(calls) != 2 || calls[0] != calls[1] || payments != 1 {
		t.Fatalf("gateway calls %v, %d payments; want two calls with one key, one payment", calls, payments)
	}
	if f.rows(t) != 1 {
		t.Fatalf("%d refund rows, want 1: the stale attempt's row must have been rolled back", f.rows(t))
	}
	rec, err := f.store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID(), Now: now()})
	if err != nil || rec.State != idemstore.StateCompleted || rec.WriteID != res.WriteID || rec.Attempt != 2 {
		t.Fatalf("record %+v, %v; want completed by attempt 2 with %s", rec, err, res.WriteID)
	}
}

// An error in either phase releases the claim and keeps no local write;
// the retry takes over at once and calls the gateway with the same key.
func TestDoPhased_ErrorsReleaseTheClaimAndRollBack(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := refundKey()
	refused := errors.New("the gateway is down")
	_, err := f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { return refused },
		func(context.Context, *sql.Tx) (idemkit.Response, error) {
			t.Error("local ran after the external phase failed")
			return idemkit.Response{}, nil
		})
	if !errors.Is(err, refused) {
		t.Fatalf("external error: %v", err)
	}
	local := errors.New("the refund row could not be written")
	_, err = f.store.DoPhased(ctx, f.guard, k, func(ctx context.Context) error {
		f.pay(idemkit.CallFromContext(ctx).IdempotencyKey())
		return nil
	}, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO ph_refunds (order_id, gateway_key) VALUES ('o-1', 'x')`); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{}, local
	})
	if !errors.Is(err, local) || f.rows(t) != 0 {
		t.Fatalf("local error: %v, %d rows; want the error and no row", err, f.rows(t))
	}
	res, err := f.refund(ctx, k, nil, nil)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 3 || f.rows(t) != 1 {
		t.Fatalf("retry: %+v, %v, %d rows; want a takeover (attempt 3) and one row", res, err, f.rows(t))
	}
	if calls, payments := f.gateway(); len(calls) != 2 || calls[0] != calls[1] || payments != 1 {
		t.Fatalf("gateway calls %v, %d payments; want one key, one payment", calls, payments)
	}
}

func TestDoPhased_PanicInLocalRollsBackAndReleases(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := refundKey()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_, _ = f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { return nil },
			func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
				if _, err := tx.ExecContext(ctx, `INSERT INTO ph_refunds (order_id, gateway_key) VALUES ('o-1', 'x')`); err != nil {
					t.Error(err)
				}
				panic("boom")
			})
	}()
	if f.rows(t) != 0 {
		t.Fatalf("%d rows after the panic, want 0", f.rows(t))
	}
	rec, err := f.store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()})
	if err != nil || rec.State != idemstore.StateReleased {
		t.Fatalf("record after the panic: %+v, %v; want released", rec, err)
	}
	// The store is usable: the gate and the connection were given back.
	if res, err := f.refund(ctx, k, nil, nil); err != nil || res.Outcome != idemkit.OutcomeTakeover {
		t.Fatalf("after the panic: %+v, %v", res, err)
	}
}

// A commit that fails (a deferred foreign key) keeps none of the local
// writes and releases the claim at once: the retry does not wait for the
// lease.
func TestDoPhased_FailedCommitReleasesTheClaim(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := refundKey()
	order := "o-404"
	work := func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		if _, err := tx.ExecContext(ctx, `PRAGMA defer_foreign_keys = ON`); err != nil {
			return idemkit.Response{}, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ph_refunds (order_id, gateway_key) VALUES (?, 'k')`, order); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{Body: []byte("refunded")}, nil
	}
	external := func(ctx context.Context) error {
		f.pay(idemkit.CallFromContext(ctx).IdempotencyKey())
		return nil
	}
	_, err := f.store.DoPhased(ctx, f.guard, k, external, work)
	if !errors.Is(err, idemkit.ErrStore) || !strings.Contains(err.Error(), "none of its local writes were kept") {
		t.Fatalf("failed commit: %v, want ErrStore saying the writes were not kept", err)
	}
	if f.rows(t) != 0 {
		t.Fatalf("%d rows after the failed commit, want 0", f.rows(t))
	}
	if rec, err := f.store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()}); err != nil || rec.State != idemstore.StateReleased {
		t.Fatalf("record after the failed commit: %+v, %v; want released", rec, err)
	}
	if _, err := f.store.DB().Exec(`INSERT INTO ph_orders (id) VALUES (?)`, order); err != nil {
		t.Fatal(err)
	}
	res, err := f.store.DoPhased(ctx, f.guard, k, external, work)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || f.rows(t) != 1 {
		t.Fatalf("retry: %+v, %v, %d rows", res, err, f.rows(t))
	}
	if _, payments := f.gateway(); payments != 1 {
		t.Fatalf("%d payments, want 1 (the retry forwarded the same key)", payments)
	}
}

// A body over the inline maximum is stored apart, in the local
// transaction, and replayed from the read pool.
func TestDoPhased_LargeResponseStoredApart(t *testing.T) {
	f := newPhasedFixture(t, &idemkit.Config{MaxInlineResponseBytes: 16})
	ctx := context.Background()
	k := refundKey()
	body := bytes.Repeat([]byte("r"), 1000)
	work := func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO ph_refunds (order_id, gateway_key) VALUES ('o-1', 'k')`)
		return idemkit.Response{Body: body}, err
	}
	if _, err := f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { return nil }, work); err != nil {
		t.Fatal(err)
	}
	dup, err := f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { t.Error("ran again"); return nil }, work)
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dup.Body, body) || f.rows(t) != 1 {
		t.Fatalf("replay of a large body: %v, %d bytes, %d rows", err, len(dup.Body), f.rows(t))
	}
}

func TestDoPhased_RejectsMissingArguments(t *testing.T) {
	f := newPhasedFixture(t, nil)
	noop := func(context.Context) error { return nil }
	local := func(context.Context, *sql.Tx) (idemkit.Response, error) { return idemkit.Response{}, nil }
	for name, call := range map[string]func() error{
		"guard": func() error {
			_, err := f.store.DoPhased(context.Background(), nil, refundKey(), noop, local)
			return err
		},
		"external": func() error {
			_, err := f.store.DoPhased(context.Background(), f.guard, refundKey(), nil, local)
			return err
		},
		"local": func() error {
			_, err := f.store.DoPhased(context.Background(), f.guard, refundKey(), noop, nil)
			return err
		},
	} {
		if err := call(); err == nil {
			t.Errorf("DoPhased without %s: no error", name)
		}
	}
	// The local phase's begin, kept past the work's return, refuses.
	var kept func(context.Context) error
	begin := func(ctx context.Context) (idemstore.LocalTx, error) {
		_, lt, err := f.store.BeginLocal(ctx)
		return lt, err
	}
	if _, err := f.guard.DoPhased(context.Background(), refundKey(), begin, func(ctx context.Context, beginLocal func(context.Context) error) (idemkit.Response, error) {
		kept = beginLocal
		return idemkit.Response{Body: []byte("ok")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := kept(context.Background()); !errors.Is(err, idemkit.ErrStore) {
		t.Errorf("beginLocal after the work returned: %v, want an error matching ErrStore", err)
	}
}

// Reads run on the read-only pool: while a transaction holds the write
// lock (here a phased call's local transaction, begun and not ended),
// Lookup, List, Response and the tool's own reads through ReadDB answer.
func TestStore_ReadsDoNotWaitForTheWriter(t *testing.T) {
	f := newPhasedFixture(t, &idemkit.Config{MaxInlineResponseBytes: 16})
	ctx := context.Background()
	k := refundKey()
	body := bytes.Repeat([]byte("b"), 100) // stored apart: replayed through Response
	if _, err := f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { return nil },
		func(context.Context, *sql.Tx) (idemkit.Response, error) { return idemkit.Response{Body: body}, nil }); err != nil {
		t.Fatal(err)
	}
	tx, lt, err := f.store.BeginLocal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Rollback(ctx)
	if _, err := tx.Exec(`INSERT INTO ph_refunds (order_id, gateway_key) VALUES ('o-1', 'uncommitted')`); err != nil {
		t.Fatal(err)
	}
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if rec, err := f.store.Lookup(bounded, idemstore.LookupRequest{Key: k.ID(), Body: true}); err != nil || !bytes.Equal(rec.Body, body) {
		t.Fatalf("Lookup while the write lock is held: %v", err)
	}
	if recs, err := f.store.List(bounded, idemstore.ListRequest{}); err != nil || len(recs) != 1 {
		t.Fatalf("List while the write lock is held: %d, %v", len(recs), err)
	}
	if b, err := f.store.Response(bounded, k.ID()); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("Response while the write lock is held: %v", err)
	}
	var n int
	if err := f.store.ReadDB().QueryRowContext(bounded, `SELECT count(*) FROM ph_refunds`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a read through ReadDB while the write lock is held: %d rows, %v; want 0 (the last committed state)", n, err)
	}
	if _, err := f.store.ReadDB().ExecContext(bounded, `INSERT INTO ph_orders (id) VALUES ('o-9')`); err == nil {
		t.Fatal("a write through ReadDB succeeded; the read pool must be query_only")
	}
}

// Under a storm of claims, a finish is not starved: the store's writes
// queue in order, a finish ahead of the claims (database/sql alone hands
// its one connection to a random waiter). Triggers log the order in which
// the writes reach the table.
func TestStore_FinishGoesAheadOfQueuedClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "order.db")
	store := openPath(t, path, &sqlitestore.Config{BusyTimeout: time.Minute})
	ctx := context.Background()
	if _, err := store.DB().Exec(`
		CREATE TABLE oplog (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, op TEXT NOT NULL);
		CREATE TRIGGER log_claim AFTER INSERT ON idemkit_claims BEGIN INSERT INTO oplog (key, op) VALUES (NEW.key, 'claim'); END;
		CREATE TRIGGER log_update AFTER UPDATE ON idemkit_claims BEGIN INSERT INTO oplog (key, op) VALUES (NEW.key, 'update'); END;`); err != nil {
		t.Fatal(err)
	}
	claim := func(key string, token int64) error {
		_, err := store.Claim(ctx, idemstore.ClaimRequest{Key: key, Tool: "t", Fingerprint: "fp", Token: token, Lease: time.Minute, Window: time.Hour})
		return err
	}
	if err := claim("running", 1); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, path) // another process holds the write lock
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() { errs <- claim("first", 2) }) // takes the gate, waits for the lock
	const claims = 40
	waitFor := func(n int) {
		for deadline := time.Now().Add(30 * time.Second); sqlitestore.WaitingWrites(store) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes queued, want %d", sqlitestore.WaitingWrites(store), n)
			}
		}
	}
	for i := range claims {
		wg.Go(func() { errs <- claim(fmt.Sprintf("new-%d", i), int64(10+i)) })
	}
	waitFor(claims)
	wg.Go(func() {
		errs <- store.Finish(ctx, idemstore.FinishRequest{Key: "running", Token: 1, Succeeded: true, Response: idemkit.Response{Body: []byte("ok")}, Size: 2})
	})
	waitFor(claims + 1)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var seq []string
	rows, err := store.DB().Query(`SELECT key FROM oplog ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		seq = append(seq, k)
	}
	// running (its claim), the claim that held the gate when the lock was
	// taken ("first", or one of the others that got there before it), then
	// the finish of running, then the queued claims.
	if len(seq) != claims+3 || seq[0] != "running" || seq[2] != "running" {
		t.Fatalf("the writes reached the table in the order %v; want the finish of running right after the claim that held the gate", seq[:min(len(seq), 6)])
	}
}
