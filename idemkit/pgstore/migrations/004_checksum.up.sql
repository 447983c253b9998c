-- Integrity of stored outcomes: a checksum of each completed record's
-- outcome (key, storage kind, size, error flag, write ID and body: what a
-- replay returns), computed by the Guard and verified on every replay and
-- Guard.Lookup, so that a record damaged in storage (a body overwritten,
-- an out-of-range storage kind, a body stored apart that is gone) is
-- refused (idemkit.ErrRecordDamaged) instead of replayed as the wrong bytes
-- or run again.
--
-- checksum_token is the fencing token of the attempt whose finish wrote
-- the checksum: the store returns the checksum only while the row still
-- holds that attempt's outcome (checksum_token = token). A finish by an
-- earlier version of the store, which writes no checksum (a replica not yet
-- upgraded, during a rolling deploy), leaves a stale one behind that is
-- then ignored, not mistaken for damage.
--
-- Rows written before this migration have NULL in both: they are replayed
-- unchecked (their storage kind and external bodies are still checked).
-- The checksum detects damage, not forgery: whoever can write the table can
-- rewrite the checksum too.
ALTER TABLE {schema}idemkit_claims
    ADD COLUMN checksum       bytea,   -- SHA-256 of the outcome; NULL: unchecked
    ADD COLUMN checksum_token bigint;  -- the token of the attempt that wrote checksum
