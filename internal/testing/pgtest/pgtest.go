// Package pgtest gives a test binary a real, throwaway PostgreSQL.
//
// Call Main from TestMain. It uses TEST_DATABASE_URL when set; otherwise it
// creates a cluster of its own: initdb into a temporary directory, started
// as the postgres user when running as root (root cannot run postgres),
// listening on 127.0.0.1 only, with fsync off, and stopped and removed when
// the tests end. Either way the package gets a database of its own, dropped
// at the end, so test packages running in parallel do not interfere.
//
// There is no skipping: when no PostgreSQL can be had, Main fails the run
// with instructions. Set PGTEST_BIN to the directory holding initdb and
// pg_ctl when they are not in the usual Debian place.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	mu    sync.Mutex        // protects what follows
	dsn   string            // the package database's DSN, set by Main
	admin string            // the DSN Main created it with
	fresh map[string]string // test name -> its own database's DSN (Database)
)

// Main sets up the database, runs the tests and tears everything down. Use
// it as the whole body of TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it returns the exit code, so that TestMain
// can run more checks (goleak) before exiting.
func Run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin0 := os.Getenv("TEST_DATABASE_URL")
	if admin0 == "" {
		c, err := startCluster(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cannot start a throwaway PostgreSQL: %v\n"+
				"pgtest: install PostgreSQL 15 (apt-get install -y postgresql-15) or set TEST_DATABASE_URL to a server this test may create databases on.\n", err)
			return 2
		}
		defer c.stop()
		admin0 = c.dsn
	}
	db, drop, err := createDatabase(ctx, admin0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 2
	}
	mu.Lock()
	dsn, admin = db, admin0
	mu.Unlock()
	code := m.Run()
	if err := drop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: dropping the test database: %v\n", err)
	}
	return code
}

// DSN returns the DSN of the package's test database. It fails the test
// when Main has not run.
func DSN(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if dsn == "" {
		t.Fatal("pgtest: no database; call pgtest.Main from TestMain")
	}
	return dsn
}

// Database returns the DSN of a database of the test's own, empty when the
// test first asks for it and dropped at its end: for tests whose code under
// test keeps its tables in a fixed schema (a program given only a DSN), so
// that no record of another test, or of the same test's previous run
// (go test -count), is found there. Every call of one test (by name) gets
// the same database.
func Database(t testing.TB) string {
	t.Helper()
	DSN(t) // Main ran
	mu.Lock()
	defer mu.Unlock()
	if d, ok := fresh[t.Name()]; ok {
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, drop, err := createDatabase(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if fresh == nil {
		fresh = map[string]string{}
	}
	fresh[t.Name()] = d
	name := t.Name()
	t.Cleanup(func() {
		mu.Lock()
		delete(fresh, name)
		mu.Unlock()
		if err := drop(); err != nil {
			t.Errorf("pgtest: dropping the test's database: %v", err)
		}
	})
	return d
}

// Pool returns a pool on the package's test database, closed at the end of
// the test.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolOn(t, DSN(t))
}

// PoolOn returns a pool on the database of dsn, closed at the end of the
// test.
func PoolOn(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema returns the name of a new, empty schema for one test, dropped at
// the end of the test.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := "t_" + randomHex(6)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func createDatabase(ctx context.Context, admin string) (string, func() error, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(ctx)
	name := "idemkit_test_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(admin)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return u.String(), drop, nil
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "the database"
	}
	return u.Redacted()
}

// cluster is a PostgreSQL server this package started.
type cluster struct {
	dir, pgctl string
	asUser     string
	dsn        string
}

func binDir() (string, error) {
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	for i := len(matches) - 1; i >= 0; i-- {
		if strings.Contains(matches[i], "/15/") {
			return filepath.Dir(matches[i]), nil
		}
	}
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("initdb not found (looked at PGTEST_BIN, pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command runs a PostgreSQL program, as the postgres user when we are root.
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if c.asUser != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asUser, "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func startCluster(ctx context.Context) (*cluster, error) {
	c, _, err := startClusterWith(ctx, " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
	return c, err
}

// startClusterWith initialises and starts a server with settings (extra -c
// options) and returns it and its port.
func startClusterWith(ctx context.Context, settings string) (*cluster, int, error) {
	bin, err := binDir()
	if err != nil {
		return nil, 0, err
	}
	dir, err := os.MkdirTemp("", "idemkit-pg-")
	if err != nil {
		return nil, 0, err
	}
	c := &cluster{dir: dir, pgctl: filepath.Join(bin, "pg_ctl")}
	fail := func(err error) (*cluster, int, error) {
		_ = os.RemoveAll(dir)
		return nil, 0, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root needs a postgres user to run the server: %w", err))
		}
		c.asUser = "postgres"
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.command(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	var lastErr error
	for range 5 { // a free port can be taken between probing and binding
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200%s", port, dir, settings)
		out, err := c.command(ctx, c.pgctl, "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "-o", opts, "start").CombinedOutput()
		if err == nil {
			c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return c, port, nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		lastErr = fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return fail(lastErr)
}

func (c *cluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.command(ctx, c.pgctl, "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	_ = os.RemoveAll(c.dir)
}

// Cluster is a PostgreSQL server of one test's own, for tests that stop,
// restart or crash it (chaos tests), never shared with other tests.
type Cluster struct {
	c    *cluster
	data string
	opts string
	port int
}

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Durable keeps fsync and synchronous commits on, as a production server
	// runs: what a crash (pg_ctl stop -m immediate) leaves is then what a
	// real one would. Defaults to false (the fast settings of the package
	// cluster).
	Durable bool
}

// StartCluster starts a new PostgreSQL server for t, on 127.0.0.1 at a port
// of its own, and removes it when t ends. It always starts a server of its
// own (TEST_DATABASE_URL is not used: a chaos test must not restart a
// shared server), and fails t when it cannot.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	settings := ""
	if !o.Durable {
		settings = " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	c, port, err := startClusterWith(ctx, settings)
	if err != nil {
		t.Fatalf("pgtest: cannot start a PostgreSQL server: %v", err)
	}
	cl := &Cluster{c: c, data: filepath.Join(c.dir, "data"), port: port}
	cl.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200%s", port, c.dir, settings)
	t.Cleanup(c.stop)
	return cl
}

// DSN returns the server's postgres database DSN.
func (cl *Cluster) DSN() string { return cl.c.dsn }

// Addr returns the server's host:port.
func (cl *Cluster) Addr() string { return fmt.Sprintf("127.0.0.1:%d", cl.port) }

// Restart runs pg_ctl restart with the shutdown mode ("smart", "fast" or
// "immediate") and waits until the server accepts connections again.
// "immediate" is a crash: the server recovers from its WAL on start.
func (cl *Cluster) Restart(ctx context.Context, mode string) error {
	out, err := cl.c.command(ctx, cl.c.pgctl, "-D", cl.data, "-l", filepath.Join(cl.c.dir, "server.log"), "-w", "-t", "60",
		"-m", mode, "-o", cl.opts, "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl restart -m %s: %v\n%s", mode, err, out)
	}
	return nil
}
