//! Top-ups in the user's currency through Stripe Checkout: `POST /api/v1/topups` (session)
//! creates a Checkout Session and a pending top-up; `POST /webhooks/stripe` credits it when the
//! signed `checkout.session.completed` event arrives, once per event and once per checkout.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::common::{ok, Body, DashError, Session};
use crate::accounts::{now, NewCheckout, TopupOutcome};
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::money::Micros;
use crate::payments::{self, PaymentError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopupBody {
    /// Decimal string in `currency`, e.g. `"10.00"`.
    amount: String,
    /// ISO 4217 code, e.g. `"eur"`.
    currency: String,
}

/// `POST /topups`'s answer: where to pay.
#[derive(Serialize)]
struct StartedView {
    checkout_url: String,
    checkout_id: String,
    usd_micros: Micros,
    usd: f64,
    state: &'static str,
}

/// `GET /topups/{id}`'s answer.
#[derive(Serialize)]
struct StatusView {
    state: String,
    currency: String,
    amount_minor: i64,
    usd_micros: Micros,
    usd: f64,
    completed_at: Option<i64>,
}

/// The webhook's answer: whether the event was a top-up's, and what it credited.
#[derive(Serialize)]
struct Handled {
    handled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    credited_micros: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate: Option<bool>,
}

fn not_configured() -> DashError {
    DashError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        DashCode::PaymentsNotConfigured,
        "Top-ups by card are not configured on this server; redeem a code instead.",
    )
}

/// `POST /api/v1/topups {amount, currency}` -> 201 `{checkout_url, ...}`: pay there; the
/// balance is credited when Stripe confirms.
pub async fn create(
    State(state): State<Accounts>,
    s: Session,
    headers: HeaderMap,
    Body(b): Body<TopupBody>,
) -> Result<Response, DashError> {
    let cfg = state.payments.clone().ok_or_else(not_configured)?;
    let (minor, usd, rate) = cfg.rates.convert(&b.amount, &b.currency).map_err(|e| {
        let code = match e {
            PaymentError::Currency(..) => DashCode::UnsupportedCurrency,
            _ => DashCode::InvalidAmount,
        };
        DashError::bad_request(code, format!("{e}."))
    })?;
    let usd = Micros(usd);
    let currency = b.currency.trim().to_lowercase();
    let base = super::common::base_url(&state, &headers);
    let checkout = (state.service)
        .start_topup(
            cfg,
            NewCheckout {
                account: s.principal.account_id,
                amount: b.amount,
                currency,
                amount_minor: minor,
                usd,
                rate,
                // Stripe puts the Checkout Session id in place of the template, so the page can
                // poll `GET /api/v1/topups/{id}` until the webhook has credited it.
                success_url: format!("{base}/?topup=success&checkout_id={{CHECKOUT_SESSION_ID}}"),
                cancel_url: format!("{base}/?topup=cancelled"),
            },
        )
        .await?;
    Ok(ok(
        StatusCode::CREATED,
        StartedView {
            checkout_url: checkout.url,
            checkout_id: checkout.id,
            usd_micros: usd,
            usd: usd.usd(),
            state: "pending",
        },
    ))
}

/// `GET /api/v1/topups/{checkout_id}`: the state of one of the account's top-ups (`pending`
/// until the provider's webhook confirms it, then `completed`); 404 for unknown or another
/// account's checkouts.
pub async fn status(
    State(state): State<Accounts>,
    s: Session,
    Path(checkout_id): Path<String>,
) -> Result<Response, DashError> {
    let found = (state.service)
        .topup_status(s.principal.account_id, checkout_id)
        .await?
        .ok_or_else(|| {
            DashError::new(
                StatusCode::NOT_FOUND,
                DashCode::TopupNotFound,
                "No such top-up.",
            )
        })?;
    Ok(ok(
        StatusCode::OK,
        StatusView {
            usd: found.usd_micros.usd(),
            state: found.state,
            currency: found.currency,
            amount_minor: found.amount_minor,
            usd_micros: found.usd_micros,
            completed_at: found.completed_at,
        },
    ))
}

/// `POST /webhooks/stripe`: Stripe's signed events. A forged or stale signature is 400 and
/// changes nothing; a replayed event or a second event for the same checkout is acknowledged
/// without crediting again.
pub async fn webhook(
    State(state): State<Accounts>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, DashError> {
    let cfg = state.payments.clone().ok_or_else(|| {
        DashError::new(
            StatusCode::NOT_FOUND,
            DashCode::NotFound,
            "No payment provider is configured.",
        )
    })?;
    let signature = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    payments::verify_signature(&cfg.webhook_secret, signature, &body, now())
        .map_err(|e| DashError::bad_request(DashCode::InvalidSignature, format!("{e}.")))?;
    let event = payments::completed_checkout(&body)
        .map_err(|e| DashError::bad_request(DashCode::InvalidEvent, format!("{e}.")))?;
    let Some(c) = event else {
        return Ok(ok(
            StatusCode::OK,
            Handled {
                handled: false,
                credited_micros: None,
                duplicate: None,
            },
        ));
    };
    let outcome = (state.service)
        .complete_topup(c.event_id, c.session_id, c.currency, c.amount_total)
        .await?;
    let data = match outcome {
        TopupOutcome::Credited {
            account_id,
            usd_micros,
        } => {
            tracing::info!(
                account_id = account_id.0,
                usd_micros = usd_micros.0,
                "top-up credited"
            );
            Handled {
                handled: true,
                credited_micros: Some(usd_micros),
                duplicate: None,
            }
        }
        TopupOutcome::DuplicateEvent | TopupOutcome::AlreadyCredited => Handled {
            handled: true,
            credited_micros: Some(Micros::ZERO),
            duplicate: Some(true),
        },
    };
    Ok(ok(StatusCode::OK, data))
}
