-- Inspection (Store.Lookup, Store.List) and hostile values.
--
-- write_id, last_error and the new note hold whatever bytes a tool or a
-- heartbeat produced: NUL and invalid UTF-8 included, which a text column
-- refuses (SQLSTATE 22021). As bytea they round-trip byte for byte.
ALTER TABLE {schema}idemkit_claims
    ALTER COLUMN write_id   TYPE bytea USING convert_to(write_id, 'UTF8'),
    ALTER COLUMN last_error TYPE bytea USING convert_to(last_error, 'UTF8'),
    ADD COLUMN note bytea;                          -- the current attempt's last progress note
