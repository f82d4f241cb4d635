-- tollgate ledger, version 12: the lease sweep and start-up recovery forget running
-- idempotency claims whose hold is gone; this index keeps that scan to the running claims.
CREATE INDEX idempotency_running ON idempotency(request_id) WHERE state = 'running';
