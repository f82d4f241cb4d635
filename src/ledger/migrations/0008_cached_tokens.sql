-- tollgate ledger, version 8: prompt tokens served from the prefix cache (billed at the
-- model's cached-input price), part of `prompt_tokens`. Earlier rows had no prefix cache.
ALTER TABLE usage ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
