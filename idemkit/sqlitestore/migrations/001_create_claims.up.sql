-- idemkit claim records. Times are integer Unix nanoseconds (UTC), so that
-- leases and windows compare exactly, to the nanosecond a Go time.Time has.
-- (The CHECKs avoid IN lists of three or more values: SQLite evaluates those
-- through a temporary table, which would cost every claim a few
-- microseconds.)
CREATE TABLE idemkit_claims (
    key         TEXT    NOT NULL PRIMARY KEY,  -- idemkit.Key.ID()
    tool        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,              -- idemkit.Key.ArgsHash()
    state       TEXT    NOT NULL CHECK (state = 'in_progress' OR state = 'succeeded' OR state = 'failed'),
    token       INTEGER NOT NULL,              -- fencing token of the current attempt
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,              -- end of the window (never decreases)
    sweep_at    INTEGER NOT NULL,              -- indexed copy of expires_at, see below
    response    BLOB,                          -- inline body, raw bytes, replayed byte for byte
    storage     INTEGER NOT NULL DEFAULT 0 CHECK (storage BETWEEN 0 AND 2), -- 0 inline, 1 external, 2 dropped
    size        INTEGER NOT NULL DEFAULT 0,
    write_id    TEXT    NOT NULL DEFAULT '',
    is_error    INTEGER NOT NULL DEFAULT 0 CHECK (is_error BETWEEN 0 AND 1),
    last_error  TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- Sweep finds expired records through this index. It is on a copy of
-- expires_at that the claim statement does not assign, kept equal by the
-- trigger below only when expires_at really changes: SQLite rewrites every
-- index on a column an UPDATE assigns, even to the same value, so an index
-- on expires_at itself would turn every replayed or in-progress claim (which
-- changes nothing) into a synced write. With it, those claims write nothing.
CREATE INDEX idemkit_claims_sweep_at ON idemkit_claims (sweep_at);

CREATE TRIGGER idemkit_claims_copy_sweep_at AFTER UPDATE OF expires_at ON idemkit_claims
WHEN NEW.expires_at IS NOT OLD.expires_at
BEGIN
    UPDATE idemkit_claims SET sweep_at = NEW.expires_at WHERE key = NEW.key;
END;

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
