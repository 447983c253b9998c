// Package pgstore is an idemstore.Store on PostgreSQL, through pgx v5.
//
// Many MCP server replicas behind a load balancer share one database: the
// claim row is the arbiter, so nothing relies on process memory. The claim is
// atomic: one INSERT … ON CONFLICT DO NOTHING for a fresh key; a read of the
// record for a duplicate; and an INSERT … ON CONFLICT … DO UPDATE …
// RETURNING that decides on the locked row when the caller may take a record
// over. Times come from the database clock, the one clock every replica
// shares.
//
// Errors a retry may cure (SQLSTATE classes 08, 40, 53 and 58, 57P01-03,
// 57014, 55P03, and dropped or refused connections) match
// idemstore.ErrTransient; the Guard retries a finish that fails this way.
//
//	pool, _ := pgxpool.New(ctx, dsn)
//	store, _ := pgstore.New(pool, nil)
//	if err := store.Migrate(ctx); err != nil { … }
//	guard, _ := idemkit.NewGuard(store, nil)
//
// When the side effect is a write to the same database, DoTx commits the
// claim, the tool's own writes and the stored outcome in the caller's
// transaction: there is then no window in which the work is done but not
// recorded, even if the process is killed. When the work also waits on the
// network (a payment), DoPhased commits the claim first, runs the external
// part outside any transaction, and commits the tool's writes with the
// outcome in a short transaction: no lock and no pooled connection is held
// across the wait.
//
// Every outcome is kept with the Guard's checksum of it (migration 004), so
// that a record changed behind the store's back is refused
// (idemkit.ErrRecordDamaged), never replayed wrong nor run again; rows from
// before 004 replay unchecked.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
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

// Store is an idemstore.Store on PostgreSQL. It is safe for concurrent use;
// many Stores, in many processes, may share one database.
type Store struct {
	db  DB
	sql *statements
}

var _ idemstore.Store = (*Store)(nil)

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
	claimFresh, claimFreshDBClock, lookup, claim  string
	finishSucceeded, finishFailed, finishExternal string
	finishInlineDBClock                           string
	extend, response, sweep                       string
	inspect, list, cancel                         string
}

func newStatements(schema string) *statements {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	r := strings.NewReplacer("{schema}", prefix)
	return &statements{
		schema:     schema,
		prefix:     prefix,
		claimFresh: r.Replace(claimFreshSQL),
		// The common case, the database's clock: one parameter less.
		claimFreshDBClock: strings.ReplaceAll(r.Replace(claimFreshSQL), "coalesce($7::timestamptz, statement_timestamp())", "statement_timestamp()"),
		lookup:            r.Replace(lookupSQL),
		claim:             r.Replace(claimSQL),
		finishSucceeded:   r.Replace(finishSucceededSQL),
		// The common finish: an inline body, the database's clock.
		finishInlineDBClock: r.Replace(finishInlineDBClockSQL),
		finishFailed:        r.Replace(finishFailedSQL),
		finishExternal:      r.Replace(finishExternalSQL),
		extend:              r.Replace(extendSQL),
		response:            r.Replace(responseSQL),
		sweep:               r.Replace(sweepSQL),
		inspect:             r.Replace(inspectSQL),
		list:                r.Replace(listSQL),
		cancel:              r.Replace(cancelSQL),
	}
}

// The claim: atomic statements, never a select followed by an insert.
//
// claimFreshSQL inserts a fresh claim and does nothing on a conflict: the
// whole cost of a call on a fresh key, the common case, with no conflict
// projection for PostgreSQL to prepare and no row to send back: its command
// tag says whether it inserted ("INSERT 0 1") or met a row ("INSERT 0 0").
// On a conflict it takes no lock.
//
// lookupSQL then reads the row that stood in the way. A settled answer
// (completed, in progress under a live lease, or another fingerprint) is
// returned from it: a duplicate costs two reads and writes nothing. Only a
// row the caller may claim (expired, released, or in progress with a
// lapsed lease), or one swept in between, goes on to claimSQL.
//
// claimSQL decides in one statement, on the row as it stands (INSERT … ON
// CONFLICT locks it and sees its latest version), and answers from its
// RETURNING list whatever it decided, so nothing can change in between and
// no loop is needed. "now" is excluded.started_at (the caller's clock or
// the database's); lease and window ride in excluded.lease_until and
// excluded.expires_at. The row, c, is:
//
//	expired:  the window is over and no live lease holds it
//	          -> fresh work: attempt 1, the new fingerprint, the new token
//	             as its generation
//	takeover: same fingerprint and (failed, or in progress with a lapsed lease)
//	          -> attempt + 1, the new token and lease, the generation kept
//	otherwise (completed, busy, mismatch; another caller claimed it first):
//	          written back unchanged, and returned
//
// The caller won when the row holds its token afterwards (tokens are
// random per attempt). If the row vanished (swept), claimSQL inserts it,
// and the caller won too.
const (
	claimInsert = `
INSERT INTO {schema}idemkit_claims AS c
    (key, tool, fingerprint, state, token, generation, attempt, started_at, lease_until, expires_at, updated_at)
VALUES ($1, $2, $3, 'in_progress', $4, $4, 1,
    coalesce($7::timestamptz, statement_timestamp()),
    coalesce($7::timestamptz, statement_timestamp()) + $5::bigint * interval '1 microsecond',
    coalesce($7::timestamptz, statement_timestamp()) + $6::bigint * interval '1 microsecond',
    coalesce($7::timestamptz, statement_timestamp()))`

	claimFreshSQL = claimInsert + `
ON CONFLICT (key) DO NOTHING`

	// lookupSQL reads the row a fresh claim met; the inline body comes back
	// only for a completed row, an external body never. So does the
	// outcome's checksum (see checksumCol).
	lookupSQL = `
SELECT c.state, c.attempt, c.fingerprint = $2, c.started_at, c.lease_until, c.storage, c.size, c.write_id, c.is_error,
    CASE WHEN c.state = 'succeeded' AND c.storage = 0 THEN c.response END,
    n.now, c.expires_at <= n.now, ` + checksumCol + `
FROM {schema}idemkit_claims c, (SELECT coalesce($3::timestamptz, statement_timestamp()) AS now) n
WHERE c.key = $1`

	// checksumCol is the checksum of a completed row's outcome, when the
	// finish that wrote the outcome wrote it: checksum_token is the token
	// of the attempt whose finish set checksum, so a checksum left by an
	// earlier outcome of the row (one a store without checksums finished,
	// in a rolling deploy) is not returned with this one.
	checksumCol = `CASE WHEN c.state = 'succeeded' AND c.checksum_token = c.token THEN c.checksum END`

	expiredCond  = `(c.expires_at <= excluded.started_at AND (c.state <> 'in_progress' OR c.lease_until <= excluded.started_at))`
	takeoverCond = `(c.fingerprint = excluded.fingerprint AND (c.state = 'failed' OR (c.state = 'in_progress' AND c.lease_until <= excluded.started_at)))`
	claimCond    = `(` + expiredCond + ` OR ` + takeoverCond + `)`

	claimSQL = claimInsert + `
ON CONFLICT (key) DO UPDATE SET
    tool        = CASE WHEN ` + expiredCond + ` THEN excluded.tool ELSE c.tool END,
    fingerprint = CASE WHEN ` + expiredCond + ` THEN excluded.fingerprint ELSE c.fingerprint END,
    generation  = CASE WHEN ` + expiredCond + ` THEN excluded.generation ELSE c.generation END,
    attempt     = CASE WHEN ` + expiredCond + ` THEN 1 WHEN ` + takeoverCond + ` THEN c.attempt + 1 ELSE c.attempt END,
    expires_at  = CASE WHEN ` + expiredCond + ` THEN excluded.expires_at
                       WHEN ` + takeoverCond + ` THEN greatest(c.expires_at, excluded.expires_at)
                       ELSE c.expires_at END,
    state       = CASE WHEN ` + claimCond + ` THEN 'in_progress' ELSE c.state END,
    token       = CASE WHEN ` + claimCond + ` THEN excluded.token ELSE c.token END,
    started_at  = CASE WHEN ` + claimCond + ` THEN excluded.started_at ELSE c.started_at END,
    lease_until = CASE WHEN ` + claimCond + ` THEN excluded.lease_until ELSE c.lease_until END,
    response    = CASE WHEN ` + claimCond + ` THEN NULL ELSE c.response END,
    storage     = CASE WHEN ` + claimCond + ` THEN 0 ELSE c.storage END,
    size        = CASE WHEN ` + claimCond + ` THEN 0 ELSE c.size END,
    write_id    = CASE WHEN ` + claimCond + ` THEN NULL ELSE c.write_id END,
    is_error    = CASE WHEN ` + claimCond + ` THEN false ELSE c.is_error END,
    last_error  = CASE WHEN ` + claimCond + ` THEN NULL ELSE c.last_error END,
    note        = CASE WHEN ` + claimCond + ` THEN NULL ELSE c.note END,
    cancelled   = CASE WHEN ` + claimCond + ` THEN false ELSE c.cancelled END,
    updated_at  = CASE WHEN ` + claimCond + ` THEN excluded.started_at ELSE c.updated_at END
RETURNING c.token = $4, c.attempt, c.fingerprint = $3, c.state, c.started_at, c.lease_until,
    c.storage, c.size, c.write_id, c.is_error,
    CASE WHEN c.token <> $4 AND c.state = 'succeeded' AND c.storage = 0 THEN c.response END,
    coalesce($7::timestamptz, statement_timestamp()),
    CASE WHEN c.token <> $4 THEN ` + checksumCol + ` END, c.generation`

	// The finishes are fenced by the token, and idempotent for it:
	// repeated after a lost acknowledgement (the connection dropped after
	// the commit), they match the row they already wrote (same token, same
	// end state) and write the same values again, so the retry succeeds.
	finishSucceededSQL = `
UPDATE {schema}idemkit_claims
SET state = 'succeeded', response = $3, storage = $4, size = $5, write_id = $6, is_error = $7,
    updated_at = coalesce($8::timestamptz, statement_timestamp()), checksum = $9, checksum_token = $2
WHERE key = $1 AND token = $2 AND state <> 'failed'`

	// finishInlineDBClockSQL is finishSucceededSQL for the common case, an
	// inline body whose size is its length, on the database's clock: the
	// same row written, with three parameters fewer to encode and bind.
	finishInlineDBClockSQL = `
UPDATE {schema}idemkit_claims
SET state = 'succeeded', response = $3::bytea, storage = 0, size = octet_length($3::bytea), write_id = $4, is_error = $5,
    updated_at = statement_timestamp(), checksum = $6, checksum_token = $2
WHERE key = $1 AND token = $2 AND state <> 'failed'`

	finishFailedSQL = `
UPDATE {schema}idemkit_claims
SET state = 'failed', last_error = $3, updated_at = coalesce($4::timestamptz, statement_timestamp())
WHERE key = $1 AND token = $2 AND state <> 'succeeded'`

	// The body goes to idemkit_responses only if the fenced update matched.
	finishExternalSQL = `
WITH done AS (
    UPDATE {schema}idemkit_claims
    SET state = 'succeeded', response = NULL, storage = 1, size = $4, write_id = $5, is_error = $6,
        updated_at = coalesce($7::timestamptz, statement_timestamp()), checksum = $8, checksum_token = $2
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
    note        = coalesce($5::bytea, note),
    updated_at  = coalesce($4::timestamptz, statement_timestamp())
WHERE key = $1 AND token = $2 AND state = 'in_progress'`

	responseSQL = `
SELECT r.body FROM {schema}idemkit_responses r
JOIN {schema}idemkit_claims c ON c.key = r.key
WHERE r.key = $1 AND c.state = 'succeeded' AND c.storage = 1`

	// recordColumns are the columns of an idemstore.Record, in scanRecord's
	// order.
	recordColumns = `c.key, c.tool, c.fingerprint, c.state, c.attempt, c.started_at, c.lease_until, c.expires_at,
    c.storage, c.size, c.write_id, c.is_error, c.last_error, c.note, c.cancelled, coalesce(c.updated_at, c.started_at),
    ` + checksumCol + `, c.generation`

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

	// cancelSQL releases the record's attempt in progress, whichever token
	// holds it (with $3, only when its lease has run out), and fences it
	// out: no attempt holds token 0. No row comes back when it changed
	// nothing.
	cancelSQL = `
UPDATE {schema}idemkit_claims AS c
SET state = 'failed', token = 0, last_error = $2, cancelled = true, updated_at = n.now
FROM (SELECT coalesce($4::timestamptz, statement_timestamp()) AS now) n
WHERE c.key = $1 AND c.state = 'in_progress' AND (NOT $3 OR c.lease_until <= n.now)
RETURNING ` + recordColumns + `, n.now`

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

// Claim implements idemstore.Store: one statement for a fresh key, two for
// a duplicate (the second a read), three when it takes a record over (see
// claimSQL). It never loops.
func (s *Store) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	now := nowArg(req.Now)
	lease, window := micros(req.Lease), micros(req.Window)
	var (
		tag pgconn.CommandTag
		err error
	)
	if now == nil {
		tag, err = s.db.Exec(ctx, s.sql.claimFreshDBClock, req.Key, req.Tool, req.Fingerprint, req.Token, lease, window)
	} else {
		tag, err = s.db.Exec(ctx, s.sql.claimFresh, req.Key, req.Tool, req.Fingerprint, req.Token, lease, window, now)
	}
	if err != nil {
		return idemstore.ClaimResult{}, s.translate("claim", err)
	}
	if tag.RowsAffected() == 1 {
		return idemstore.ClaimResult{Status: idemstore.ClaimAcquired, Attempt: 1, Generation: req.Token}, nil
	}
	var (
		res                      idemstore.ClaimResult
		state                    string
		attempt                  int32
		sameFingerprint, expired bool
		storage                  int16
		writeID, body            []byte
	)
	err = s.db.QueryRow(ctx, s.sql.lookup, req.Key, req.Fingerprint, now).Scan(
		&state, &attempt, &sameFingerprint, &res.Started, &res.LeaseUntil, &storage, &res.Size, &writeID, &res.Response.IsError, &body, &res.Now, &expired, &res.Checksum)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.claimRow(ctx, req, lease, window, now) // swept in between
	case err != nil:
		return idemstore.ClaimResult{}, s.translate("claim lookup", err)
	}
	res.Attempt = int(attempt)
	lapsed := !res.Now.Before(res.LeaseUntil)
	switch {
	case expired && (state != "in_progress" || lapsed):
		return s.claimRow(ctx, req, lease, window, now)
	case !sameFingerprint:
		return idemstore.ClaimResult{Status: idemstore.ClaimMismatch, Attempt: res.Attempt, Started: res.Started, Now: res.Now}, nil
	case state == "succeeded":
		res.Status = idemstore.ClaimCompleted
		res.Storage = storageKind(int64(storage))
		res.Response.Body = body
		res.Response.WriteID = string(writeID)
		res.LeaseUntil = time.Time{}
		return res, nil
	case state == "in_progress" && !lapsed:
		res.Status = idemstore.ClaimBusy
		res.Size, res.Response.IsError, res.Checksum = 0, false, nil
		return res, nil
	}
	return s.claimRow(ctx, req, lease, window, now) // released, or lapsed: take it over
}

// claimRow runs claimSQL: it claims the row if the caller may, or returns
// it as it stands.
func (s *Store) claimRow(ctx context.Context, req idemstore.ClaimRequest, lease, window int64, now any) (idemstore.ClaimResult, error) {
	var (
		res                  idemstore.ClaimResult
		won, sameFingerprint bool
		attempt              int32
		state                string
		storage              int16
		writeID, body        []byte
		generation           int64
	)
	err := s.db.QueryRow(ctx, s.sql.claim, req.Key, req.Tool, req.Fingerprint, req.Token, lease, window, now).Scan(
		&won, &attempt, &sameFingerprint, &state, &res.Started, &res.LeaseUntil, &storage, &res.Size, &writeID, &res.Response.IsError, &body, &res.Now, &res.Checksum, &generation)
	if err != nil {
		return idemstore.ClaimResult{}, s.translate("claim", err)
	}
	res.Attempt = int(attempt)
	switch {
	case won && attempt == 1:
		return idemstore.ClaimResult{Status: idemstore.ClaimAcquired, Attempt: 1, Started: res.Started, Now: res.Now, Generation: generation}, nil
	case won:
		return idemstore.ClaimResult{Status: idemstore.ClaimTakenOver, Attempt: res.Attempt, Started: res.Started, Now: res.Now, Generation: generation}, nil
	case !sameFingerprint:
		return idemstore.ClaimResult{Status: idemstore.ClaimMismatch, Attempt: res.Attempt, Started: res.Started, Now: res.Now}, nil
	case state == "succeeded":
		res.Status = idemstore.ClaimCompleted
		res.Storage = storageKind(int64(storage))
		res.Response.Body = body
		res.Response.WriteID = string(writeID)
		res.LeaseUntil = time.Time{}
		return res, nil
	case state == "in_progress":
		res.Status = idemstore.ClaimBusy
		res.Size, res.Response.IsError, res.Checksum = 0, false, nil
		return res, nil
	}
	// A released record of the same fingerprint is always taken over.
	return idemstore.ClaimResult{}, fmt.Errorf("pgstore: claim of %s: the record is %s but was not claimed", req.Tool, state)
}

// Finish implements idemstore.Store.
func (s *Store) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	var (
		tag pgconn.CommandTag
		err error
	)
	body := req.Response.Body
	if body == nil {
		body = []byte{}
	}
	now := nowArg(req.Now)
	switch {
	case !req.Succeeded:
		tag, err = s.db.Exec(ctx, s.sql.finishFailed, req.Key, req.Token, nullBytes(req.Error), now)
	case req.Storage == idemstore.StorageExternal:
		tag, err = s.db.Exec(ctx, s.sql.finishExternal, req.Key, req.Token, body, req.Size, nullBytes(req.Response.WriteID), req.Response.IsError, now, nullChecksum(req.Checksum))
	case req.Storage == idemstore.StorageDropped:
		tag, err = s.db.Exec(ctx, s.sql.finishSucceeded, req.Key, req.Token, nil, int16(idemstore.StorageDropped), req.Size, nullBytes(req.Response.WriteID), req.Response.IsError, now, nullChecksum(req.Checksum))
	case now == nil && req.Size == int64(len(body)):
		tag, err = s.db.Exec(ctx, s.sql.finishInlineDBClock, req.Key, req.Token, body, nullBytes(req.Response.WriteID), req.Response.IsError, nullChecksum(req.Checksum))
	default:
		tag, err = s.db.Exec(ctx, s.sql.finishSucceeded, req.Key, req.Token, body, int16(idemstore.StorageInline), req.Size, nullBytes(req.Response.WriteID), req.Response.IsError, now, nullChecksum(req.Checksum))
	}
	if err != nil {
		return s.translate("finish", err)
	}
	if tag.RowsAffected() == 0 {
		return idemstore.ErrLeaseLost
	}
	return nil
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

// nullChecksum passes a checksum to the bytea column, empty as NULL.
func nullChecksum(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// nullBytes passes s to a bytea column, "" as NULL.
func nullBytes(s string) any {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// Extend implements idemstore.Store.
func (s *Store) Extend(ctx context.Context, req idemstore.ExtendRequest) error {
	tag, err := s.db.Exec(ctx, s.sql.extend, req.Key, req.Token, micros(req.Lease), nowArg(req.Now), nullBytes(req.Note))
	if err != nil {
		return s.translate("extend", err)
	}
	if tag.RowsAffected() == 0 {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// Response implements idemstore.Store.
func (s *Store) Response(ctx context.Context, key string) ([]byte, error) {
	var body []byte
	err := s.db.QueryRow(ctx, s.sql.response, key).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, idemstore.ErrNotFound
	}
	if err != nil {
		return nil, s.translate("load response", err)
	}
	return body, nil
}

// Lookup implements idemstore.Store.
func (s *Store) Lookup(ctx context.Context, req idemstore.LookupRequest) (idemstore.Record, error) {
	var (
		rec  idemstore.Record
		body []byte
	)
	row := s.db.QueryRow(ctx, s.sql.inspect, req.Key, req.Body, nowArg(req.Now))
	err := scanRecord(row, &rec, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return idemstore.Record{}, idemstore.ErrNotFound
	}
	if err != nil {
		return idemstore.Record{}, s.translate("lookup", err)
	}
	if req.Body && rec.State == idemstore.StateCompleted && rec.Storage != idemstore.StorageDropped {
		if body == nil {
			body = []byte{}
		}
		rec.Body = body
	}
	return rec, nil
}

// Cancel implements idemstore.Store: one UPDATE decides, on the locked row,
// so that of a Cancel and a Finish racing on a record exactly one wins.
// When it changes nothing, a read of the record says why.
func (s *Store) Cancel(ctx context.Context, req idemstore.CancelRequest) (idemstore.Record, error) {
	now := nowArg(req.Now)
	for try := 0; ; try++ {
		var rec idemstore.Record
		err := scanRecord(s.db.QueryRow(ctx, s.sql.cancel, req.Key, nullBytes(req.Reason), req.Abandoned, now), &rec)
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return idemstore.Record{}, s.translate("cancel", err)
		}
		rec, err = s.Lookup(ctx, idemstore.LookupRequest{Key: req.Key, Now: req.Now})
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

// List implements idemstore.Store.
func (s *Store) List(ctx context.Context, req idemstore.ListRequest) ([]idemstore.Record, error) {
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
	var out []idemstore.Record
	for rows.Next() {
		var rec idemstore.Record
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
func scanRecord(row pgx.Row, rec *idemstore.Record, extra ...any) error {
	var (
		state                  string
		attempt                int32
		storage                int16
		writeID, lastErr, note []byte
	)
	dest := append([]any{&rec.Key, &rec.Tool, &rec.Fingerprint, &state, &attempt, &rec.Started, &rec.LeaseUntil, &rec.ExpiresAt,
		&storage, &rec.Size, &writeID, &rec.IsError, &lastErr, &note, &rec.Cancelled, &rec.Updated, &rec.Checksum, &rec.Generation, &rec.Now}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	rec.State = recordState(state)
	rec.Attempt = int(attempt)
	rec.Error, rec.Note = string(lastErr), string(note)
	if rec.State == idemstore.StateCompleted {
		rec.Storage = storageKind(int64(storage))
		rec.WriteID = string(writeID)
	} else {
		rec.Size, rec.IsError = 0, false
	}
	return nil
}

// recordState maps the state column to an idemstore.RecordState.
func recordState(s string) idemstore.RecordState {
	switch s {
	case "succeeded":
		return idemstore.StateCompleted
	case "failed":
		return idemstore.StateReleased
	}
	return idemstore.StateInProgress
}

// dbState maps an idemstore.RecordState to the state column.
func dbState(s idemstore.RecordState) string {
	switch s {
	case idemstore.StateCompleted:
		return "succeeded"
	case idemstore.StateReleased:
		return "failed"
	}
	return "in_progress"
}

// Sweep implements idemstore.Store.
func (s *Store) Sweep(ctx context.Context, req idemstore.SweepRequest) (int, error) {
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
// idemstore.ErrTransient (see transient).
func (s *Store) translate(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case sqlstateUndefinedTable:
			return fmt.Errorf("pgstore: %s: idemkit's tables are missing in schema %q; run (*pgstore.Store).Migrate first: %w", op, s.schemaName(), err)
		case sqlstateSerializationFailure, sqlstateDeadlockDetected:
			err = fmt.Errorf("pgstore: %s: the transaction conflicted with a concurrent one; retry the whole transaction: %w", op, err)
			return idemstore.Transient(err)
		case sqlstateInFailedTransaction:
			return fmt.Errorf("pgstore: %s: the transaction has already failed; roll it back: %w", op, err)
		}
	}
	if transient(err) {
		return idemstore.Transient(fmt.Errorf("pgstore: %s: %w", op, err))
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
