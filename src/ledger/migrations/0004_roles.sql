-- Account roles: an admin may list accounts and adjust balances (with a reason, as a ledger
-- entry) from the dashboard. Operators grant the role with `tollgate accounts set-role`.
ALTER TABLE accounts ADD COLUMN role TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin'));
