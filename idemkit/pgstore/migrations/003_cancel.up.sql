-- Cancellation (Store.Cancel) and the time of a record's last change, which
-- status tools report (an MCP task's lastUpdatedAt).
ALTER TABLE {schema}idemkit_claims
    ADD COLUMN cancelled  boolean NOT NULL DEFAULT false, -- released by Store.Cancel, not by its attempt
    ADD COLUMN updated_at timestamptz;                    -- last claim, heartbeat, finish or cancel; NULL: started_at
