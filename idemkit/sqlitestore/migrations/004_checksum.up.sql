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
-- holds that attempt's outcome (checksum_token = token), so that a finish
-- by an earlier version of the store (which writes none) leaves a stale one
-- that is ignored, not mistaken for damage.
--
-- Rows written before this migration have NULL in both: they are replayed
-- unchecked (their storage kind and external bodies are still checked).
-- The checksum detects damage, not forgery: whoever can write the file can
-- rewrite the checksum too.
ALTER TABLE idemkit_claims ADD COLUMN checksum BLOB;            -- SHA-256 of the outcome; NULL: unchecked
ALTER TABLE idemkit_claims ADD COLUMN checksum_token INTEGER;   -- the token of the attempt that wrote checksum
