//! The admin role on the dashboard: list accounts and adjust a balance with a reason (an
//! `adjustment` ledger entry naming the admin). Only sessions of admin accounts get here.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::common::account_json;
use super::common::{blocking, ok, Body, DashError, Session};
use crate::api::state::AppState;
use crate::ledger::{Ledger, LedgerError};

/// The session's account, if it is an admin.
fn require_admin(ledger: &Ledger, s: &Session) -> Result<String, DashError> {
    let me = ledger.account(s.principal.account_id)?;
    if me.admin {
        Ok(me.email)
    } else {
        Err(DashError::new(
            StatusCode::FORBIDDEN,
            "admin_only",
            "Only admin accounts can do this.",
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsPage {
    /// Return accounts with ids greater than this (the last id of the previous page).
    after: Option<i64>,
    limit: Option<usize>,
}

/// `GET /api/v1/admin/accounts?after=0&limit=50`: accounts in id order with balances.
pub async fn accounts(
    State(state): State<AppState>,
    s: Session,
    Query(p): Query<AccountsPage>,
) -> Result<Response, DashError> {
    let ledger = state.ledger.clone();
    let rows = blocking(move || {
        require_admin(&ledger, &s)?;
        Ok(ledger.accounts_page(
            crate::ledger::AccountId(p.after.unwrap_or(0)),
            p.limit.unwrap_or(50).clamp(1, 500),
        )?)
    })
    .await?;
    let next = rows.last().map(|a| a.id);
    Ok(ok(
        StatusCode::OK,
        json!({"accounts": rows.iter().map(account_json).collect::<Vec<_>>(), "next_after": next}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adjustment {
    /// Signed USD amount as a decimal string, e.g. `"5.00"` or `"-1.25"` (up to 6 decimals).
    amount_usd: String,
    reason: String,
}

/// Largest adjustment, in micros (1,000,000 USD): keeps every balance sum far from `i64`
/// overflow.
const MAX_ADJUST_MICROS: u64 = 1_000_000_000_000;

/// Parse a signed USD decimal string into micros.
fn signed_micros(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, digits) = s.strip_prefix('-').map_or((false, s), |d| (true, d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty()
        || frac.len() > 6
        || !format!("{int}{frac}").bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let micros: i64 = format!("{int}{frac:0<6}").parse().ok()?;
    Some(if neg { -micros } else { micros })
}

/// `POST /api/v1/admin/accounts/{id}/adjust {amount_usd, reason}`: credit or debit a balance;
/// a debit may not exceed what is available (balance minus running holds).
pub async fn adjust(
    State(state): State<AppState>,
    s: Session,
    Path(id): Path<String>,
    Body(b): Body<Adjustment>,
) -> Result<Response, DashError> {
    let id: i64 = id.parse().map_err(|_| {
        DashError::new(
            StatusCode::NOT_FOUND,
            "account_not_found",
            "No such account.",
        )
    })?;
    let micros = signed_micros(&b.amount_usd)
        .filter(|&m| m != 0 && m.unsigned_abs() <= MAX_ADJUST_MICROS)
        .ok_or_else(|| {
            DashError::bad_request(
                "invalid_amount",
                "Give a non-zero USD amount such as 5.00 or -1.25 (at most 6 decimals, at most 1,000,000 USD).",
            )
        })?;
    let reason = b.reason.trim().to_owned();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(DashError::bad_request(
            "invalid_reason",
            "Give a reason of 1 to 500 characters; it is written on the ledger entry.",
        ));
    }
    let ledger = state.ledger.clone();
    let a = blocking(move || {
        let admin = require_admin(&ledger, &s)?;
        match ledger.adjust(
            crate::ledger::AccountId(id),
            micros,
            &format!("by {admin}: {reason}"),
        ) {
            Err(LedgerError::InsufficientBalance { available, .. }) => Err(DashError::bad_request(
                "would_go_negative",
                format!("The debit exceeds the available balance ({available} micros)."),
            )),
            Err(LedgerError::NoSuchAccount(_)) => Err(DashError::new(
                StatusCode::NOT_FOUND,
                "account_not_found",
                "No such account.",
            )),
            other => Ok(other?),
        }
    })
    .await?;
    Ok(ok(StatusCode::OK, json!({"account": account_json(&a)})))
}

#[cfg(test)]
mod tests {
    #[test]
    fn signed_usd_amounts_parse_exactly() {
        use super::signed_micros;
        assert_eq!(signed_micros("5"), Some(5_000_000));
        assert_eq!(signed_micros("-1.25"), Some(-1_250_000));
        assert_eq!(signed_micros("0.000001"), Some(1));
        assert_eq!(signed_micros("1.0000001"), None);
        assert_eq!(signed_micros("1e3"), None);
        assert_eq!(signed_micros("--1"), None);
        assert_eq!(signed_micros(""), None);
    }
}
