ALTER TABLE idemkit_claims DROP COLUMN cancelled;
