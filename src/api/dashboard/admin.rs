//! The admin role on the dashboard: list accounts and adjust a balance with a reason (an
//! `adjustment` ledger entry naming the admin). Only sessions of admin accounts get here.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde::Serialize;

use super::common::{ok, AccountView, Body, DashError, Session, WithAccount};
use crate::accounts::AccountsError;
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::ids::AccountId;
use crate::money::Micros;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsPage {
    /// Return accounts with ids greater than this (the last id of the previous page).
    after: Option<i64>,
    limit: Option<usize>,
}

/// `GET /api/v1/admin/accounts?after=0&limit=50`: accounts in id order with balances.
pub async fn accounts(
    State(state): State<Accounts>,
    s: Session,
    Query(p): Query<AccountsPage>,
) -> Result<Response, DashError> {
    let rows = (state.service)
        .accounts_page(
            s.principal.account_id,
            AccountId(p.after.unwrap_or(0)),
            p.limit.unwrap_or(50).clamp(1, 500),
        )
        .await?;
    let next = rows.last().map(|a| a.id);
    Ok(ok(
        StatusCode::OK,
        AccountsPageView {
            accounts: rows.iter().map(AccountView::of).collect(),
            next_after: next,
        },
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adjustment {
    /// Signed USD amount as a decimal string, e.g. `"5.00"` or `"-1.25"` (up to 6 decimals).
    amount_usd: String,
    reason: String,
}

/// `GET /admin/accounts`'s answer: a page, and the id to continue after.
#[derive(Serialize)]
struct AccountsPageView<'a> {
    accounts: Vec<AccountView<'a>>,
    next_after: Option<AccountId>,
}

/// Largest adjustment, in micros (1,000,000 USD): keeps every balance sum far from `i64`
/// overflow.
const MAX_ADJUST_MICROS: u64 = 1_000_000_000_000;

/// `POST /api/v1/admin/accounts/{id}/adjust {amount_usd, reason}`: credit or debit a balance;
/// a debit may not exceed what is available (balance minus running holds).
pub async fn adjust(
    State(state): State<Accounts>,
    s: Session,
    Path(id): Path<String>,
    Body(b): Body<Adjustment>,
) -> Result<Response, DashError> {
    let id: i64 = id
        .parse()
        .map_err(|_| DashError::from(AccountsError::NoSuchAccount))?;
    let micros = Micros::parse_usd(&b.amount_usd)
        .ok()
        .filter(|m| m.0 != 0 && m.0.unsigned_abs() <= MAX_ADJUST_MICROS)
        .ok_or_else(|| {
            DashError::bad_request(
                DashCode::InvalidAmount,
                "Give a non-zero USD amount such as 5.00 or -1.25 (at most 6 decimals, at most 1,000,000 USD).",
            )
        })?;
    let reason = b.reason.trim().to_owned();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(DashError::bad_request(
            DashCode::InvalidReason,
            "Give a reason of 1 to 500 characters; it is written on the ledger entry.",
        ));
    }
    let a = (state.service)
        .adjust(s.principal.account_id, AccountId(id), micros, reason)
        .await?;
    Ok(ok(StatusCode::OK, WithAccount::of(&a)))
}
