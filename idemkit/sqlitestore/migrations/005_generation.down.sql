ALTER TABLE idemkit_claims DROP COLUMN generation;
