DROP TABLE IF EXISTS {schema}idemkit_responses;
DROP TABLE IF EXISTS {schema}idemkit_claims;
