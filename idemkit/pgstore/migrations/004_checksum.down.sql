ALTER TABLE {schema}idemkit_claims
    DROP COLUMN checksum_token,
    DROP COLUMN checksum;
