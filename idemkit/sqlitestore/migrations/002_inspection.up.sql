-- Inspection (Store.Lookup, Store.List): the current attempt's last
-- progress note, stored by a heartbeat, byte for byte like write_id and
-- last_error (SQLite keeps a TEXT value's bytes as they are, NUL and invalid
-- UTF-8 included).
ALTER TABLE idemkit_claims ADD COLUMN note TEXT NOT NULL DEFAULT '';
