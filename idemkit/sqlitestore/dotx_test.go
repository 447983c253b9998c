package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// txFixture is a store with the refunds table and a Guard.
type txFixture struct {
	store *sqlitestore.Store
	guard *idemkit.Guard
}

func newTxFixture(t *testing.T, cfg *idemkit.Config) *txFixture {
	t.Helper()
	store := openFile(t, nil)
	if _, err := store.DB().Exec(sideEffectsSchema); err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.NewGuard(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &txFixture{store: store, guard: g}
}

// claims counts the claim rows of key.
func (f *txFixture) claims(t *testing.T, key idemkit.Key) int {
	t.Helper()
	var n int
	if err := f.store.DB().QueryRow(`SELECT count(*) FROM idemkit_claims WHERE key = ?`, key.ID()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// doTx runs DoTx in a new transaction and commits it when DoTx succeeds,
// else rolls it back, as a caller would.
func (f *txFixture) doTx(t *testing.T, key idemkit.Key, work sqlitestore.TxWork) (idemkit.Result, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	res, err := f.store.DoTx(ctx, f.guard, tx, key, work)
	if err != nil {
		return res, err
	}
	return res, tx.Commit()
}

func refundInTx(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
	return insertRefund(ctx, tx)
}

func TestDoTx_CommitsClaimAndSideEffectTogether(t *testing.T) {
	f := newTxFixture(t, nil)
	k := refundKey()
	res, err := f.doTx(t, k, refundInTx)
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || res.Attempt != 1 {
		t.Fatalf("first call: %+v, %v; want executed attempt 1", res, err)
	}
	if n, c := refunds(t, f.store.DB()), f.claims(t, k); n != 1 || c != 1 {
		t.Fatalf("after commit: %d refunds, %d claim rows; want 1 and 1", n, c)
	}
	// A duplicate, in a transaction or not, replays.
	dup, err := f.doTx(t, k, func(context.Context, *sql.Tx) (idemkit.Response, error) {
		t.Error("work ran for a duplicate")
		return idemkit.Response{}, nil
	})
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dup.Body, res.Body) || dup.WriteID != res.WriteID {
		t.Fatalf("duplicate DoTx: %+v, %v; want the first call's response replayed", dup, err)
	}
	dup, err = f.guard.Do(context.Background(), k, mustNotRun(t))
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dup.Body, res.Body) {
		t.Fatalf("duplicate Do: %+v, %v; want the first call's response replayed", dup, err)
	}
	if n := refunds(t, f.store.DB()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

func TestDoTx_RolledBackAfterErrorLeavesNoTrace(t *testing.T) {
	f := newTxFixture(t, nil)
	k := refundKey()
	boom := errors.New("gateway said no")
	_, err := f.doTx(t, k, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		if _, err := insertRefund(ctx, tx); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("DoTx: %v, want the work's error", err)
	}
	if n, c := refunds(t, f.store.DB()), f.claims(t, k); n != 0 || c != 0 {
		t.Fatalf("after rollback: %d refunds, %d claim rows; want none", n, c)
	}
	res, err := f.doTx(t, k, refundInTx)
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || res.Attempt != 1 {
		t.Fatalf("retry: %+v, %v; want a fresh execution, attempt 1", res, err)
	}
	if n := refunds(t, f.store.DB()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

func TestDoTx_RolledBackAfterPanicLeavesNoTrace(t *testing.T) {
	f := newTxFixture(t, nil)
	k := refundKey()
	func() {
		defer func() {
			if r := recover(); r != "tool bug" {
				t.Fatalf("recovered %v, want the work's panic", r)
			}
		}()
		f.doTx(t, k, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			if _, err := insertRefund(ctx, tx); err != nil {
				return idemkit.Response{}, err
			}
			panic("tool bug")
		})
	}()
	if n, c := refunds(t, f.store.DB()), f.claims(t, k); n != 0 || c != 0 {
		t.Fatalf("after the panic and rollback: %d refunds, %d claim rows; want none", n, c)
	}
	res, err := f.doTx(t, k, refundInTx)
	if err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("retry: %+v, %v; want executed", res, err)
	}
	if n := refunds(t, f.store.DB()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// A duplicate Do on another goroutine while a DoTx runs waits for SQLite's
// write lock (the transaction's), then finds the committed outcome.
func TestDoTx_ConcurrentDuplicateWaitsThenReplays(t *testing.T) {
	f := newTxFixture(t, nil)
	k := refundKey()
	inWork, release := make(chan struct{}), make(chan struct{})
	first := make(chan idemkit.Result, 1)
	go func() {
		res, err := f.doTx(t, k, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			close(inWork)
			<-release
			return insertRefund(ctx, tx)
		})
		if err != nil {
			t.Errorf("DoTx: %v", err)
		}
		first <- res
	}()
	<-inWork
	dup := make(chan error, 1)
	var dupRes idemkit.Result
	go func() {
		var err error
		dupRes, err = f.guard.Do(context.Background(), k, mustNotRun(t))
		dup <- err
	}()
	select {
	case err := <-dup:
		t.Fatalf("the duplicate returned (%v) while the transaction was open; it should wait for it", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	res := <-first
	if err := <-dup; err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	if dupRes.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dupRes.Body, res.Body) {
		t.Fatalf("duplicate: %+v, want the transaction's response %q replayed", dupRes, res.Body)
	}
	if n := refunds(t, f.store.DB()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// DoTx answers an in-progress call at once even in wait mode: waiting would
// hold the write lock the running call needs to record its outcome.
func TestDoTx_InProgressIsAnsweredWithoutWaiting(t *testing.T) {
	f := newTxFixture(t, &idemkit.Config{Wait: 10 * time.Second})
	k := refundKey()
	inWork, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.guard.Do(context.Background(), k, func(ctx context.Context) (idemkit.Response, error) {
			close(inWork)
			<-release
			return idemkit.Response{Body: []byte(`{"ok":true}`)}, nil
		})
		done <- err
	}()
	<-inWork
	start := time.Now()
	_, err := f.doTx(t, k, func(context.Context, *sql.Tx) (idemkit.Response, error) {
		t.Error("work ran while the first call was in progress")
		return idemkit.Response{}, nil
	})
	var ip *idemkit.InProgressError
	if !errors.As(err, &ip) {
		t.Fatalf("DoTx during an in-progress call: %v, want *InProgressError", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("DoTx took %s to answer; it must not wait", d)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first call could not record its outcome: %v", err)
	}
}

func TestDoTx_LargeResponseStoredApartInTheTransaction(t *testing.T) {
	f := newTxFixture(t, nil)
	k := refundKey()
	body := bytes.Repeat([]byte{0, 0xff, '"', 'x'}, 100<<10)
	res, err := f.doTx(t, k, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		if _, err := insertRefund(ctx, tx); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{Body: body}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("DoTx: %+v, %v", res.Outcome, err)
	}
	var n int
	if err := f.store.DB().QueryRow(`SELECT count(*) FROM idemkit_responses WHERE key = ?`, k.ID()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("external bodies: %d (%v), want 1", n, err)
	}
	dup, err := f.guard.Do(context.Background(), k, mustNotRun(t))
	if err != nil || dup.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(dup.Body, body) {
		t.Fatalf("duplicate: replayed=%v err=%v equal=%v", (dup.Outcome == idemkit.OutcomeReplayed), err, bytes.Equal(dup.Body, body))
	}
}

func TestDoTx_RejectsMissingArguments(t *testing.T) {
	f := newTxFixture(t, nil)
	if _, err := f.store.DoTx(context.Background(), f.guard, nil, refundKey(), refundInTx); err == nil {
		t.Fatal("DoTx with a nil transaction: no error")
	}
}
