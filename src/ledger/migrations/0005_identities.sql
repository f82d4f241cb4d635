-- Sign-in through an OpenID Connect provider: an account is found by the provider's issuer and
-- its stable subject (`sub`, OpenID Connect Core 1.0 section 5.7), never by e-mail alone.
CREATE TABLE identities (
    issuer     TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
) STRICT;
CREATE INDEX identities_account ON identities(account_id);
