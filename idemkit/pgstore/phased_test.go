package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// phasedFixture is a store with an orders table and a refunds table whose
// rows reference it (deferred), a Guard, and a fake payment gateway that
// deduplicates by the key it is sent.
type phasedFixture struct {
	*txFixture
	orders, lines string

	mu       sync.Mutex // protects calls and payments
	calls    []string
	payments map[string]bool
}

func newPhasedFixture(t *testing.T, cfg *idemkit.Config) *phasedFixture {
	t.Helper()
	f := &phasedFixture{txFixture: newTxFixture(t), payments: map[string]bool{}}
	f.guard, _ = idemkit.NewGuard(f.store, cfg)
	f.orders = pgx.Identifier{f.schema, "orders"}.Sanitize()
	f.lines = pgx.Identifier{f.schema, "phased_lines"}.Sanitize()
	if _, err := f.pool.Exec(context.Background(), `CREATE TABLE `+f.orders+` (id text PRIMARY KEY);
		CREATE TABLE `+f.lines+` (id bigserial PRIMARY KEY, order_id text NOT NULL REFERENCES `+f.orders+`(id) DEFERRABLE INITIALLY DEFERRED, gateway_key text NOT NULL);
		INSERT INTO `+f.orders+` VALUES ('o-1')`); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *phasedFixture) pay(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, key)
	f.payments[key] = true
}

func (f *phasedFixture) gateway() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), len(f.payments)
}

func (f *phasedFixture) rows(t *testing.T) int {
	return count(t, f.pool, `SELECT count(*) FROM `+f.lines)
}

// refund pays through the gateway (between runs after the payment), then
// writes the row for order in the local transaction.
func (f *phasedFixture) refund(ctx context.Context, key idemkit.Key, order string, between func()) (idemkit.Result, error) {
	var gatewayKey string
	return f.store.DoPhased(ctx, f.guard, key, func(ctx context.Context) error {
		gatewayKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		f.pay(gatewayKey)
		if between != nil {
			between()
		}
		return nil
	}, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO `+f.lines+` (order_id, gateway_key) VALUES ($1, $2) RETURNING id`, order, gatewayKey).Scan(&id); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{Body: fmt.Appendf(nil, `{"refund":%d}`, id), WriteID: fmt.Sprint(id)}, nil
	})
}

func TestDoPhased_LocalWritesCommitWithTheOutcome(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	res, err := f.refund(ctx, k, "o-1", nil)
	if err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	dup, err := f.refund(ctx, k, "o-1", func() { t.Error("a duplicate paid") })
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || string(dup.Body) != string(res.Body) || dup.WriteID != res.WriteID {
		t.Fatalf("duplicate: %+v, %v", dup, err)
	}
	rec, err := f.store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()})
	if err != nil || rec.Generation == 0 {
		t.Fatalf("record %+v, %v; want one with a generation", rec, err)
	}
	// The key forwarded is the record's (see Call.IdempotencyKey).
	if calls, payments := f.gateway(); len(calls) != 1 || payments != 1 || calls[0] != idemkit.DownstreamKey(k.ID(), rec.Generation) || f.rows(t) != 1 {
		t.Fatalf("gateway %v (%d payments), %d rows", calls, payments, f.rows(t))
	}
}

// During the external phase nothing is locked: the claim row can be
// locked by another transaction at once (NOWAIT), a status read answers,
// and a duplicate is told the call is in progress.
func TestDoPhased_ExternalPhaseLocksNothing(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	inExternal, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.refund(ctx, k, "o-1", func() {
			close(inExternal)
			<-release
		})
		done <- err
	}()
	<-inExternal
	claims := pgx.Identifier{f.schema, "idemkit_claims"}.Sanitize()
	if err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var state string
		return tx.QueryRow(ctx, `SELECT state FROM `+claims+` WHERE key = $1 FOR UPDATE NOWAIT`, k.ID()).Scan(&state)
	}); err != nil {
		t.Fatalf("locking the claim row during the external phase: %v; nothing may hold it", err)
	}
	if rec, err := f.guard.Lookup(ctx, k); err != nil || rec.State != idemstore.StateInProgress {
		t.Fatalf("status during the external phase: %+v, %v", rec, err)
	}
	if _, err := f.refund(ctx, k, "o-1", nil); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate during the external phase: %v, want in progress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A stale attempt (its lease ran out during the external call, another
// took the claim over and committed) cannot commit: ErrLeaseLost, and its
// row is rolled back. One row, one payment.
func TestDoPhased_StaleAttemptsCommitIsFencedAndRolledBack(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	f := newPhasedFixture(t, &idemkit.Config{Lease: time.Minute, Now: now})
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	inExternal, release := make(chan struct{}), make(chan struct{})
	stale := make(chan error, 1)
	go func() {
		_, err := f.refund(ctx, k, "o-1", func() {
			close(inExternal)
			<-release
		})
		stale <- err
	}()
	<-inExternal
	clock.Add(int64(2 * time.Minute))
	res, err := f.refund(ctx, k, "o-1", nil)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover {
		t.Fatalf("takeover: %+v, %v", res, err)
	}
	close(release)
	if err := <-stale; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the stale attempt: %v, want ErrLeaseLost", err)
	}
	if calls, payments := f.gateway(); len(calls) != 2 || calls[0] != calls[1] || payments != 1 || f.rows(t) != 1 {
		t.Fatalf("gateway %v (%d payments), %d rows; want one key, one payment, one row", calls, payments, f.rows(t))
	}
}

// A failed commit (a deferred foreign key) keeps no row and releases the
// claim at once; the retry takes over with the same key.
func TestDoPhased_FailedCommitReleasesTheClaim(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-404"}`)
	_, err := f.refund(ctx, k, "o-404", nil)
	if !errors.Is(err, idemkit.ErrStore) || !strings.Contains(err.Error(), "none of its local writes were kept") || f.rows(t) != 0 {
		t.Fatalf("failed commit: %v, %d rows", err, f.rows(t))
	}
	if rec, err := f.guard.Lookup(ctx, k); err != nil || rec.State != idemstore.StateReleased {
		t.Fatalf("record after the failed commit: %+v, %v; want released", rec, err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+f.orders+` VALUES ('o-404')`); err != nil {
		t.Fatal(err)
	}
	if res, err := f.refund(ctx, k, "o-404", nil); err != nil || res.Outcome != idemkit.OutcomeTakeover || f.rows(t) != 1 {
		t.Fatalf("retry: %+v, %v, %d rows", res, err, f.rows(t))
	}
	if _, payments := f.gateway(); payments != 1 {
		t.Fatalf("%d payments, want 1", payments)
	}
}

func TestDoPhased_ErrorInLocalRollsBackAndReleases(t *testing.T) {
	f := newPhasedFixture(t, nil)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	boom := errors.New("refused")
	_, err := f.store.DoPhased(ctx, f.guard, k, func(context.Context) error { return nil }, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO `+f.lines+` (order_id, gateway_key) VALUES ('o-1', 'x')`); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{}, boom
	})
	if !errors.Is(err, boom) || f.rows(t) != 0 {
		t.Fatalf("local error: %v, %d rows", err, f.rows(t))
	}
	if rec, err := f.guard.Lookup(ctx, k); err != nil || rec.State != idemstore.StateReleased {
		t.Fatalf("record: %+v, %v; want released", rec, err)
	}
	if _, err := f.store.DoPhased(ctx, nil, k, nil, nil); err == nil {
		t.Fatal("DoPhased without a Guard and work: no error")
	}
}
