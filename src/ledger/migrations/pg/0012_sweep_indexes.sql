-- tollgate ledger, version 12: the lease sweep and start-up recovery forget running
-- idempotency claims whose hold is gone; this index keeps that scan to the running claims.
CREATE INDEX idempotency_running ON idempotency(request_id) WHERE state = 'running';

-- Activity pages walk an account's usage by `rowid` (SQLite's implicit rowid rides along in
-- every SQLite index; PostgreSQL's identity column needs its own).
CREATE INDEX usage_account_rowid ON usage(account_id, rowid);
