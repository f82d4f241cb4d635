-- tollgate ledger, version 6: a usage status for answers that were charged but never
-- delivered (a non-streamed request whose client went away after the work was done).
-- SQLite cannot change a CHECK constraint in place, so the table is rebuilt.
CREATE TABLE usage_v6 (
    request_id        TEXT    PRIMARY KEY,
    account_id        INTEGER NOT NULL REFERENCES accounts(id),
    key_id            INTEGER REFERENCES api_keys(id),
    model             TEXT    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('ok', 'cancelled', 'failed', 'undelivered')),
    cancelled         INTEGER NOT NULL CHECK (cancelled IN (0, 1)),
    latency_ms        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
) STRICT;
INSERT INTO usage_v6 (request_id, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micros, status, cancelled, latency_ms, created_at)
    SELECT request_id, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micros, status, cancelled, latency_ms, created_at FROM usage;
DROP TABLE usage;
ALTER TABLE usage_v6 RENAME TO usage;
CREATE INDEX usage_account ON usage(account_id, created_at);
