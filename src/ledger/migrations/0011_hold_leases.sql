-- tollgate ledger, version 11: replicas. Holds carry the replica that took them and a lease. A replica
-- renews the leases of its open holds while their requests run; any replica releases an open
-- hold whose lease has expired (its replica died), and a restarting replica releases only its
-- own. Holds from before this version have no owner and an expired lease.
ALTER TABLE holds ADD COLUMN owner TEXT;
ALTER TABLE holds ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
CREATE INDEX holds_open_lease ON holds(lease_until) WHERE state = 'open';
CREATE INDEX holds_open_owner ON holds(owner) WHERE state = 'open';

-- Replicas seen alive (each writes its row every few seconds): the rate limits are shared
-- among those seen in the last two rounds.
CREATE TABLE replicas (
    id      TEXT    PRIMARY KEY,
    seen_at INTEGER NOT NULL
) STRICT;
