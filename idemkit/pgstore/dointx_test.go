package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// DoInTx commits the claim, the work's writes and the outcome together; a
// work error or a failed commit (a deferred constraint) leaves none of
// them, and the retry runs.
func TestDoInTx_CommitsAllOrNothing(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	orders := pgx.Identifier{f.schema, "orders"}.Sanitize()
	lines := pgx.Identifier{f.schema, "lines"}.Sanitize()
	if _, err := f.pool.Exec(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY);
		CREATE TABLE `+lines+` (id bigserial PRIMARY KEY, order_id text NOT NULL REFERENCES `+orders+`(id) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO `+orders+` VALUES ('o-1')`); err != nil {
		t.Fatal(err)
	}
	n := func() int { return count(t, f.pool, `SELECT count(*) FROM `+lines) }
	claims := func(k idemkit.Key) int {
		return count(t, f.pool, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "idemkit_claims"}.Sanitize()+` WHERE key = $1`, k.ID())
	}
	insert := func(order string, fail error) func(context.Context, pgx.Tx) (idemkit.Response, error) {
		return func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO `+lines+` (order_id) VALUES ($1)`, order); err != nil {
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
	if res, err := f.store.DoInTx(ctx, f.guard, k, insert("o-1", nil)); err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("DoInTx: %+v, %v", res, err)
	}
	if res, err := f.store.DoInTx(ctx, f.guard, k, insert("o-1", nil)); err != nil || res.Outcome != idemkit.OutcomeReplayed || n() != 1 || claims(k) != 1 {
		t.Fatalf("duplicate: %+v, %v, %d lines", res, err, n())
	}
	boom := errors.New("gateway refused")
	kf := key(`{"order":"o-1","n":2}`)
	if _, err := f.store.DoInTx(ctx, f.guard, kf, insert("o-1", boom)); !errors.Is(err, boom) || n() != 1 || claims(kf) != 0 {
		t.Fatalf("work error: %v, %d lines, %d claims", err, n(), claims(kf))
	}
	kc := key(`{"order":"o-404"}`)
	if _, err := f.store.DoInTx(ctx, f.guard, kc, insert("o-404", nil)); !errors.Is(err, idemkit.ErrStore) || n() != 1 || claims(kc) != 0 {
		t.Fatalf("failed commit: %v, %d lines, %d claims; want ErrStore and nothing kept", err, n(), claims(kc))
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+orders+` VALUES ('o-404')`); err != nil {
		t.Fatal(err)
	}
	if res, err := f.store.DoInTx(ctx, f.guard, kc, insert("o-404", nil)); err != nil || res.Outcome != idemkit.OutcomeExecuted || n() != 2 {
		t.Fatalf("the retry: %+v, %v, %d lines", res, err, n())
	}
	if err := f.store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+lines+` (order_id) VALUES ('o-1')`)
		return errors.Join(err, boom)
	}); !errors.Is(err, boom) || n() != 2 {
		t.Fatalf("InTx with an error: %v, %d lines", err, n())
	}
}
