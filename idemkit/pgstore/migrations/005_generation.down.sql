ALTER TABLE {schema}idemkit_claims
    DROP COLUMN generation;
