//! `tollgate ledger check`: verifies the ledger's invariants and names the offending rows.
//!
//! Invariants: (1) no negative balance; (2) each balance equals the sum of its balance-moving
//! entries (grant, topup, redeem, adjustment, settle); (3) no hold outlives its request (no
//! open hold: run it while the server is stopped or idle); (4) settled <= reserved for every
//! hold; (5) for every closed hold, charged plus released equals reserved; (6) a stored
//! idempotent response belongs to a charged request (its hold settled); (7) a claim still
//! running belongs to a request still running (its hold open).

use super::db::args;
use super::{Ledger, LedgerError};

/// One broken invariant, with the row that breaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl Ledger {
    /// All violations (empty when the books are consistent).
    ///
    /// # Errors
    /// Database errors.
    pub fn check(&self) -> Result<Vec<Violation>, LedgerError> {
        self.read(|c| {
            let mut out = Vec::new();
            let mut q = |invariant: &'static str, sql: &str| -> Result<(), LedgerError> {
                let rows = c.query_all(sql, args![], |r| r.get::<_, String>(0))?;
                for detail in rows {
                    out.push(Violation { invariant, detail });
                }
                Ok(())
            };
            q("no negative balance", "SELECT 'account ' || id || ' balance ' || balance_micros FROM accounts WHERE balance_micros < 0")?;
            q(
                "balance = sum of entries",
                "SELECT 'account ' || a.id || ' balance ' || a.balance_micros || ' but entries sum to ' || COALESCE(s.total, 0)
                 FROM accounts a LEFT JOIN (SELECT account_id, CAST(SUM(amount_micros) AS BIGINT) AS total FROM entries
                   WHERE kind IN ('grant', 'topup', 'redeem', 'adjustment', 'settle') GROUP BY account_id) s ON s.account_id = a.id
                 WHERE a.balance_micros != COALESCE(s.total, 0)",
            )?;
            q("no hold outlives its request", "SELECT 'hold ' || request_id || ' of account ' || account_id || ' is still open (' || reserved_micros || ' micros)' FROM holds WHERE state = 'open'")?;
            q("settled <= reserved", "SELECT 'hold ' || request_id || ' settled ' || settled_micros || ' > reserved ' || reserved_micros FROM holds WHERE settled_micros > reserved_micros")?;
            q(
                "charged + released = reserved",
                "SELECT 'hold ' || h.request_id || ': reserved ' || h.reserved_micros || ', charged ' || COALESCE(-s.amt, 0) || ', released ' || COALESCE(r.amt, 0)
                 FROM holds h
                 LEFT JOIN (SELECT request_id, CAST(SUM(amount_micros) AS BIGINT) AS amt FROM entries WHERE kind = 'settle' GROUP BY request_id) s ON s.request_id = h.request_id
                 LEFT JOIN (SELECT request_id, CAST(SUM(amount_micros) AS BIGINT) AS amt FROM entries WHERE kind = 'release' GROUP BY request_id) r ON r.request_id = h.request_id
                 WHERE h.state != 'open' AND COALESCE(-s.amt, 0) + COALESCE(r.amt, 0) != h.reserved_micros",
            )?;
            q(
                "a stored response belongs to a charge",
                "SELECT 'idempotency key of request ' || i.request_id || ' is stored but its hold is ' || COALESCE(h.state, 'missing')
                 FROM idempotency i LEFT JOIN holds h ON h.request_id = i.request_id
                 WHERE i.state = 'done' AND COALESCE(h.state, '') != 'settled'",
            )?;
            q(
                "a running claim belongs to a running request",
                "SELECT 'idempotency key of request ' || i.request_id || ' is running but its hold is ' || COALESCE(h.state, 'missing')
                 FROM idempotency i LEFT JOIN holds h ON h.request_id = i.request_id
                 WHERE i.state = 'running' AND COALESCE(h.state, '') != 'open'",
            )?;
            Ok(out)
        })
    }
}
