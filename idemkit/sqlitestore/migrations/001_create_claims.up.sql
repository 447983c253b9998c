-- idemkit claim records. Times are integer Unix nanoseconds (UTC), so that
-- leases and windows compare exactly, to the nanosecond a Go time.Time has.
CREATE TABLE idemkit_claims (
    key         TEXT    NOT NULL PRIMARY KEY,  -- idemkit.Key.ID()
    tool        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,              -- idemkit.Key.ArgsHash()
    state       TEXT    NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    token       INTEGER NOT NULL,              -- fencing token of the current attempt
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    response    BLOB,                          -- inline body, raw bytes, replayed byte for byte
    storage     INTEGER NOT NULL DEFAULT 0 CHECK (storage IN (0, 1, 2)), -- 0 inline, 1 external, 2 dropped
    size        INTEGER NOT NULL DEFAULT 0,
    write_id    TEXT    NOT NULL DEFAULT '',
    is_error    INTEGER NOT NULL DEFAULT 0 CHECK (is_error IN (0, 1)),
    last_error  TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- Sweep finds expired records through this index.
CREATE INDEX idemkit_claims_expires_at ON idemkit_claims (expires_at);

-- Bodies larger than the inline maximum, read only when a duplicate needs
-- one, never on the claim path.
CREATE TABLE idemkit_responses (
    key  TEXT NOT NULL PRIMARY KEY REFERENCES idemkit_claims (key) ON DELETE CASCADE,
    body BLOB NOT NULL
) STRICT;

-- The body goes with its record even on connections without
-- PRAGMA foreign_keys (a caller-owned *sql.DB).
CREATE TRIGGER idemkit_claims_delete_response AFTER DELETE ON idemkit_claims
BEGIN
    DELETE FROM idemkit_responses WHERE key = OLD.key;
END;
