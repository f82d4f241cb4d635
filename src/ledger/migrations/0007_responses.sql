-- tollgate ledger, version 7: stored Responses API objects (`store: true`), readable and
-- deletable by their account for 30 days, and continued with `previous_response_id`.
CREATE TABLE stored_responses (
    id           TEXT    PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    body         TEXT    NOT NULL,
    conversation TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX stored_responses_expiry ON stored_responses(expires_at);
