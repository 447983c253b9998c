package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// A refund tool on a durable store: the duplicate is replayed even by a
// process that opens the file after a restart.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "idemkit-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idemkit.db")
	ctx := context.Background()
	key, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-1","amount_cents":500}`), nil)
	refund := func(context.Context) (idemkit.Response, error) {
		fmt.Println("refunding o-1")
		return idemkit.Response{Body: []byte(`{"refund_id":"re_1"}`), WriteID: "re_1"}, nil
	}

	for run := range 2 { // the second run stands for the process after a restart
		store, err := sqlitestore.Open(ctx, path, nil)
		if err != nil {
			panic(err)
		}
		guard, _ := idemkit.NewGuard(store, nil)
		res, err := guard.Do(ctx, key, refund)
		if err != nil {
			panic(err)
		}
		fmt.Printf("run %d: %s %s\n", run+1, res.Outcome, res.Body)
		store.Close()
	}
	// Output:
	// refunding o-1
	// run 1: executed {"refund_id":"re_1"}
	// run 2: replayed {"refund_id":"re_1"}
}

// The claim, the tool's own write and the outcome commit together.
func ExampleStore_DoTx() {
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, ":memory:", nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE refunds (order_id TEXT NOT NULL)`); err != nil {
		panic(err)
	}
	guard, _ := idemkit.NewGuard(store, nil)
	key, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-1"}`), nil)

	refund := func() {
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback()
		res, err := store.DoTx(ctx, guard, tx, key, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (order_id) VALUES ('o-1')`); err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{Body: []byte(`{"refunded":"o-1"}`)}, nil
		})
		if err != nil {
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(res.Outcome, string(res.Body))
	}
	refund()
	refund()

	var n int
	store.DB().QueryRowContext(ctx, `SELECT count(*) FROM refunds`).Scan(&n)
	fmt.Println("refund rows:", n)
	// Output:
	// executed {"refunded":"o-1"}
	// replayed {"refunded":"o-1"}
	// refund rows: 1
}
