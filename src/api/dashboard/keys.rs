//! Key management (session only: an API key never reaches these handlers, `Session` refuses
//! it), usage and ledger entries, and redeem codes.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::common::account_json;
use super::common::{blocking, ok, Body, DashError, Session};
use crate::api::state::Accounts;
use crate::auth::create_key;
use crate::ledger::{ApiKeyRecord, KeyState};

/// Longest key name, in characters.
const MAX_NAME_CHARS: usize = 100;
/// Most rows one page of usage or entries returns.
const MAX_PAGE: usize = 500;

fn key_json(k: &ApiKeyRecord) -> serde_json::Value {
    json!({
        "id": k.id,
        "name": k.name,
        "prefix": k.prefix,
        "created_at": k.created_at,
        "last_used_at": k.last_used_at,
        "state": match k.state { KeyState::Active => "active", KeyState::Revoked => "revoked" },
    })
}

/// `GET /api/v1/keys`: the account's keys, newest first (prefix and name, never the key).
pub async fn list(State(state): State<Accounts>, s: Session) -> Result<Response, DashError> {
    let ledger = state.ledger.clone();
    let keys = blocking(move || Ok(ledger.keys(s.principal.account_id)?)).await?;
    Ok(ok(
        StatusCode::OK,
        json!({"keys": keys.iter().map(key_json).collect::<Vec<_>>()}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    name: String,
}

/// `POST /api/v1/keys {name}` -> 201 with the full key, shown this once.
pub async fn create(
    State(state): State<Accounts>,
    s: Session,
    Body(b): Body<NewKey>,
) -> Result<Response, DashError> {
    let name = b.name.trim().to_owned();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(DashError::bad_request(
            "invalid_name",
            format!("Give the key a name of 1 to {MAX_NAME_CHARS} printable characters."),
        ));
    }
    let ledger = state.ledger.clone();
    let (key, record) = blocking(move || {
        if !ledger.account(s.principal.account_id)?.verified {
            return Err(DashError::new(
                StatusCode::FORBIDDEN,
                "email_not_verified",
                "Confirm your e-mail address before creating keys.",
            ));
        }
        Ok(create_key(&ledger, s.principal.account_id, &name)?)
    })
    .await?;
    Ok(ok(
        StatusCode::CREATED,
        json!({"key": key, "record": key_json(&record),
               "warning": "Copy this key now: it is stored only as a hash and cannot be shown again."}),
    ))
}

/// `DELETE /api/v1/keys/{id}`: revoke one of the account's keys; the next request with it
/// gets 401 (the key cache is purged at once).
pub async fn revoke(
    State(state): State<Accounts>,
    s: Session,
    Path(id): Path<String>,
) -> Result<Response, DashError> {
    let not_found = || DashError::new(StatusCode::NOT_FOUND, "key_not_found", "No such API key.");
    let id = crate::ledger::KeyId(id.parse().map_err(|_| not_found())?);
    let (ledger, auth) = (state.ledger.clone(), state.auth.clone());
    let record = blocking(move || {
        // Someone else's key is "not found", never "forbidden" (no probing of ids).
        match ledger.key(id) {
            Ok(k) if k.account_id == s.principal.account_id => Ok(auth.revoke(id)?),
            Ok(_) | Err(crate::ledger::LedgerError::NoSuchKey(_)) => Err(not_found()),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    Ok(ok(StatusCode::OK, json!({"record": key_json(&record)})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    limit: Option<usize>,
    /// Usage only: rows older than this cursor (the previous page's `next_before`).
    before: Option<i64>,
}

impl Page {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(50).clamp(1, MAX_PAGE)
    }
}

/// `GET /api/v1/usage?limit=50&before=CURSOR`: metered requests, newest first (model, tokens,
/// cost, status, latency, time); `next_before` is the cursor of the next page (null at the end).
pub async fn usage(
    State(state): State<Accounts>,
    s: Session,
    Query(p): Query<Page>,
) -> Result<Response, DashError> {
    let ledger = state.ledger.clone();
    let limit = p.limit();
    let rows =
        blocking(move || Ok(ledger.usage_page(s.principal.account_id, p.before, limit)?)).await?;
    let next = (rows.len() == limit)
        .then(|| rows.last().map(|r| r.0))
        .flatten();
    let rows: Vec<_> = rows
        .iter()
        .map(|(_, at, u)| {
            json!({
                "request_id": u.request_id,
                "model": u.model,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "cost_micros": u.cost_micros,
                "cost_usd": u.cost_micros.usd(),
                "status": u.status.as_str(),
                "latency_ms": u.latency_ms,
                "created_at": at,
            })
        })
        .collect();
    Ok(ok(
        StatusCode::OK,
        json!({"usage": rows, "next_before": next}),
    ))
}

/// Most rows in one CSV export.
const MAX_CSV_ROWS: usize = 100_000;

/// `GET /api/v1/usage.csv`: every metered request of the account (newest first, up to
/// 100,000) as CSV: `created_at,request_id,model,prompt_tokens,completion_tokens,cost_micros,
/// cost_usd,status,latency_ms`. Cost in USD is rendered from the integer micros.
pub async fn usage_csv(State(state): State<Accounts>, s: Session) -> Result<Response, DashError> {
    let ledger = state.ledger.clone();
    let rows =
        blocking(move || Ok(ledger.usage_page(s.principal.account_id, None, MAX_CSV_ROWS)?))
            .await?;
    let mut out = String::from(
        "created_at,request_id,model,prompt_tokens,completion_tokens,cost_micros,cost_usd,status,latency_ms\n",
    );
    for (_, at, u) in &rows {
        // Model ids and request ids are [A-Za-z0-9._-]; no field needs quoting.
        out.push_str(&format!(
            "{at},{},{},{},{},{},{},{},{}\n",
            u.request_id,
            u.model,
            u.prompt_tokens,
            u.completion_tokens,
            u.cost_micros.0,
            u.cost_micros.usd_decimal(),
            u.status.as_str(),
            u.latency_ms
        ));
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"usage.csv\"",
            ),
        ],
        out,
    )
        .into_response())
}

/// `GET /api/v1/entries?limit=50`: the newest ledger entries (grants, top-ups, redemptions,
/// holds, charges, releases).
pub async fn entries(
    State(state): State<Accounts>,
    s: Session,
    Query(p): Query<Page>,
) -> Result<Response, DashError> {
    let ledger = state.ledger.clone();
    let rows = blocking(move || Ok(ledger.entries(s.principal.account_id, p.limit())?)).await?;
    let rows: Vec<_> = rows
        .iter()
        .map(|e| {
            json!({
                "id": e.id, "kind": e.kind, "amount_micros": e.amount_micros,
                "request_id": e.request_id, "note": e.note, "created_at": e.created_at,
            })
        })
        .collect();
    Ok(ok(StatusCode::OK, json!({"entries": rows})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Code {
    code: String,
}

/// `POST /api/v1/redeem {code}`: credit a single-use code, atomically; throttled per account.
pub async fn redeem(
    State(state): State<Accounts>,
    s: Session,
    Body(b): Body<Code>,
) -> Result<Response, DashError> {
    let account = s.principal.account_id;
    state.throttles.check(
        &state.throttles.redeem_account,
        &account.to_string(),
        "redeem",
    )?;
    let code = b.code.trim().to_owned();
    let ledger = state.ledger.clone();
    let (credited, a) = blocking(move || {
        let credited = ledger.redeem(account, &code)?;
        Ok((credited, ledger.account(account)?))
    })
    .await?;
    Ok(ok(
        StatusCode::OK,
        json!({"credited_micros": credited, "credited_usd": credited.usd(), "account": account_json(&a)}),
    ))
}
