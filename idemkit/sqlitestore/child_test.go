package sqlitestore_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// The restart tests run their first call in a child process: the test
// binary itself, started with childModeEnv set, which TestMain hands to
// child instead of running the tests.
const (
	childModeEnv = "IDEMKIT_SQLITESTORE_CHILD"
	childDBEnv   = "IDEMKIT_SQLITESTORE_CHILD_DB"
)

// Child modes.
const (
	// childDoExit: Do one refund, print "done", close the store, exit 0.
	childDoExit = "do-exit"
	// childDoHang: Do one refund, print "done", then hang until killed.
	childDoHang = "do-hang"
	// childDoTxHangBeforeFinish: DoTx one refund whose work inserts the
	// side effect in the transaction, prints "side-effect" and hangs, so
	// that neither the finish nor the commit happens before the kill.
	childDoTxHangBeforeFinish = "dotx-hang-before-finish"
	// childDoHangBeforeFinish: Do one refund (with a 2s lease) whose work
	// commits the side effect on its own, prints "side-effect" and hangs.
	childDoHangBeforeFinish = "do-hang-before-finish"
)

// child runs the child side of a restart test and exits, when the test
// binary was started as a child; otherwise it returns false.
func child() bool {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		return false
	}
	if err := runChild(mode, os.Getenv(childDBEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	os.Exit(0)
	return true
}

// refundKey is the key every restart test claims.
func refundKey() idemkit.Key {
	k, err := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-1","amount_cents":500}`), nil)
	if err != nil {
		panic(err)
	}
	return k
}

const sideEffectsSchema = `CREATE TABLE IF NOT EXISTS refunds (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, pid INTEGER NOT NULL)`

// insertRefund is the side effect: a row in the same database.
func insertRefund(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}) (idemkit.Response, error) {
	res, err := db.ExecContext(ctx, `INSERT INTO refunds (order_id, pid) VALUES ('o-1', ?)`, os.Getpid())
	if err != nil {
		return idemkit.Response{}, err
	}
	id, _ := res.LastInsertId()
	return idemkit.Response{Body: fmt.Appendf(nil, `{"refund_id":"re_%d"}`, id), WriteID: fmt.Sprintf("re_%d", id)}, nil
}

func runChild(mode, path string) error {
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	if _, err := store.DB().ExecContext(ctx, sideEffectsSchema); err != nil {
		return err
	}
	g, err := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
	if err != nil {
		return err
	}
	hang := func(what string) {
		fmt.Println(what)
		select {} // until SIGKILL
	}
	switch mode {
	case childDoExit, childDoHang:
		res, err := g.Do(ctx, refundKey(), func(ctx context.Context) (idemkit.Response, error) {
			return insertRefund(ctx, store.DB())
		})
		if err != nil {
			return err
		}
		if mode == childDoHang {
			hang("done " + string(res.Body))
		}
		fmt.Println("done " + string(res.Body))
		return store.Close()
	case childDoTxHangBeforeFinish:
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		_, err = store.DoTx(ctx, g, tx, refundKey(), func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			if _, err := insertRefund(ctx, tx); err != nil {
				return idemkit.Response{}, err
			}
			hang("side-effect")
			panic("unreachable")
		})
		return err
	case childDoHangBeforeFinish:
		_, err := g.Do(ctx, refundKey(), func(ctx context.Context) (idemkit.Response, error) {
			if _, err := insertRefund(ctx, store.DB()); err != nil {
				return idemkit.Response{}, err
			}
			hang("side-effect")
			panic("unreachable")
		})
		return err
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

// startChild runs the test binary as a child in mode against the database
// at path, waits until it prints a line starting with want, and returns the
// line and the child. kill sends SIGKILL at that point; otherwise the child
// must exit by itself with status 0.
func startChild(t *testing.T, mode, path, want string, kill bool) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the restart tests kill a child process with SIGKILL")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDBEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), want) {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child %s exited without printing %q", mode, want)
		}
		line = l
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child %s did not print %q within 60s", mode, want)
	}
	if kill {
		if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred code, no Close
			t.Fatal(err)
		}
		_ = cmd.Wait()
		return line
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child %s: %v", mode, err)
	}
	return line
}
