-- Cancellation (Store.Cancel): a record released by a cancel rather than by
-- its attempt's own finish. Cleared by the next claim.
ALTER TABLE idemkit_claims ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0 CHECK (cancelled BETWEEN 0 AND 1);
