DROP TRIGGER IF EXISTS idemkit_claims_delete_response;
DROP TABLE IF EXISTS idemkit_responses;
DROP INDEX IF EXISTS idemkit_claims_expires_at;
DROP TABLE IF EXISTS idemkit_claims;
