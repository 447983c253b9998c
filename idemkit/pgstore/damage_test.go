package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
)

// damageRecord damages the record of key with SQL, as an operator's
// mistaken UPDATE, a restore gone wrong or a failing disk would
// (storetest.Config.Damage).
func damageRecord(t *testing.T, store idemstore.Store, key string, d storetest.Damage) {
	t.Helper()
	s := store.(*pgstore.Store)
	schema, ok := storeSchemas.Load(s)
	if !ok {
		t.Fatal("damageRecord: the store was not made by newStore")
	}
	p := pgx.Identifier{schema.(string)}.Sanitize() + "."
	claims, responses := p+"idemkit_claims", p+"idemkit_responses"
	var stmts []string
	args := []any{key}
	switch d {
	case storetest.DamageBody:
		stmts = []string{
			`UPDATE ` + claims + ` SET response = convert_to(repeat('X', octet_length(response)), 'UTF8') WHERE key = $1 AND response IS NOT NULL`,
			`UPDATE ` + responses + ` SET body = convert_to(repeat('X', octet_length(body)), 'UTF8') WHERE key = $1`,
		}
	case storetest.DamageWriteID:
		stmts = []string{`UPDATE ` + claims + ` SET write_id = convert_to('re_9999', 'UTF8') WHERE key = $1`}
	case storetest.DamageIsError:
		stmts = []string{`UPDATE ` + claims + ` SET is_error = NOT is_error WHERE key = $1`}
	case storetest.DamageStorage:
		stmts = []string{`UPDATE ` + claims + ` SET storage = 7 WHERE key = $1`}
	case storetest.DamageDropBody:
		stmts = []string{`DELETE FROM ` + responses + ` WHERE key = $1`}
	case storetest.DamageChecksum:
		stmts = []string{`UPDATE ` + claims + ` SET checksum = sha256('another outcome'::bytea) WHERE key = $1 AND checksum IS NOT NULL`}
	case storetest.DamageUncheck:
		stmts = []string{`UPDATE ` + claims + ` SET checksum = NULL, checksum_token = NULL WHERE key = $1 AND checksum IS NOT NULL`}
	case storetest.DamageRewrite:
		// What pgstore before migration 004 writes when it takes the record
		// over and finishes it: a new token and outcome, checksum untouched.
		stmts = []string{`UPDATE ` + claims + ` SET token = token + 1, response = convert_to($2, 'UTF8'), storage = 0,
    size = octet_length(convert_to($2, 'UTF8')), write_id = convert_to($3, 'UTF8'), is_error = false WHERE key = $1`}
		args = append(args, storetest.RewrittenBody, storetest.RewrittenWriteID)
	default:
		t.Fatalf("damageRecord: unknown damage %q", d)
	}
	var n int64
	for _, q := range stmts {
		tag, err := s.DB().Exec(context.Background(), q, args...)
		if err != nil {
			t.Fatalf("damage %s: %v", d, err)
		}
		n += tag.RowsAffected()
	}
	if n != 1 {
		t.Fatalf("damage %s changed %d rows, want 1", d, n)
	}
}

// Records completed before migration 004 have no checksum: after the
// upgrade they replay as they are (unchecked), and the down migration
// leaves records written after it readable by the version before.
func TestMigrate_004RecordsFromBeforeReplayUnchecked(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.MigrateDownTx(ctx, tx, 3) }); err != nil {
		t.Fatalf("MigrateDownTx(3): %v", err)
	}
	k := mustKey(t, "alice", "refund", `{"order_id":"ord_1012"}`)
	table := pgx.Identifier{schema, "idemkit_claims"}.Sanitize()
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at, response, size, write_id)
VALUES ($1, 'refund', '', 'succeeded', 1, 1, now(), now(), now() + interval '1 hour', 'old body', 8, 're_old')`, k.ID()); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over version 3 with records: %v", err)
	}
	g, _ := idemkit.NewGuard(store, nil)
	res, err := g.Do(ctx, k, func(context.Context) (idemkit.Response, error) {
		t.Error("the work ran for a completed record")
		return idemkit.Response{}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != "old body" || res.WriteID != "re_old" {
		t.Fatalf("replay of a record from before 004: %+v %v", res, err)
	}
	// A record written with a checksum, then the schema taken back to 3:
	// the version before reads it.
	k2 := mustKey(t, "alice", "refund", `{"order_id":"ord_1013"}`)
	if _, err := g.Do(ctx, k2, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("new body"), WriteID: "re_new"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.MigrateDownTx(ctx, tx, 3) }); err != nil {
		t.Fatalf("MigrateDownTx(3) with records: %v", err)
	}
	var body []byte
	if err := pool.QueryRow(ctx, `SELECT response FROM `+table+` WHERE key = $1`, k2.ID()).Scan(&body); err != nil || string(body) != "new body" {
		t.Fatalf("record after the down migration: %q %v", body, err)
	}
}
