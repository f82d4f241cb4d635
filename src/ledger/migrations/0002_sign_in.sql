-- Dashboard sign-in: password hashes (argon2id PHC strings), e-mail verification, server-side
-- sessions and one-time e-mail tokens. Accounts made before this (by the operator CLI) count
-- as verified; they have no password until a reset sets one.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;
ALTER TABLE accounts ADD COLUMN verified_at INTEGER;
UPDATE accounts SET verified_at = created_at;

-- Sessions by the SHA-256 of their cookie value; the value itself is never stored.
CREATE TABLE sessions (
    id_hash      BLOB    PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_account ON sessions(account_id);

-- One-time links sent by e-mail (verify the address, reset the password), stored hashed.
CREATE TABLE email_tokens (
    token_hash BLOB    PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    purpose    TEXT    NOT NULL CHECK (purpose IN ('verify', 'reset')),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
) STRICT;
