package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Defaults of Config.
const (
	// DefaultBusyTimeout is how long a statement waits for a write lock
	// held by another connection or process.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultMaxOpenConns is the size of the connection pool Open makes.
	DefaultMaxOpenConns = 1
	// DefaultReadConns is the size of the pool of read-only connections
	// Open makes beside it.
	DefaultReadConns = 4
)

// Synchronous is SQLite's PRAGMA synchronous, which trades durability
// against commit latency. In WAL mode both settings below survive a crash of
// the process (kill -9, panic) with every committed claim intact; they
// differ on a crash of the machine.
type Synchronous string

// Synchronous settings.
const (
	// SynchronousFull syncs the WAL on every commit: a committed claim or
	// outcome survives a power loss or an OS crash. This is the default,
	// because a lost outcome makes the next duplicate run the work again.
	SynchronousFull Synchronous = "FULL"
	// SynchronousNormal syncs only at checkpoints: commits are faster, and
	// the database is never corrupted, but a power loss or an OS crash may
	// roll back the last transactions, and a duplicate after the reboot may
	// then run work again whose outcome was lost.
	SynchronousNormal Synchronous = "NORMAL"
)

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// BusyTimeout is how long a statement on a connection Open makes waits
	// for the write lock another connection or process holds (PRAGMA
	// busy_timeout) before failing with an error matching ErrBusy. The
	// caller's ctx still ends the wait earlier. Defaults to
	// DefaultBusyTimeout (5s).
	BusyTimeout time.Duration

	// Synchronous is the PRAGMA synchronous of connections Open makes.
	// Defaults to SynchronousFull.
	Synchronous Synchronous

	// MaxOpenConns bounds the connection pool Open makes. Every claim is a
	// write and SQLite runs one writer at a time, so one connection, for
	// which calls (and DoTx transactions) queue in database/sql, bounded by
	// their ctx, instead of polling SQLite's lock, loses nothing; more let
	// readers of DB() run beside a writer, and the store's own writes then
	// queue in Go. A ":memory:" database always has exactly one. Defaults
	// to DefaultMaxOpenConns (1).
	MaxOpenConns int

	// ReadConns bounds the pool of read-only connections (PRAGMA
	// query_only) that Open makes on the same file beside the writer's
	// pool: Lookup, List, Response (a replay's body stored apart) and the
	// tool's own reads through ReadDB run on it, and under WAL a reader
	// sees the last committed state without waiting for the writer, however
	// long a transaction holds the write lock. A ":memory:" database has
	// none (its reads share its one connection). Defaults to
	// DefaultReadConns (4).
	ReadConns int

	// NoMigrate stops Open from applying the embedded migrations; call
	// Migrate or MigrateTx yourself. Defaults to false (Open migrates).
	NoMigrate bool
}

func (c *Config) validate() error {
	var errs []error
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqlitestore: Config.BusyTimeout must not be negative, got %s", c.BusyTimeout))
	}
	switch c.Synchronous {
	case "", SynchronousFull, SynchronousNormal:
	default:
		errs = append(errs, fmt.Errorf("sqlitestore: Config.Synchronous must be %q or %q, got %q", SynchronousFull, SynchronousNormal, c.Synchronous))
	}
	if c.MaxOpenConns < 0 {
		errs = append(errs, fmt.Errorf("sqlitestore: Config.MaxOpenConns must not be negative, got %d", c.MaxOpenConns))
	}
	if c.ReadConns < 0 {
		errs = append(errs, fmt.Errorf("sqlitestore: Config.ReadConns must not be negative, got %d", c.ReadConns))
	}
	return errors.Join(errs...)
}

func (c *Config) withDefaults() Config {
	var o Config
	if c != nil {
		o = *c
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.Synchronous == "" {
		o.Synchronous = SynchronousFull
	}
	if o.MaxOpenConns == 0 {
		o.MaxOpenConns = DefaultMaxOpenConns
	}
	if o.ReadConns == 0 {
		o.ReadConns = DefaultReadConns
	}
	return o
}

// Store is an idemstore.Store kept in an SQLite database: durable across
// restarts, with no server to run. Build it with Open (a file path) or New
// (a caller-owned *sql.DB). It is safe for concurrent use by many
// goroutines, and many processes may share one database file on one
// machine (not over a network file system, which WAL does not support).
//
// Its clock, when a request's Now is zero, is the machine's: the one clock
// every process sharing the file reads.
type Store struct {
	db    *sql.DB
	rdb   *sql.DB // the read-only pool; db when there is none
	owned bool    // Close closes db and rdb (Open made them)

	// gate serialises this Store's own writes within the process, so that
	// they queue in Go, in order and with the ends of work first, instead
	// of polling SQLite's write lock with sleeps or waiting for a
	// connection in database/sql, which picks a random waiter (see
	// writeGate). Transactions the caller begins on DB() for DoTx do not
	// pass through it.
	gate writeGate

	stmts atomic.Pointer[statements] // nil until first use, and after Close

	mu     sync.Mutex // protects closed, and preparing stmts
	closed bool
}

var _ idemstore.Store = (*Store)(nil)

// statements are the store's statements prepared on its pool.
type statements struct {
	claim, succeeded, failed, extend, response, sweep, putResponse, lookup, list, cancel *sql.Stmt
	// The reads on the read-only pool (the same as above without one).
	rresponse, rlookup, rlist *sql.Stmt
}

func (st *statements) close() error {
	var errs []error
	for _, s := range []*sql.Stmt{st.claim, st.succeeded, st.failed, st.extend, st.response, st.sweep, st.putResponse, st.lookup, st.list, st.cancel,
		st.rresponse, st.rlookup, st.rlist} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// Open opens (creating it if needed) the SQLite database at path and returns
// a Store on it, with the embedded migrations applied unless
// cfg.NoMigrate. path is a file name or ":memory:" for a database that lives
// as long as the Store (on a single connection, for tests). cfg may be nil.
//
// Every connection runs in WAL mode (readers never block the writer) with
// foreign keys on, PRAGMA busy_timeout set to cfg.BusyTimeout, PRAGMA
// synchronous set to cfg.Synchronous, and transactions that take the write
// lock at BEGIN (BEGIN IMMEDIATE), so that a transaction never fails to
// upgrade a read lock when another writer got in first. Begin DoTx
// transactions on DB(). ctx bounds opening and migrating; Close releases
// the database.
func Open(ctx context.Context, path string, cfg *Config) (*Store, error) {
	if cfg != nil {
		if err := cfg.validate(); err != nil {
			return nil, err
		}
	}
	c := cfg.withDefaults()
	if path == "" {
		return nil, errors.New(`sqlitestore: Open needs a path: a file name, or ":memory:"`)
	}
	memory := path == ":memory:"
	db, err := sql.Open("sqlite", dsn(path, memory, &c))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	conns := c.MaxOpenConns
	if memory {
		// Each connection to ":memory:" is a database of its own: keep
		// exactly one, forever.
		conns = 1
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)

	s := newStore(db)
	s.owned = true
	if err := openRetrying(ctx, c.BusyTimeout, func() error {
		if err := db.PingContext(ctx); err != nil {
			return interpretError("open "+path, err)
		}
		if c.NoMigrate {
			return nil
		}
		return s.Migrate(ctx)
	}); err != nil {
		db.Close()
		return nil, err
	}
	if !memory {
		// Opened after the writer, which made the file WAL.
		rdb, err := sql.Open("sqlite", readDSN(path, &c))
		if err == nil {
			rdb.SetMaxOpenConns(c.ReadConns)
			rdb.SetMaxIdleConns(c.ReadConns)
			err = interpretError("open the read pool of "+path, rdb.PingContext(ctx))
			if err != nil {
				rdb.Close()
			}
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
		}
		s.rdb = rdb
	}
	return s, nil
}

// openRetrying runs open until it succeeds, fails with an error that is not
// SQLite busy, or busy errors have lasted busyTimeout (or ctx ends). Several
// processes opening one new file at once race to switch it to WAL and to
// migrate it; SQLite answers some of those races with SQLITE_BUSY at once,
// without waiting for the busy timeout (a journal-mode change, a read that
// must upgrade to a write), so Open retries them itself.
func openRetrying(ctx context.Context, busyTimeout time.Duration, open func() error) error {
	deadline := time.Now().Add(busyTimeout)
	wait := 5 * time.Millisecond
	for {
		err := open()
		if err == nil || !errors.Is(err, ErrBusy) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// dsn builds the modernc.org/sqlite data source name of path.
func dsn(path string, memory bool, c *Config) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(int64((c.BusyTimeout+time.Millisecond-1)/time.Millisecond)))
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", string(c.Synchronous))
	q.Set("_txlock", "immediate")
	if memory {
		return ":memory:?" + q.Encode()
	}
	q.Set("_journal_mode", "WAL")
	return fileURI(path) + "?" + q.Encode()
}

// fileURI is path as a file: URI, so that a path holding '?' or '#' stays
// a path.
func fileURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// readDSN builds the data source name of the read-only pool on path: the
// writer's settings with PRAGMA query_only, and transactions that take no
// lock at BEGIN (a reader's snapshot starts at its first read).
func readDSN(path string, c *Config) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(int64((c.BusyTimeout+time.Millisecond-1)/time.Millisecond)))
	q.Set("_foreign_keys", "1")
	q.Set("_query_only", "1")
	return fileURI(path) + "?" + q.Encode()
}

// New returns a Store on db, a caller-owned *sql.DB opened with the
// modernc.org/sqlite driver; Close leaves db open. cfg may be nil; its
// connection settings apply only to Open, so configure db as Open would:
// WAL, a busy_timeout, "_txlock=immediate" for DoTx transactions and, ideally,
// db.SetMaxOpenConns(1). New does not touch the database: call Migrate (or
// MigrateTx) before the first call unless the schema is managed elsewhere.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlitestore: New needs a *sql.DB")
	}
	if cfg != nil {
		if err := cfg.validate(); err != nil {
			return nil, err
		}
	}
	return newStore(db), nil
}

func newStore(db *sql.DB) *Store {
	return &Store{db: db, rdb: db}
}

// DB returns the store's database. Begin the transactions given to DoTx on
// it, and use it for the tool's own tables.
func (s *Store) DB() *sql.DB { return s.db }

// ReadDB returns the store's pool of read-only connections on the same
// file (see Config.ReadConns), for the tool's own reads: under WAL a read
// on it sees the last committed state and never waits for the writer,
// even while a transaction on DB() holds the write lock. Writes on it fail
// (PRAGMA query_only). Without a read pool (New, ":memory:") it returns
// DB().
func (s *Store) ReadDB() *sql.DB { return s.rdb }

// Close releases the store's prepared statements and, when Open made the
// database, closes it. It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if st := s.stmts.Swap(nil); st != nil {
		errs = append(errs, st.close())
	}
	if s.owned {
		errs = append(errs, s.db.Close())
		if s.rdb != s.db {
			errs = append(errs, s.rdb.Close())
		}
	}
	return errors.Join(errs...)
}

// prepared returns the store's statements, preparing them on first use.
func (s *Store) prepared(ctx context.Context) (*statements, error) {
	if st := s.stmts.Load(); st != nil {
		return st, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if st := s.stmts.Load(); st != nil {
		return st, nil
	}
	st := &statements{}
	var err error
	prep := func(dst **sql.Stmt, query string) {
		if err == nil {
			*dst, err = s.db.PrepareContext(ctx, query)
		}
	}
	prep(&st.claim, claimSQL)
	prep(&st.succeeded, finishSucceededSQL)
	prep(&st.failed, finishFailedSQL)
	prep(&st.extend, extendSQL)
	prep(&st.response, responseSQL)
	prep(&st.sweep, sweepSQL)
	prep(&st.putResponse, putResponseSQL)
	prep(&st.lookup, lookupSQL)
	prep(&st.list, listSQL)
	prep(&st.cancel, cancelSQL)
	if s.rdb == s.db {
		st.rresponse, st.rlookup, st.rlist = st.response, st.lookup, st.list
	} else if err == nil {
		rprep := func(dst **sql.Stmt, query string) {
			if err == nil {
				*dst, err = s.rdb.PrepareContext(ctx, query)
			}
		}
		rprep(&st.rresponse, responseSQL)
		rprep(&st.rlookup, lookupSQL)
		rprep(&st.rlist, listSQL)
	}
	if err != nil {
		st.close()
		return nil, notMigrated(ctx, s.db, interpretError("prepare", err))
	}
	s.stmts.Store(st)
	return st, nil
}

// Priorities of the store's writes at its gate (see writeGate).
const (
	startsWork = false // claims, sweeps, migrations, DoInTx
	endsWork   = true  // finishes, heartbeats, cancellations, local transactions
)

// lock takes the store's write gate at priority prio; unlock releases it.
func (s *Store) lock(ctx context.Context, prio bool) error {
	return s.gate.acquire(ctx, prio)
}

func (s *Store) unlock() { s.gate.release() }

// clock returns t, or the machine's clock when t is zero.
func clock(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// Claim implements idemstore.Store with one INSERT … ON CONFLICT DO UPDATE …
// RETURNING statement (see claimSQL). ctx bounds the wait for the write lock
// and the statement.
func (s *Store) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	if err := s.lock(ctx, startsWork); err != nil {
		return idemstore.ClaimResult{}, err
	}
	defer s.unlock()
	now := clock(req.Now)
	return scanClaim(st.claim.QueryRowContext(ctx, claimArgs(req, now)...), now)
}

func claimArgs(req idemstore.ClaimRequest, now time.Time) []any {
	ns := now.UnixNano()
	return []any{req.Key, req.Tool, req.Fingerprint, req.Token, ns, addDuration(ns, req.Lease), addDuration(ns, req.Window)}
}

// addDuration returns now+d in Unix nanoseconds, with d clamped to
// [0, idemkit.MaxDuration] and the sum saturated instead of wrapping.
func addDuration(now int64, d time.Duration) int64 {
	d = min(max(d, 0), idemkit.MaxDuration)
	if now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

func scanClaim(row *sql.Row, now time.Time) (idemstore.ClaimResult, error) {
	// int64 destinations: database/sql assigns the driver's int64 to them
	// directly, where an int would go through strconv.
	var (
		status, attempt, storage, started, lease, size int64
		writeID                                        string
		isError                                        bool
		body, checksum                                 []byte
		generation                                     int64
	)
	if err := row.Scan(&status, &attempt, &started, &lease, &storage, &size, &writeID, &isError, &body, &checksum, &generation); err != nil {
		if isCheckViolation(err) {
			// The claim writes only valid values of its own and the row's
			// values back: the row holds one outside its column's range.
			return idemstore.ClaimResult{}, fmt.Errorf("%w: sqlitestore: the record holds a value its schema does not allow (the database was changed outside the store): %w",
				idemkit.ErrRecordDamaged, err)
		}
		return idemstore.ClaimResult{}, interpretError("claim", err)
	}
	if status < statusAcquired || status > statusMismatch {
		return idemstore.ClaimResult{}, fmt.Errorf("sqlitestore: claim: unknown status %d", status)
	}
	res := idemstore.ClaimResult{
		Status:  idemstore.ClaimStatus(status),
		Attempt: int(attempt),
		Started: time.Unix(0, started).UTC(),
		Now:     now,
	}
	switch status {
	case statusAcquired, statusTakenOver:
		res.Generation = generation
	case statusBusy:
		res.LeaseUntil = time.Unix(0, lease).UTC()
	case statusCompleted:
		res.Response = idemkit.Response{Body: body, WriteID: writeID, IsError: isError}
		res.Storage = storageKind(int64(storage))
		res.Size = size
		res.Checksum = checksum
	}
	return res, nil
}

// finishQuery returns the statement that records req.
func finishQuery(req idemstore.FinishRequest) string {
	if req.Succeeded {
		return finishSucceededSQL
	}
	return finishFailedSQL
}

// finishArgs returns the arguments of finishQuery(req).
func finishArgs(req idemstore.FinishRequest) []any {
	now := clock(req.Now).UnixNano()
	if !req.Succeeded {
		return []any{req.Key, req.Token, req.Error, now}
	}
	var body []byte
	if req.Storage == idemstore.StorageInline {
		body = nonNil(req.Response.Body)
	}
	return []any{req.Key, req.Token, body, int64(req.Storage), req.Size, req.Response.WriteID, req.Response.IsError, now, nullBlob(req.Checksum)}
}

// Finish implements idemstore.Store. An external body is written in the same
// transaction as the outcome. It returns idemkit.ErrLeaseLost when the
// record is no longer held by req.Token.
func (s *Store) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return err
	}
	if err := s.lock(ctx, endsWork); err != nil {
		return err
	}
	defer s.unlock()
	args := finishArgs(req)
	stmt := st.failed
	if req.Succeeded {
		stmt = st.succeeded
	}
	if !req.Succeeded || req.Storage != idemstore.StorageExternal {
		res, err := stmt.ExecContext(ctx, args...)
		return fenced("finish", res, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return interpretError("finish", err)
	}
	defer tx.Rollback()
	res, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	if err := fenced("finish", res, err); err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, st.putResponse).ExecContext(ctx, req.Key, nonNil(req.Response.Body)); err != nil {
		return interpretError("finish", err)
	}
	return interpretError("finish", tx.Commit())
}

// storageKind converts the storage column, whatever a damaged row holds
// in it, to an idemstore.Storage: a value outside the kinds' byte range
// becomes 255, which the Guard refuses as an unknown kind (a plain
// conversion would wrap 258 around to StorageDropped).
func storageKind(v int64) idemstore.Storage {
	if v < 0 || v > 255 {
		return 255
	}
	return idemstore.Storage(v)
}

// nullBlob passes b to a BLOB column, empty as NULL.
func nullBlob(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// fenced turns the result of a fenced UPDATE into ErrLeaseLost when it
// changed no row.
func fenced(op string, res sql.Result, err error) error {
	if err != nil {
		return interpretError(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError(op, err)
	}
	if n == 0 {
		return idemstore.ErrLeaseLost
	}
	return nil
}

func extendArgs(req idemstore.ExtendRequest) []any {
	now := clock(req.Now).UnixNano()
	return []any{req.Key, req.Token, addDuration(now, req.Lease), now, req.Note}
}

// Extend implements idemstore.Store. It returns idemkit.ErrLeaseLost when the
// record is no longer held by req.Token.
func (s *Store) Extend(ctx context.Context, req idemstore.ExtendRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return err
	}
	if err := s.lock(ctx, endsWork); err != nil {
		return err
	}
	defer s.unlock()
	res, err := st.extend.ExecContext(ctx, extendArgs(req)...)
	return fenced("extend", res, err)
}

// Response implements idemstore.Store: it reads a body stored apart
// (StorageExternal), or returns idemkit.ErrNotFound. It is a read, on the
// read-only pool (ReadDB), and never waits for the writer.
func (s *Store) Response(ctx context.Context, key string) ([]byte, error) {
	st, err := s.prepared(ctx)
	if err != nil {
		return nil, err
	}
	return scanResponse(st.rresponse.QueryRowContext(ctx, key))
}

func scanResponse(row *sql.Row) ([]byte, error) {
	var body []byte
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, idemstore.ErrNotFound
		}
		return nil, interpretError("response", err)
	}
	return nonNil(body), nil
}

func sweepArgs(req idemstore.SweepRequest) []any {
	limit := int64(req.Limit)
	if limit <= 0 {
		limit = -1
	}
	return []any{clock(req.Now).UnixNano(), limit}
}

// Sweep implements idemstore.Store: one DELETE of up to req.Limit expired
// records and their external bodies. SQLite runs concurrent sweeps one after
// another, so each record is deleted, and counted, once.
func (s *Store) Sweep(ctx context.Context, req idemstore.SweepRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.lock(ctx, startsWork); err != nil {
		return 0, err
	}
	defer s.unlock()
	res, err := st.sweep.ExecContext(ctx, sweepArgs(req)...)
	if err != nil {
		return 0, interpretError("sweep", err)
	}
	n, err := res.RowsAffected()
	return int(n), interpretError("sweep", err)
}

// Lookup implements idemstore.Store. It is a read, on the read-only pool
// (ReadDB), and never waits for the writer: it sees the last committed
// state.
func (s *Store) Lookup(ctx context.Context, req idemstore.LookupRequest) (idemstore.Record, error) {
	st, err := s.prepared(ctx)
	if err != nil {
		return idemstore.Record{}, err
	}
	return lookup(st.rlookup.QueryRowContext(ctx, req.Key, req.Body), req)
}

func lookup(row *sql.Row, req idemstore.LookupRequest) (idemstore.Record, error) {
	var (
		rec  idemstore.Record
		body []byte
	)
	if err := scanRecord(row, &rec, clock(req.Now), &body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return idemstore.Record{}, idemstore.ErrNotFound
		}
		return idemstore.Record{}, interpretError("lookup", err)
	}
	if req.Body && rec.State == idemstore.StateCompleted && rec.Storage != idemstore.StorageDropped {
		rec.Body = nonNil(body)
	}
	return rec, nil
}

// Cancel implements idemstore.Store. One UPDATE decides, under SQLite's write
// lock, so that of a Cancel and a Finish racing on a record exactly one
// wins; when it changes nothing, a read of the record says why.
func (s *Store) Cancel(ctx context.Context, req idemstore.CancelRequest) (idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Record{}, err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return idemstore.Record{}, err
	}
	if err := s.lock(ctx, endsWork); err != nil {
		return idemstore.Record{}, err
	}
	defer s.unlock()
	return cancel(ctx, req,
		func(args ...any) *sql.Row { return st.cancel.QueryRowContext(ctx, args...) },
		func(lr idemstore.LookupRequest) (idemstore.Record, error) {
			return lookup(st.lookup.QueryRowContext(ctx, lr.Key, lr.Body), lr)
		})
}

// cancel runs cancelSQL through query and, when it changed nothing, reads
// the record through look to say why.
func cancel(ctx context.Context, req idemstore.CancelRequest, query func(args ...any) *sql.Row, look func(idemstore.LookupRequest) (idemstore.Record, error)) (idemstore.Record, error) {
	now := clock(req.Now)
	for try := 0; ; try++ {
		var rec idemstore.Record
		err := scanRecord(query(req.Key, req.Reason, req.Abandoned, now.UnixNano()), &rec, now)
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return idemstore.Record{}, interpretError("cancel", err)
		}
		if err := ctx.Err(); err != nil {
			return idemstore.Record{}, err
		}
		rec, err = look(idemstore.LookupRequest{Key: req.Key, Now: now})
		switch {
		case err != nil:
			return idemstore.Record{}, err
		case rec.State != idemstore.StateInProgress:
			return rec, idemstore.ErrNotInProgress
		case req.Abandoned && !rec.Abandoned(), try == 2:
			return rec, idemstore.ErrInProgress
		}
		// A new attempt claimed the record between the two statements: try
		// again, on it.
	}
}

// List implements idemstore.Store. It is a read, on the read-only pool
// (ReadDB), and never waits for the writer.
func (s *Store) List(ctx context.Context, req idemstore.ListRequest) ([]idemstore.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	st, err := s.prepared(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := st.rlist.QueryContext(ctx, listArgs(req)...)
	return list(rows, err, req)
}

func listArgs(req idemstore.ListRequest) []any {
	state := ""
	switch req.State {
	case idemstore.StateInProgress:
		state = "in_progress"
	case idemstore.StateCompleted:
		state = "succeeded"
	case idemstore.StateReleased:
		state = "failed"
	}
	return []any{req.After, req.KeyPrefix, req.Tool, state, int64(req.PageSize())}
}

func list(rows *sql.Rows, err error, req idemstore.ListRequest) ([]idemstore.Record, error) {
	if err != nil {
		return nil, interpretError("list", err)
	}
	defer rows.Close()
	now := clock(req.Now)
	var out []idemstore.Record
	for rows.Next() {
		var rec idemstore.Record
		if err := scanRecord(rows, &rec, now); err != nil {
			return nil, interpretError("list", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list", err)
	}
	return out, nil
}

// scanRecord scans recordColumns, then extra, into rec, whose Now is now.
func scanRecord(row interface{ Scan(...any) error }, rec *idemstore.Record, now time.Time, extra ...any) error {
	var (
		state                                              string
		attempt, started, lease, expires, storage, updated int64
	)
	dest := append([]any{&rec.Key, &rec.Tool, &rec.Fingerprint, &state, &attempt, &started, &lease, &expires,
		&storage, &rec.Size, &rec.WriteID, &rec.IsError, &rec.Error, &rec.Note, &rec.Cancelled, &updated, &rec.Checksum, &rec.Generation}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	switch state {
	case "succeeded":
		rec.State = idemstore.StateCompleted
		rec.Storage = storageKind(int64(storage))
	case "failed":
		rec.State = idemstore.StateReleased
	default:
		rec.State = idemstore.StateInProgress
	}
	if rec.State != idemstore.StateCompleted {
		rec.Size, rec.WriteID, rec.IsError = 0, "", false
	}
	rec.Attempt = int(attempt)
	rec.Started = time.Unix(0, started).UTC()
	rec.LeaseUntil = time.Unix(0, lease).UTC()
	rec.ExpiresAt = time.Unix(0, expires).UTC()
	rec.Updated = time.Unix(0, updated).UTC()
	rec.Now = now
	return nil
}
