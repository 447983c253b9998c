package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
)

// damageRecord damages the record of key with SQL, as an operator's
// mistaken UPDATE, a restore gone wrong or a failing disk would
// (storetest.Config.Damage).
func damageRecord(t *testing.T, store idemstore.Store, key string, d storetest.Damage) {
	t.Helper()
	ctx := context.Background()
	// One connection for the statements and the pragma they may need.
	conn, err := store.(*sqlitestore.Store).DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var stmts []string
	args := []any{key}
	switch d {
	case storetest.DamageBody:
		stmts = []string{
			`UPDATE idemkit_claims SET response = randomblob(length(response)) WHERE key = ?1 AND response IS NOT NULL AND storage = 0`,
			`UPDATE idemkit_responses SET body = randomblob(length(body)) WHERE key = ?1`,
		}
	case storetest.DamageWriteID:
		stmts = []string{`UPDATE idemkit_claims SET write_id = 're_9999' WHERE key = ?1`}
	case storetest.DamageIsError:
		stmts = []string{`UPDATE idemkit_claims SET is_error = 1 - is_error WHERE key = ?1`}
	case storetest.DamageStorage:
		// The schema's CHECK keeps the column in range; a file edited by
		// other means is not held to it.
		if _, err := conn.ExecContext(ctx, `PRAGMA ignore_check_constraints = ON`); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(ctx, `PRAGMA ignore_check_constraints = OFF`)
		stmts = []string{`UPDATE idemkit_claims SET storage = 7 WHERE key = ?1`}
	case storetest.DamageDropBody:
		stmts = []string{`DELETE FROM idemkit_responses WHERE key = ?1`}
	case storetest.DamageChecksum:
		stmts = []string{`UPDATE idemkit_claims SET checksum = randomblob(32) WHERE key = ?1 AND checksum IS NOT NULL`}
	case storetest.DamageUncheck:
		stmts = []string{`UPDATE idemkit_claims SET checksum = NULL, checksum_token = NULL WHERE key = ?1 AND checksum IS NOT NULL`}
	case storetest.DamageRewrite:
		// What sqlitestore before migration 004 writes when it takes the
		// record over and finishes it: a new token and outcome, the
		// checksum untouched.
		stmts = []string{`UPDATE idemkit_claims SET token = token + 1, response = CAST(?2 AS BLOB), storage = 0,
    size = length(CAST(?2 AS BLOB)), write_id = ?3, is_error = 0 WHERE key = ?1`}
		args = append(args, storetest.RewrittenBody, storetest.RewrittenWriteID)
	default:
		t.Fatalf("damageRecord: unknown damage %q", d)
	}
	var n int64
	for _, q := range stmts {
		res, err := conn.ExecContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("damage %s: %v", d, err)
		}
		m, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	if n != 1 {
		t.Fatalf("damage %s changed %d rows, want 1", d, n)
	}
}

// Records completed before migration 004 have no checksum: after the
// upgrade they replay as they are (unchecked).
func TestMigrate_004RecordsFromBeforeReplayUnchecked(t *testing.T) {
	ctx := context.Background()
	store := openFile(t, nil)
	db := store.DB()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateDownTx(ctx, tx, 3); err != nil {
		t.Fatalf("MigrateDownTx(3): %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	k, err := idemkit.NewKey("alice", "refund", []byte(`{"order_id":"ord_1012"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	if _, err := db.ExecContext(ctx, `INSERT INTO idemkit_claims (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at, sweep_at,
    response, storage, size, write_id, created_at, updated_at)
VALUES (?1, 'refund', '', 'succeeded', 1, 1, ?2, ?2, ?3, ?3, CAST('old body' AS BLOB), 0, 8, 're_old', ?2, ?2)`, k.ID(), now, now+int64(time.Hour)); err != nil {
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
}
