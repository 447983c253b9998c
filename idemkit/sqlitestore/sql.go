package sqlitestore

// The store's SQL, in one place. Parameters are numbered so that one value
// can be used more than once. Times are integer Unix nanoseconds.

// Conditions on the existing record (c) in claimSQL, judged at ?5 (now).
const (
	// condExpired: the window is over and no live lease holds the record.
	// It is replaced as if it did not exist.
	condExpired = `(c.expires_at <= ?5 AND (c.state <> 'in_progress' OR c.lease_until <= ?5))`
	// condTakeover: same fingerprint, and the attempt failed or its lease
	// lapsed. The caller takes the record over.
	condTakeover = `(c.fingerprint = ?3 AND (c.state = 'failed' OR (c.state = 'in_progress' AND c.lease_until <= ?5)))`
	// condClaim: the caller ends up holding the record.
	condClaim = `(` + condExpired + ` OR ` + condTakeover + `)`
)

// Claim statuses as claimSQL returns them; they equal idemstore.ClaimStatus.
const (
	statusAcquired  = 1
	statusTakenOver = 2
	statusCompleted = 3
	statusBusy      = 4
	statusMismatch  = 5
)

// claimSQL claims a key in one atomic statement (never a select followed by
// an insert). SQLite runs every write under the database's single write
// lock, so no two claims interleave and none sees a half-written record.
//
// With no record, it inserts one: a fresh claim, attempt 1. Otherwise the
// record (c) is, at ?5 (now):
//
//   - expired: replaced as if it did not exist (fresh claim, attempt 1,
//     the caller's token as its generation);
//   - failed, or in progress with a lapsed lease, and of the same
//     fingerprint: taken over. The caller's token replaces the old one,
//     which fences the old worker off; the attempt is incremented and the
//     window reaches at least now+Window; the generation is kept;
//   - otherwise (completed, busy, mismatch): left as it is.
//
// A claim that leaves the record as it is rewrites it with the same bytes,
// which SQLite does not write to disk: a replay or an in-progress answer
// costs no synced commit (sweep_at, the indexed copy of expires_at, is kept
// by a trigger for that reason; see the migration).
//
// SQLite has no xmax. RETURNING tells the cases apart by the token, which
// only a claim by this request sets to ?4 (tokens are random), and by the
// attempt count (1 after an insert or a fresh claim). The body comes back
// only for a completed record stored inline: an external body is never read
// on the claim path. The outcome's checksum comes back with a completed
// record only when the finish that wrote the outcome wrote it
// (checksum_token is that attempt's token; see the 004 migration).
const claimSQL = `INSERT INTO idemkit_claims AS c (
    key, tool, fingerprint, state, token, generation, attempt,
    started_at, lease_until, expires_at, sweep_at, created_at, updated_at)
VALUES (?1, ?2, ?3, 'in_progress', ?4, ?4, 1, ?5, ?6, ?7, ?7, ?5, ?5)
ON CONFLICT (key) DO UPDATE SET
    tool        = iif(` + condExpired + `, ?2, c.tool),
    fingerprint = iif(` + condExpired + `, ?3, c.fingerprint),
    created_at  = iif(` + condExpired + `, ?5, c.created_at),
    generation  = iif(` + condExpired + `, ?4, c.generation),
    attempt     = CASE WHEN ` + condExpired + ` THEN 1
                       WHEN ` + condTakeover + ` THEN c.attempt + 1
                       ELSE c.attempt END,
    expires_at  = CASE WHEN ` + condExpired + ` THEN ?7
                       WHEN ` + condTakeover + ` THEN max(c.expires_at, ?7)
                       ELSE c.expires_at END,
    state       = iif(` + condClaim + `, 'in_progress', c.state),
    token       = iif(` + condClaim + `, ?4, c.token),
    started_at  = iif(` + condClaim + `, ?5, c.started_at),
    lease_until = iif(` + condClaim + `, ?6, c.lease_until),
    response    = iif(` + condClaim + `, NULL, c.response),
    storage     = iif(` + condClaim + `, 0, c.storage),
    size        = iif(` + condClaim + `, 0, c.size),
    write_id    = iif(` + condClaim + `, '', c.write_id),
    is_error    = iif(` + condClaim + `, 0, c.is_error),
    last_error  = iif(` + condClaim + `, '', c.last_error),
    note        = iif(` + condClaim + `, '', c.note),
    cancelled   = iif(` + condClaim + `, 0, c.cancelled),
    updated_at  = iif(` + condClaim + `, ?5, c.updated_at)
RETURNING
    -- the status: statusAcquired (1), statusTakenOver (2), statusMismatch (5),
    -- statusCompleted (3), statusBusy (4)
    CASE WHEN token = ?4 THEN iif(attempt = 1, 1, 2)
         WHEN fingerprint <> ?3 THEN 5
         WHEN state = 'succeeded' THEN 3
         ELSE 4 END AS status,
    attempt, started_at, lease_until,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded', storage, 0) AS storage,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded', size, 0) AS size,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded', write_id, '') AS write_id,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded', is_error, 0) AS is_error,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded' AND storage = 0, response, NULL) AS response,
    iif(token <> ?4 AND fingerprint = ?3 AND state = 'succeeded' AND checksum_token = token, checksum, NULL) AS checksum,
    generation`

// finishSucceededSQL and finishFailedSQL record an attempt's outcome,
// fenced by its token: they change nothing (no row) once another caller has
// taken the record over.
// They are idempotent for their token: repeated after a lost
// acknowledgement, they match the row they already wrote (same token, the
// same end state) and write the same values again, so a retry succeeds.
const (
	finishSucceededSQL = `UPDATE idemkit_claims SET
    state = 'succeeded', response = ?3, storage = ?4, size = ?5, write_id = ?6, is_error = ?7, updated_at = ?8,
    checksum = ?9, checksum_token = ?2
WHERE key = ?1 AND token = ?2 AND state <> 'failed'`

	finishFailedSQL = `UPDATE idemkit_claims SET
    state = 'failed', last_error = ?3, updated_at = ?4
WHERE key = ?1 AND token = ?2 AND state <> 'succeeded'`
)

// putResponseSQL stores an external body (inside the finish's transaction).
const putResponseSQL = `INSERT INTO idemkit_responses (key, body) VALUES (?1, ?2)
ON CONFLICT (key) DO UPDATE SET body = excluded.body`

// extendSQL pushes the lease of the attempt holding the token, and the
// window's end at least as far.
const extendSQL = `UPDATE idemkit_claims SET
    lease_until = ?3, expires_at = max(expires_at, ?3), updated_at = ?4, note = iif(?5 = '', note, ?5)
WHERE key = ?1 AND token = ?2 AND state = 'in_progress'`

// responseSQL reads an external body; only a completed record that says
// its body is external has one (a stale body of a replaced record does not
// count).
const responseSQL = `SELECT r.body FROM idemkit_responses AS r
JOIN idemkit_claims AS c ON c.key = r.key
WHERE r.key = ?1 AND c.state = 'succeeded' AND c.storage = 1`

// sweepSQL deletes up to ?2 expired records (?2 < 0: all); a trigger
// deletes their external bodies.
const sweepSQL = `DELETE FROM idemkit_claims WHERE key IN (
    SELECT key FROM idemkit_claims
    WHERE sweep_at <= ?1 AND expires_at <= ?1 AND (state <> 'in_progress' OR lease_until <= ?1)
    LIMIT ?2)`

// recordColumns are the columns of an idemstore.Record, in scanRecord's order.
const recordColumns = `c.key, c.tool, c.fingerprint, c.state, c.attempt, c.started_at, c.lease_until, c.expires_at,
    c.storage, c.size, c.write_id, c.is_error, c.last_error, c.note, c.cancelled, c.updated_at,
    iif(c.state = 'succeeded' AND c.checksum_token = c.token, c.checksum, NULL), c.generation`

// cancelSQL releases the record's attempt in progress, whichever token
// holds it (with ?3, only when its lease has run out at ?4), and fences it
// out: no attempt holds token 0. No row comes back when it changed
// nothing. (RETURNING names the modified table's columns unqualified.)
const cancelSQL = `UPDATE idemkit_claims SET
    state = 'failed', token = 0, last_error = ?2, cancelled = 1, updated_at = ?4
WHERE key = ?1 AND state = 'in_progress' AND (NOT ?3 OR lease_until <= ?4)
RETURNING key, tool, fingerprint, state, attempt, started_at, lease_until, expires_at,
    storage, size, write_id, is_error, last_error, note, cancelled, updated_at, NULL, generation`

// lookupSQL reads one record and, with ?2, its kept body, inline or
// external.
const lookupSQL = `SELECT ` + recordColumns + `,
    CASE WHEN ?2 AND c.state = 'succeeded' THEN
        CASE c.storage WHEN 0 THEN c.response
                       WHEN 1 THEN (SELECT r.body FROM idemkit_responses AS r WHERE r.key = c.key) END
    END
FROM idemkit_claims AS c WHERE c.key = ?1`

// listSQL reads a page of records in key order (the primary key's index).
// "c.key >= ?2" lets the index find a key prefix; the byte comparison makes
// the match exact.
const listSQL = `SELECT ` + recordColumns + `
FROM idemkit_claims AS c
WHERE c.key > ?1 AND c.key >= ?2
  AND substr(CAST(c.key AS BLOB), 1, length(CAST(?2 AS BLOB))) = CAST(?2 AS BLOB)
  AND (?3 = '' OR c.tool = ?3) AND (?4 = '' OR c.state = ?4)
ORDER BY c.key
LIMIT ?5`
