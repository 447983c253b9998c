// Package pgstore is an idemkit.Store on PostgreSQL, through pgx v5.
//
// Many MCP server replicas behind a load balancer share one database: the
// claim row is the arbiter, so nothing relies on process memory. The claim is
// one atomic INSERT … ON CONFLICT … DO UPDATE … RETURNING statement, and
// times come from the database clock, the one clock every replica shares.
//
//	pool, _ := pgxpool.New(ctx, dsn)
//	store, _ := pgstore.New(pool, nil)
//	if err := store.Migrate(ctx); err != nil { … }
//	guard, _ := idemkit.NewGuard(store, nil)
//
// When the side effect is a write to the same database, DoTx commits the
// claim, the tool's own writes and the stored outcome in the caller's
// transaction: there is then no window in which the work is done but not
// recorded, even if the process is killed.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the store runs statements on: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// Schema holds idemkit's tables. Defaults to "" (unqualified names,
	// resolved through the connection's search_path, usually public).
	Schema string
}

// Store is an idemkit.Store on PostgreSQL. It is safe for concurrent use;
// many Stores, in many processes, may share one database.
type Store struct {
	db  DB
	sql *statements
}

var _ idemkit.Store = (*Store)(nil)

// New returns a Store that runs its statements on db (usually a
// *pgxpool.Pool). Call Migrate once before use.
func New(db DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgstore: New needs a DB")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if strings.ContainsRune(c.Schema, 0) {
		return nil, errors.New("pgstore: Config.Schema must not contain NUL")
	}
	return &Store{db: db, sql: newStatements(c.Schema)}, nil
}

// DB returns the DB the store runs on.
func (s *Store) DB() DB { return s.db }

// statements are the store's SQL, with the schema filled in.
type statements struct {
	schema, prefix                                string
	claim, lookup                                 string
	finishSucceeded, finishFailed, finishExternal string
	extend, response, sweep                       string
	inspect, list                                 string
}

func newStatements(schema string) *statements {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	r := strings.NewReplacer("{schema}", prefix)
	return &statements{
		schema:          schema,
		prefix:          prefix,
		claim:           r.Replace(claimSQL),
		lookup:          r.Replace(lookupSQL),
		finishSucceeded: r.Replace(finishSucceededSQL),
		finishFailed:    r.Replace(finishFailedSQL),
		finishExternal:  r.Replace(finishExternalSQL),
		extend:          r.Replace(extendSQL),
		response:        r.Replace(responseSQL),
		sweep:           r.Replace(sweepSQL),
		inspect:         r.Replace(inspectSQL),
		list:            r.Replace(listSQL),
	}
}

// The claim: one atomic statement. It inserts a fresh claim, or, on
// conflict, takes the row over in place when the caller may: "now" is
// excluded.started_at (the caller's clock or the database's); lease and
// window ride in excluded.lease_until and excluded.expires_at.
//
//	expired:  the window is over and no live lease holds the row
//	          -> fresh work, attempt 1, new fingerprint
//	takeover: same fingerprint and (failed, or in progress with a lapsed lease)
//	          -> attempt + 1, new token and lease
//
// A row comes back only when the caller won (xmax = 0: it inserted). When it
// did not, the row is left as it is and lookupSQL reads it: completed, busy
// or mismatch. The SET list is kept small on purpose: PostgreSQL prepares
// the conflict projection on every execution, even on the insert path.
const (
	expiredCond  = `(c.expires_at <= excluded.started_at AND (c.state <> 'in_progress' OR c.lease_until <= excluded.started_at))`
	takeoverCond = `(c.fingerprint = excluded.fingerprint AND (c.state = 'failed' OR (c.state = 'in_progress' AND c.lease_until <= excluded.started_at)))`

	claimSQL = `
INSERT INTO {schema}idemkit_claims AS c
    (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at)
VALUES ($1, $2, $3, 'in_progress', $4, 1,
    coalesce($7::timestamptz, statement_timestamp()),
    coalesce($7::timestamptz, statement_timestamp()) + $5::bigint * interval '1 microsecond',
    coalesce($7::timestamptz, statement_timestamp()) + $6::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE SET
    tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'in_progress', token = excluded.token,
    attempt     = CASE WHEN c.expires_at <= excluded.started_at THEN 1 ELSE c.attempt + 1 END,
    started_at  = excluded.started_at,
    lease_until = excluded.lease_until,
    expires_at  = greatest(CASE WHEN c.expires_at <= excluded.started_at THEN NULL ELSE c.expires_at END, excluded.expires_at),
    response = NULL, storage = 0, size = 0, write_id = NULL, is_error = false, last_error = NULL, note = NULL
WHERE ` + expiredCond + ` OR ` + takeoverCond + `
RETURNING c.attempt, (xmax = 0)`

	// lookupSQL reads the row that stood in the way of a claim. The inline
	// body comes back only for a completed row; an external body is never
	// read here.
	lookupSQL = `
SELECT state, attempt, fingerprint = $2, started_at, lease_until, storage, size, write_id, is_error,
    CASE WHEN state = 'succeeded' AND storage = 0 THEN response END,
    coalesce($3::timestamptz, statement_timestamp())
FROM {schema}idemkit_claims WHERE key = $1`

	// The finishes are fenced by the token, and idempotent for it:
	// repeated after a lost acknowledgement (the connection dropped after
	// the commit), they match the row they already wrote (same token, same
	// end state) and write the same values again, so the retry succeeds.
	finishSucceededSQL = `
UPDATE {schema}idemkit_claims
SET state = 'succeeded', response = $3, storage = $4, size = $5, write_id = $6, is_error = $7
WHERE key = $1 AND token = $2 AND state <> 'failed'`

	finishFailedSQL = `
UPDATE {schema}idemkit_claims
SET state = 'failed', last_error = $3
WHERE key = $1 AND token = $2 AND state <> 'succeeded'`

	// The body goes to idemkit_responses only if the fenced update matched.
	finishExternalSQL = `
WITH done AS (
    UPDATE {schema}idemkit_claims
    SET state = 'succeeded', response = NULL, storage = 1, size = $4, write_id = $5, is_error = $6
    WHERE key = $1 AND token = $2 AND state <> 'failed'
    RETURNING key
)
INSERT INTO {schema}idemkit_responses (key, body)
SELECT key, $3 FROM done
ON CONFLICT (key) DO UPDATE SET body = excluded.body`

	extendSQL = `
UPDATE {schema}idemkit_claims
SET lease_until = coalesce($4::timestamptz, statement_timestamp()) + $3::bigint * interval '1 microsecond',
    expires_at  = greatest(expires_at, coalesce($4::timestamptz, statement_timestamp()) + $3::bigint * interval '1 microsecond'),
    note        = coalesce($5::bytea, note)
WHERE key = $1 AND token = $2 AND state = 'in_progress'`

	responseSQL = `
SELECT r.body FROM {schema}idemkit_responses r
JOIN {schema}idemkit_claims c ON c.key = r.key
WHERE r.key = $1 AND c.state = 'succeeded' AND c.storage = 1`

	// recordColumns are the columns of an idemkit.Record, in scanRecord's
	// order.
	recordColumns = `c.key, c.tool, c.fingerprint, c.state, c.attempt, c.started_at, c.lease_until, c.expires_at,
    c.storage, c.size, c.write_id, c.is_error, c.last_error, c.note`

	// inspectSQL reads one record, and with $2 its kept body, inline or
	// external.
	inspectSQL = `
SELECT ` + recordColumns + `, coalesce($3::timestamptz, statement_timestamp()),
    CASE WHEN $2 AND c.state = 'succeeded' THEN
        CASE c.storage WHEN 0 THEN c.response
                       WHEN 1 THEN (SELECT r.body FROM {schema}idemkit_responses r WHERE r.key = c.key) END
    END
FROM {schema}idemkit_claims c WHERE c.key = $1`

	// listSQL reads a page of records in key order (the primary key's
	// index). "c.key >= $2" lets the index find a key prefix; starts_with
	// makes the match exact.
	listSQL = `
SELECT ` + recordColumns + `, coalesce($6::timestamptz, statement_timestamp())
FROM {schema}idemkit_claims c
WHERE c.key > $1 AND c.key >= $2 AND starts_with(c.key, $2)
  AND ($3 = '' OR c.tool = $3) AND ($4 = '' OR c.state = $4)
ORDER BY c.key
LIMIT $5`

	// SKIP LOCKED lets many replicas sweep at once without waiting on, or
	// double-counting, each other's rows.
	sweepSQL = `
DELETE FROM {schema}idemkit_claims
WHERE key IN (
    SELECT key FROM {schema}idemkit_claims
    WHERE expires_at <= coalesce($2::timestamptz, statement_timestamp())
      AND (state <> 'in_progress' OR lease_until <= coalesce($2::timestamptz, statement_timestamp()))
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED)`
)

// nowArg passes a request's Now, or NULL for the database clock.
func nowArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// micros returns d in microseconds, clamped to [0, idemkit.MaxDuration].
func micros(d time.Duration) int64 { return min(max(d, 0), idemkit.MaxDuration).Microseconds() }

// Claim implements idemkit.Store.
//
// The claim statement either wins the row or leaves it as it is, and then
// a read reports what stood in the way. Another round is needed only when
// the row changed between the two (released, lapsed, expired or swept in
// between), which takes another caller making progress on the same key;
// after a few such rounds a short, growing, jittered pause breaks any
// lockstep. The loop ends when it wins or reads a settled answer, or when
// ctx is done: it never reports a healthy store as failed.
func (s *Store) Claim(ctx context.Context, req idemkit.ClaimRequest) (idemkit.ClaimResult, error) {
	now := nowArg(req.Now)
	pause := 100 * time.Microsecond
	for round := 0; ; round++ {
		if round >= 3 {
			t := time.NewTimer(pause/2 + rand.N(pause/2))
			select {
			case <-ctx.Done():
				t.Stop()
				return idemkit.ClaimResult{}, fmt.Errorf("pgstore: claim of %s: %w", req.Tool, ctx.Err())
			case <-t.C:
			}
			pause = min(2*pause, 50*time.Millisecond)
		}
		var (
			attempt  int32
			inserted bool
		)
		err := s.db.QueryRow(ctx, s.sql.claim,
			req.Key, req.Tool, req.Fingerprint, req.Token, micros(req.Lease), micros(req.Window), now,
		).Scan(&attempt, &inserted)
		switch {
		case err == nil && attempt == 1:
			return idemkit.ClaimResult{Status: idemkit.ClaimAcquired, Attempt: 1}, nil
		case err == nil:
			return idemkit.ClaimResult{Status: idemkit.ClaimTakenOver, Attempt: int(attempt)}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return idemkit.ClaimResult{}, s.translate("claim", err)
		}
		// Lost: read what stands in the way.
		res, again, err := s.lookup(ctx, req, now)
		if err != nil || !again {
			return res, err
		}
	}
}

// lookup reads the row a claim lost to. again reports that the row changed
// in between so that the claim should be tried once more.
func (s *Store) lookup(ctx context.Context, req idemkit.ClaimRequest, now any) (res idemkit.ClaimResult, again bool, err error) {
	var (
		state           string
		attempt         int32
		sameFingerprint bool
		storage         int16
		writeID         []byte
		body            []byte
	)
	err = s.db.QueryRow(ctx, s.sql.lookup, req.Key, req.Fingerprint, now).Scan(
		&state, &attempt, &sameFingerprint, &res.Started, &res.LeaseUntil, &storage, &res.Size, &writeID, &res.Response.IsError, &body, &res.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return idemkit.ClaimResult{}, true, nil // swept in between
	}
	if err != nil {
		return idemkit.ClaimResult{}, false, s.translate("claim lookup", err)
	}
	res.Attempt = int(attempt)
	switch {
	case !sameFingerprint:
		res.Status = idemkit.ClaimMismatch
	case state == "succeeded":
		res.Status = idemkit.ClaimCompleted
		res.Storage = idemkit.Storage(storage)
		res.Response.Body = body
		res.Response.WriteID = string(writeID)
	case state == "in_progress" && res.Now.Before(res.LeaseUntil):
		res.Status = idemkit.ClaimBusy
	default: // failed or lapsed since the claim statement: claim again
		return idemkit.ClaimResult{}, true, nil
	}
	return res, false, nil
}

// Finish implements idemkit.Store.
func (s *Store) Finish(ctx context.Context, req idemkit.FinishRequest) error {
	var (
		tag pgconn.CommandTag
		err error
	)
	body := req.Response.Body
	if body == nil {
		body = []byte{}
	}
	switch {
	case !req.Succeeded:
		tag, err = s.db.Exec(ctx, s.sql.finishFailed, req.Key, req.Token, nullBytes(req.Error))
	case req.Storage == idemkit.StorageExternal:
		tag, err = s.db.Exec(ctx, s.sql.finishExternal, req.Key, req.Token, body, req.Size, nullBytes(req.Response.WriteID), req.Response.IsError)
	case req.Storage == idemkit.StorageDropped:
		tag, err = s.db.Exec(ctx, s.sql.finishSucceeded, req.Key, req.Token, nil, int16(idemkit.StorageDropped), req.Size, nullBytes(req.Response.WriteID), req.Response.IsError)
	default:
		tag, err = s.db.Exec(ctx, s.sql.finishSucceeded, req.Key, req.Token, body, int16(idemkit.StorageInline), req.Size, nullBytes(req.Response.WriteID), req.Response.IsError)
	}
	if err != nil {
		return s.translate("finish", err)
	}
	if tag.RowsAffected() == 0 {
		return idemkit.ErrLeaseLost
	}
	return nil
}

// nullBytes passes s to a bytea column, "" as NULL.
func nullBytes(s string) any {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// Extend implements idemkit.Store.
func (s *Store) Extend(ctx context.Context, req idemkit.ExtendRequest) error {
	tag, err := s.db.Exec(ctx, s.sql.extend, req.Key, req.Token, micros(req.Lease), nowArg(req.Now), nullBytes(req.Note))
	if err != nil {
		return s.translate("extend", err)
	}
	if tag.RowsAffected() == 0 {
		return idemkit.ErrLeaseLost
	}
	return nil
}

// Response implements idemkit.Store.
func (s *Store) Response(ctx context.Context, key string) ([]byte, error) {
	var body []byte
	err := s.db.QueryRow(ctx, s.sql.response, key).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, idemkit.ErrNotFound
	}
	if err != nil {
		return nil, s.translate("load response", err)
	}
	return body, nil
}

// Lookup implements idemkit.Store.
func (s *Store) Lookup(ctx context.Context, req idemkit.LookupRequest) (idemkit.Record, error) {
	var (
		rec  idemkit.Record
		body []byte
	)
	row := s.db.QueryRow(ctx, s.sql.inspect, req.Key, req.Body, nowArg(req.Now))
	err := scanRecord(row, &rec, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return idemkit.Record{}, idemkit.ErrNotFound
	}
	if err != nil {
		return idemkit.Record{}, s.translate("lookup", err)
	}
	if req.Body && rec.State == idemkit.StateCompleted && rec.Storage != idemkit.StorageDropped {
		if body == nil {
			body = []byte{}
		}
		rec.Body = body
	}
	return rec, nil
}

// List implements idemkit.Store.
func (s *Store) List(ctx context.Context, req idemkit.ListRequest) ([]idemkit.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	state := ""
	if req.State != 0 {
		state = dbState(req.State)
	}
	rows, err := s.db.Query(ctx, s.sql.list, req.After, req.KeyPrefix, req.Tool, state, req.PageSize(), nowArg(req.Now))
	if err != nil {
		return nil, s.translate("list", err)
	}
	defer rows.Close()
	var out []idemkit.Record
	for rows.Next() {
		var rec idemkit.Record
		if err := scanRecord(rows, &rec); err != nil {
			return nil, s.translate("list", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate("list", err)
	}
	return out, nil
}

// scanRecord scans recordColumns, then the clock, then extra into rec.
func scanRecord(row pgx.Row, rec *idemkit.Record, extra ...any) error {
	var (
		state                  string
		attempt                int32
		storage                int16
		writeID, lastErr, note []byte
	)
	dest := append([]any{&rec.Key, &rec.Tool, &rec.Fingerprint, &state, &attempt, &rec.Started, &rec.LeaseUntil, &rec.ExpiresAt,
		&storage, &rec.Size, &writeID, &rec.IsError, &lastErr, &note, &rec.Now}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	rec.State = recordState(state)
	rec.Attempt = int(attempt)
	rec.Error, rec.Note = string(lastErr), string(note)
	if rec.State == idemkit.StateCompleted {
		rec.Storage = idemkit.Storage(storage)
		rec.WriteID = string(writeID)
	} else {
		rec.Size, rec.IsError = 0, false
	}
	return nil
}

// recordState maps the state column to an idemkit.RecordState.
func recordState(s string) idemkit.RecordState {
	switch s {
	case "succeeded":
		return idemkit.StateCompleted
	case "failed":
		return idemkit.StateReleased
	}
	return idemkit.StateInProgress
}

// dbState maps an idemkit.RecordState to the state column.
func dbState(s idemkit.RecordState) string {
	switch s {
	case idemkit.StateCompleted:
		return "succeeded"
	case idemkit.StateReleased:
		return "failed"
	}
	return "in_progress"
}

// Sweep implements idemkit.Store.
func (s *Store) Sweep(ctx context.Context, req idemkit.SweepRequest) (int, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = idemkit.DefaultSweepBatch
	}
	tag, err := s.db.Exec(ctx, s.sql.sweep, limit, nowArg(req.Now))
	if err != nil {
		return 0, s.translate("sweep", err)
	}
	return int(tag.RowsAffected()), nil
}

// SQLSTATE codes the store explains.
const (
	sqlstateUndefinedTable       = "42P01"
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateInFailedTransaction  = "25P02"
)

// translate turns a driver error into one that says what to do, keeping the
// original for errors.As. Errors a retry may cure match
// idemkit.ErrTransient (see transient).
func (s *Store) translate(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case sqlstateUndefinedTable:
			return fmt.Errorf("pgstore: %s: idemkit's tables are missing in schema %q; run (*pgstore.Store).Migrate first: %w", op, s.schemaName(), err)
		case sqlstateSerializationFailure, sqlstateDeadlockDetected:
			err = fmt.Errorf("pgstore: %s: the transaction conflicted with a concurrent one; retry the whole transaction: %w", op, err)
			return idemkit.Transient(err)
		case sqlstateInFailedTransaction:
			return fmt.Errorf("pgstore: %s: the transaction has already failed; roll it back: %w", op, err)
		}
	}
	if transient(err) {
		return idemkit.Transient(fmt.Errorf("pgstore: %s: %w", op, err))
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// transient reports whether err may pass when the statement is repeated:
// a dropped or refused connection, a server shutting down, restarting or
// out of connections, a lock, serialization or deadlock conflict, a
// cancelled statement. Matched by SQLSTATE class and code, never by text.
// The caller's own cancellation is not transient.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if len(pgErr.Code) == 5 {
			switch pgErr.Code[:2] {
			case "08", // connection exception
				"40", // transaction rollback: serialization failure, deadlock
				"53", // insufficient resources: too many connections, out of memory
				"58": // system error (I/O)
				return true
			}
		}
		switch pgErr.Code {
		case "57P01", // admin_shutdown: terminating connection due to administrator command
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now: the database system is starting up
			"57014", // query_canceled (statement_timeout, pg_cancel_backend)
			"55P03": // lock_not_available
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	return pgconn.SafeToRetry(err)
}

func (s *Store) schemaName() string {
	if s.sql.schema == "" {
		return "search_path"
	}
	return s.sql.schema
}
