//! Accounts on the dashboard: sign-up with e-mail verification, sign-in and sign-out (one or
//! every session), password reset by e-mailed link, and the account view.

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde::Serialize;

use super::common::{
    base_url, capitalize, link_page, normalize_email, removal_cookie, start_session,
};
use super::common::{ok, AccountView, Body, DashError, Session, WithAccount};
use crate::accounts::EmailLinks;
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::auth::password;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    email: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    token: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailBody {
    email: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetBody {
    token: String,
    password: String,
}

fn weak_password(e: &password::PasswordError) -> DashError {
    DashError::bad_request(
        DashCode::WeakPassword,
        format!("{}.", capitalize(&e.to_string())),
    )
}

/// `POST /auth/signup`'s answer.
#[derive(Serialize)]
struct SignedUp<'a> {
    account: AccountView<'a>,
    verification: &'static str,
}

/// `POST /auth/verify`'s answer.
#[derive(Serialize)]
struct Verified {
    verified: bool,
}

/// The answer of the e-mailing routes, the same whether or not the address has an account.
#[derive(Serialize)]
struct Sent {
    sent: &'static str,
}

/// How many sessions a sign-out ended.
#[derive(Serialize)]
struct SignedOut {
    signed_out: usize,
}

/// `POST /auth/password-reset/confirm`'s answer.
#[derive(Serialize)]
struct PasswordReset {
    password_reset: bool,
}

/// Where this request's e-mailed links go out from.
fn links(state: &Accounts, headers: &HeaderMap) -> EmailLinks {
    EmailLinks {
        outbox: state.mail.clone(),
        base: base_url(state, headers),
    }
}

/// `POST /api/v1/auth/signup {email, password}` -> 201 with the (unverified) account; the
/// verification link goes by e-mail.
pub async fn sign_up(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Body(c): Body<Credentials>,
) -> Result<Response, DashError> {
    state.throttles.check(
        &state.throttles.sign_up_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "sign-up",
    )?;
    let email = normalize_email(&c.email)?;
    password::check_policy(&c.password).map_err(|e| weak_password(&e).field("password"))?;
    let account = (state.service)
        .sign_up(email, c.password, links(&state, &headers))
        .await?;
    Ok(ok(
        StatusCode::CREATED,
        SignedUp {
            account: AccountView::of(&account),
            verification: "sent",
        },
    ))
}

async fn verify_token(state: &Accounts, token: String) -> Result<(), DashError> {
    let starter = state.dashboard.starter_micros;
    Ok(state.service.verify_email(token, starter).await?)
}

/// `POST /api/v1/auth/verify {token}`: confirm the address (grants the starter balance once).
pub async fn verify(
    State(state): State<Accounts>,
    Body(b): Body<TokenBody>,
) -> Result<Response, DashError> {
    verify_token(&state, b.token).await?;
    Ok(ok(StatusCode::OK, Verified { verified: true }))
}

#[derive(Deserialize)]
pub struct VerifyQuery {
    token: String,
}

/// `GET /verify?token=...`: the e-mailed link; confirms the address (granting the starter
/// credit the first time) and says so in a page in the dashboard's style, with the way on.
pub async fn verify_link(State(state): State<Accounts>, Query(q): Query<VerifyQuery>) -> Response {
    let starter = state.dashboard.starter_micros;
    match verify_token(&state, q.token).await {
        Ok(()) => {
            let credit = if starter > crate::money::Micros::ZERO {
                format!(
                    " Your account has ${} of starter credit to try the models.",
                    starter.usd_decimal()
                )
            } else {
                String::new()
            };
            link_page(
                StatusCode::OK,
                "Address confirmed",
                &format!("Your address is confirmed.{credit} Sign in to create an API key."),
                "Sign in",
            )
        }
        Err(e) => link_page(
            e.status,
            "Link not valid",
            &format!(
                "{} You can ask for a new confirmation e-mail on the sign-in page.",
                e.message
            ),
            "Go to sign in",
        ),
    }
}

/// `POST /api/v1/auth/resend-verification {email}`: e-mails a new confirmation link if the
/// address has an account that is not confirmed yet. The answer is the same either way (no
/// account discovery); throttled with sign-ups (per client address) and per address.
pub async fn resend_verification(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Body(b): Body<EmailBody>,
) -> Result<Response, DashError> {
    let email = normalize_email(&b.email).map_err(|e| e.field("email"))?;
    let t = &state.throttles;
    t.check(
        &t.reset_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "resend-verification",
    )?;
    t.check(&t.resend_email, &email, "resend-verification")?;
    (state.service)
        .resend_verification(email, links(&state, &headers))
        .await?;
    Ok(ok(
        StatusCode::OK,
        Sent {
            sent: "if the address has an unconfirmed account",
        },
    ))
}

/// `POST /api/v1/auth/signin {email, password}`: sets a new session cookie.
pub async fn sign_in(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    jar: CookieJar,
    Body(c): Body<Credentials>,
) -> Result<Response, DashError> {
    // Bounded and normalized before it keys a throttle; a malformed address cannot sign in.
    let email = normalize_email(&c.email)
        .map_err(|_| DashError::from(crate::accounts::AccountsError::InvalidCredentials))?;
    let t = &state.throttles;
    t.check(
        &t.sign_in_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "sign-in",
    )?;
    t.check(&t.sign_in_email, &email, "sign-in")?;
    let account = state.service.sign_in(email, c.password).await?;
    let jar = start_session(&state, jar, account.id).await?;
    Ok((jar, ok(StatusCode::OK, WithAccount::of(&account))).into_response())
}

/// `POST /api/v1/auth/signout`: ends this session.
pub async fn sign_out(
    State(state): State<Accounts>,
    jar: CookieJar,
    s: Session,
) -> Result<Response, DashError> {
    state.service.end_session(s.cookie).await?;
    let jar = jar.remove(removal_cookie());
    Ok((jar, ok(StatusCode::OK, SignedOut { signed_out: 1 })).into_response())
}

/// `POST /api/v1/auth/signout-everywhere`: ends every session of the account.
pub async fn sign_out_everywhere(
    State(state): State<Accounts>,
    jar: CookieJar,
    s: Session,
) -> Result<Response, DashError> {
    let n = (state.service)
        .end_all_sessions(s.principal.account_id)
        .await?;
    let jar = jar.remove(removal_cookie());
    Ok((jar, ok(StatusCode::OK, SignedOut { signed_out: n })).into_response())
}

/// `POST /api/v1/auth/password-reset {email}`: e-mails a reset link if the address has an
/// account; the answer is the same either way (no account discovery).
pub async fn request_reset(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Body(b): Body<EmailBody>,
) -> Result<Response, DashError> {
    state.throttles.check(
        &state.throttles.reset_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "password-reset",
    )?;
    let email = normalize_email(&b.email)?;
    (state.service)
        .request_reset(email, links(&state, &headers))
        .await?;
    Ok(ok(
        StatusCode::OK,
        Sent {
            sent: "if the address has an account",
        },
    ))
}

/// `POST /api/v1/auth/password-reset/confirm {token, password}`: sets the password and ends
/// every session of the account; an address not yet confirmed counts as confirmed (the link
/// reached it) and gets the starter credit, as through the verification link.
pub async fn confirm_reset(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Body(b): Body<ResetBody>,
) -> Result<Response, DashError> {
    state.throttles.check(
        &state.throttles.reset_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "password-reset",
    )?;
    password::check_policy(&b.password).map_err(|e| weak_password(&e).field("password"))?;
    let starter = state.dashboard.starter_micros;
    (state.service)
        .confirm_reset(b.token, b.password, starter)
        .await?;
    Ok(ok(
        StatusCode::OK,
        PasswordReset {
            password_reset: true,
        },
    ))
}
