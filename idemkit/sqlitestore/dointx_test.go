package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// DoInTx commits the claim, the work's writes and the outcome together; a
// work error or a failed commit leaves none of them, and the retry runs.
func TestDoInTx_CommitsAllOrNothing(t *testing.T) {
	f := newTxFixture(t, nil)
	ctx := context.Background()
	db := f.store.DB()
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY);
		CREATE TABLE lines (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id));
		INSERT INTO orders VALUES ('o-1')`); err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM lines`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert := func(order string, deferred bool, fail error) func(context.Context, *sql.Tx) (idemkit.Response, error) {
		return func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			if deferred {
				if _, err := tx.ExecContext(ctx, `PRAGMA defer_foreign_keys = ON`); err != nil {
					return idemkit.Response{}, err
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO lines (order_id) VALUES (?)`, order); err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{Body: []byte("ok")}, fail
		}
	}
	key := func(args string) idemkit.Key {
		k, err := idemkit.NewKey("s", "add_line", []byte(args), nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	k := key(`{"order":"o-1"}`)
	if res, err := f.store.DoInTx(ctx, f.guard, k, insert("o-1", false, nil)); err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("DoInTx: %+v, %v", res, err)
	}
	if res, err := f.store.DoInTx(ctx, f.guard, k, insert("o-1", false, nil)); err != nil || res.Outcome != idemkit.OutcomeReplayed || lines() != 1 || f.claims(t, k) != 1 {
		t.Fatalf("duplicate: %+v, %v, %d lines", res, err, lines())
	}

	boom := errors.New("gateway refused")
	kf := key(`{"order":"o-1","n":2}`)
	if _, err := f.store.DoInTx(ctx, f.guard, kf, insert("o-1", false, boom)); !errors.Is(err, boom) || lines() != 1 || f.claims(t, kf) != 0 {
		t.Fatalf("work error: %v, %d lines, %d claims; want the error and nothing kept", err, lines(), f.claims(t, kf))
	}

	// The foreign key is checked at the commit, which fails after the
	// work succeeded: nothing remains, the error says so.
	kc := key(`{"order":"o-404"}`)
	if _, err := f.store.DoInTx(ctx, f.guard, kc, insert("o-404", true, nil)); !errors.Is(err, idemkit.ErrStore) || lines() != 1 || f.claims(t, kc) != 0 {
		t.Fatalf("failed commit: %v, %d lines, %d claims; want ErrStore and nothing kept", err, lines(), f.claims(t, kc))
	}
	if _, err := db.Exec(`INSERT INTO orders VALUES ('o-404')`); err != nil {
		t.Fatal(err)
	}
	if res, err := f.store.DoInTx(ctx, f.guard, kc, insert("o-404", true, nil)); err != nil || res.Outcome != idemkit.OutcomeExecuted || lines() != 2 {
		t.Fatalf("the retry: %+v, %v, %d lines", res, err, lines())
	}
	// InTx: no claim, all or nothing.
	if err := f.store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO lines (order_id) VALUES ('o-1')`)
		return errors.Join(err, boom)
	}); !errors.Is(err, boom) || lines() != 2 {
		t.Fatalf("InTx with an error: %v, %d lines", err, lines())
	}
}
