-- The record's generation (idemkit.Record.Generation): the token of the
-- claim that created the record, kept by every takeover, so that all the
-- attempts of one record forward one downstream key
-- (idemkit.Call.IdempotencyKey) and a new record (a deliberate repeat after
-- the window) another. Rows written before it get 0, whose downstream key
-- is the one earlier versions forwarded: an attempt taking such a row over
-- repeats its first attempt's key.
ALTER TABLE {schema}idemkit_claims
    ADD COLUMN generation bigint NOT NULL DEFAULT 0;
