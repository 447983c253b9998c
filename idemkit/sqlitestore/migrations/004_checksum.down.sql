ALTER TABLE idemkit_claims DROP COLUMN checksum_token;
ALTER TABLE idemkit_claims DROP COLUMN checksum;
