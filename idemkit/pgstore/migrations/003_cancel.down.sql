ALTER TABLE {schema}idemkit_claims
    DROP COLUMN updated_at,
    DROP COLUMN cancelled;
