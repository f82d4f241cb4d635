-- tollgate ledger, version 1. Money is integer micro-USD (1 micro = 1e-6 USD).

-- One row per account. `balance_micros` is a cache of SUM(entries.amount_micros) over the
-- balance-moving kinds; `tollgate ledger check` verifies it.
CREATE TABLE accounts (
    id             INTEGER PRIMARY KEY,
    email          TEXT    NOT NULL UNIQUE,
    created_at     INTEGER NOT NULL,          -- Unix seconds
    balance_micros INTEGER NOT NULL CHECK (balance_micros >= 0)
) STRICT;

-- Append-only journal. Balance-moving kinds: grant, topup, redeem, adjustment (signed) and
-- settle (negative: the charge). hold and release record reservations (amount = the reserved
-- micros, positive) and never move the balance.
CREATE TABLE entries (
    id            INTEGER PRIMARY KEY,
    account_id    INTEGER NOT NULL REFERENCES accounts(id),
    kind          TEXT    NOT NULL CHECK (kind IN ('grant', 'topup', 'redeem', 'hold', 'settle', 'release', 'adjustment')),
    amount_micros INTEGER NOT NULL,
    request_id    TEXT,
    note          TEXT,
    created_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX entries_account ON entries(account_id, id);

-- Two-phase charges (TigerBeetle-style pending transfers): one row per request.
CREATE TABLE holds (
    request_id      TEXT    PRIMARY KEY,
    account_id      INTEGER NOT NULL REFERENCES accounts(id),
    reserved_micros INTEGER NOT NULL CHECK (reserved_micros >= 0),
    state           TEXT    NOT NULL CHECK (state IN ('open', 'settled', 'released')),
    settled_micros  INTEGER CHECK (settled_micros IS NULL OR settled_micros >= 0),
    created_at      INTEGER NOT NULL,
    closed_at       INTEGER
) STRICT;
CREATE INDEX holds_open ON holds(account_id) WHERE state = 'open';

CREATE TABLE api_keys (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    name         TEXT    NOT NULL,
    key_hash     BLOB    NOT NULL UNIQUE,     -- SHA-256 of the full key
    prefix       TEXT    NOT NULL,            -- e.g. sk-svc-3fa9, for listings
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
) STRICT;

-- Bumped on every revocation so running servers purge their key cache.
CREATE TABLE key_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER NOT NULL) STRICT;
INSERT INTO key_epoch (id, epoch) VALUES (1, 0);

CREATE TABLE usage (
    request_id        TEXT    PRIMARY KEY,
    account_id        INTEGER NOT NULL REFERENCES accounts(id),
    key_id            INTEGER REFERENCES api_keys(id),
    model             TEXT    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('ok', 'cancelled', 'failed')),
    cancelled         INTEGER NOT NULL CHECK (cancelled IN (0, 1)),
    latency_ms        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX usage_account ON usage(account_id, created_at);

-- Redeemable codes, stored hashed, single use.
CREATE TABLE codes (
    code_hash    BLOB    PRIMARY KEY,
    amount_micros INTEGER NOT NULL CHECK (amount_micros > 0),
    created_at   INTEGER NOT NULL,
    redeemed_by  INTEGER REFERENCES accounts(id),
    redeemed_at  INTEGER
) STRICT;

-- Idempotency records, scope (account, route, key); only executed outcomes are kept.
CREATE TABLE idempotency (
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    route       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint BLOB    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    status      INTEGER,
    body        TEXT,
    request_id  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (account_id, route, key)
) STRICT;
