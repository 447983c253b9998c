DROP TRIGGER IF EXISTS idemkit_claims_delete_response;
DROP TRIGGER IF EXISTS idemkit_claims_copy_sweep_at;
DROP TABLE IF EXISTS idemkit_responses;
DROP INDEX IF EXISTS idemkit_claims_sweep_at;
DROP TABLE IF EXISTS idemkit_claims;
