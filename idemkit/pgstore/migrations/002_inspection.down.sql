-- Fails on a record whose write ID or error text is not valid UTF-8 or
-- holds NUL (text cannot hold it): delete or sweep such records first.
ALTER TABLE {schema}idemkit_claims
    DROP COLUMN note,
    ALTER COLUMN write_id   TYPE text USING convert_from(write_id, 'UTF8'),
    ALTER COLUMN last_error TYPE text USING convert_from(last_error, 'UTF8');
