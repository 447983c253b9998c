-- The claim record: one row per idempotency key, the arbiter between every
-- replica. "{schema}" is replaced by the configured schema prefix.
CREATE TABLE {schema}idemkit_claims (
    key          text        PRIMARY KEY,           -- idemkit.Key.ID(): hex SHA-256, no raw subject
    tool         text        NOT NULL,
    fingerprint  text        NOT NULL,              -- explicit keys: SHA-256 of the canonical arguments; derived keys: ''
                                                    -- (the key itself commits to the arguments)
    state        text        NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    token        bigint      NOT NULL,              -- fencing token of the attempt holding the claim
    attempt      integer     NOT NULL DEFAULT 1,
    started_at   timestamptz NOT NULL,              -- when the current attempt claimed the key
    lease_until  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,              -- end of the deduplication window
    response     bytea,                             -- inline body, byte for byte (never jsonb: it reorders)
    storage      smallint    NOT NULL DEFAULT 0,    -- 0 inline, 1 external (idemkit_responses), 2 dropped
    size         bigint      NOT NULL DEFAULT 0,
    write_id     text,
    is_error     boolean     NOT NULL DEFAULT false,
    last_error   text
);

CREATE INDEX idemkit_claims_expires_at ON {schema}idemkit_claims (expires_at);

-- Bodies over the inline limit, read only when a duplicate needs one.
CREATE TABLE {schema}idemkit_responses (
    key   text  PRIMARY KEY REFERENCES {schema}idemkit_claims (key) ON DELETE CASCADE,
    body  bytea NOT NULL
);
