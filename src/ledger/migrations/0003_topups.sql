-- Top-ups through a payment provider (Stripe Checkout): one row per checkout, pending until the
-- provider's signed webhook confirms payment, then credited once.
CREATE TABLE topups (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    provider     TEXT    NOT NULL,
    provider_ref TEXT    NOT NULL UNIQUE,   -- e.g. the Checkout Session id
    currency     TEXT    NOT NULL,          -- ISO 4217, lower case
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    usd_micros   INTEGER NOT NULL CHECK (usd_micros > 0),
    rate         TEXT    NOT NULL,          -- USD per unit of `currency` used for usd_micros
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'completed')),
    created_at   INTEGER NOT NULL,
    completed_at INTEGER
) STRICT;
CREATE INDEX topups_account ON topups(account_id);

-- Provider events already handled, by their id: a replayed webhook is recognised and ignored.
CREATE TABLE provider_events (
    event_id    TEXT    PRIMARY KEY,
    provider    TEXT    NOT NULL,
    received_at INTEGER NOT NULL
) STRICT;
