//! The signed-in account's own page: its view, changing the password, deleting the account
//! (`ledger::profile` says what is kept), and the public facts the pages need before sign-in
//! (sign-in providers, whether card top-ups are configured, the starter credit).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::{Deserialize, Serialize};

use super::common::{ok, removal_cookie, AccountView, Body, DashError, Session};
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::auth::password;
use crate::money::Micros;

/// Below this available balance (micros, $0.05) the dashboard shows a low-balance notice.
pub const LOW_BALANCE_MICROS: i64 = 50_000;

/// What the pages need to know before anyone signs in.
#[derive(Serialize)]
pub struct Providers {
    /// The single sign-on provider, if configured: its label and start URL.
    oidc: Option<Oidc>,
    /// Card top-ups (Stripe Checkout) are configured.
    payments: bool,
    /// Credit granted once when a new account confirms its address.
    starter_micros: Micros,
    /// The low-balance notice threshold (`LOW_BALANCE_MICROS`).
    low_balance_micros: Micros,
}

#[derive(Serialize)]
struct Oidc {
    label: String,
    start: &'static str,
}

/// `GET /api/v1/auth/providers`: sign-in providers, payments, starter credit (public).
pub async fn providers(State(state): State<Accounts>) -> Response {
    let body = Providers {
        oidc: state.oidc.as_ref().map(|rp| Oidc {
            label: rp.label().to_owned(),
            start: "/auth/oidc/start",
        }),
        payments: state.payments.is_some(),
        starter_micros: state.dashboard.starter_micros,
        low_balance_micros: Micros(LOW_BALANCE_MICROS),
    };
    ok(StatusCode::OK, body)
}

/// `GET /api/v1/account`: e-mail, verification, whether it has a password, balance, reserved
/// and available micros.
pub async fn show(State(state): State<Accounts>, s: Session) -> Result<Response, DashError> {
    let a = state.service.account(s.principal.account_id).await?;
    Ok(ok(StatusCode::OK, AccountView::of(&a)))
}

/// Body of `POST /account/password`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPassword {
    /// Required when the account has a password.
    #[serde(default)]
    current_password: Option<String>,
    new_password: String,
}

/// `POST /api/v1/account/password {current_password, new_password}`: sets a new password;
/// this session stays signed in and every other session ends. An account without a
/// password (single sign-on) sets its first one without `current_password`.
pub async fn change_password(
    State(state): State<Accounts>,
    s: Session,
    Body(b): Body<NewPassword>,
) -> Result<Response, DashError> {
    password::check_policy(&b.new_password).map_err(|e| {
        DashError::bad_request(
            DashCode::WeakPassword,
            format!("The new password is too weak: {e}."),
        )
        .field("new_password")
    })?;
    let account = s.principal.account_id;
    state.throttles.check(
        &state.throttles.sign_in_email,
        &account.to_string(),
        "password change",
    )?;
    let ended = (state.service)
        .change_password(account, b.current_password, b.new_password, s.cookie)
        .await?;
    Ok(ok(
        StatusCode::OK,
        PasswordChanged {
            password_changed: true,
            other_sessions_ended: ended,
        },
    ))
}

/// Body of `DELETE /account`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteAccount {
    /// The account's e-mail address, typed again as confirmation (any case).
    confirm_email: String,
}

/// `POST /account/password`'s answer.
#[derive(Serialize)]
struct PasswordChanged {
    password_changed: bool,
    other_sessions_ended: usize,
}

/// `DELETE /account`'s answer: what was kept and why.
#[derive(Serialize)]
struct Deleted {
    deleted: bool,
    kept: &'static str,
}

/// What a deleted account leaves behind, as the answer states it.
const KEPT: &str = "Kept, as bookkeeping and tax law require: the ledger entries, usage records and top-ups of the account, under a pseudonymous id. Removed: your e-mail address, password, sessions, single sign-on links; every API key is revoked. The remaining balance is not paid out.";

/// `DELETE /api/v1/account {confirm_email}`: delete the signed-in account (`ledger::profile`);
/// the session cookie is removed.
pub async fn delete(
    State(state): State<Accounts>,
    jar: CookieJar,
    s: Session,
    Body(b): Body<DeleteAccount>,
) -> Result<Response, DashError> {
    (state.service)
        .delete_account(s.principal.account_id, b.confirm_email)
        .await?;
    let jar = jar.remove(removal_cookie());
    Ok((
        jar,
        ok(
            StatusCode::OK,
            Deleted {
                deleted: true,
                kept: KEPT,
            },
        ),
    )
        .into_response())
}
