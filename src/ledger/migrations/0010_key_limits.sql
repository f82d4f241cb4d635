-- tollgate ledger, version 10: per-key spend limits and expiry, holds that name their key, and
-- deleted accounts.
-- `spend_limit_micros`: the most a key may spend in its life (settled charges plus open holds);
-- NULL = no limit beyond the account's balance. `expires_at`: Unix seconds after which the
-- key is refused (401); NULL = never.
ALTER TABLE api_keys ADD COLUMN spend_limit_micros INTEGER CHECK (spend_limit_micros IS NULL OR spend_limit_micros >= 0);
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
-- The key whose request took the hold (NULL: the dashboard playground, or holds taken before
-- version 10), so open holds count against the key's limit.
ALTER TABLE holds ADD COLUMN key_id INTEGER REFERENCES api_keys(id);
CREATE INDEX holds_open_key ON holds(key_id) WHERE state = 'open';
CREATE INDEX usage_key ON usage(key_id, created_at);
-- A deleted account keeps its ledger rows (entries, usage, top-ups) under its id; its e-mail
-- is replaced by a placeholder and its password, keys, sessions and identities are removed.
ALTER TABLE accounts ADD COLUMN deleted_at INTEGER;
