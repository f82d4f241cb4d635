//! Key management (session only: an API key never reaches these handlers, `Session` refuses
//! it): create, list with what each key spent, rename, spend limit and expiry, revoke.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Deserializer, Serialize};

use super::common::{ok, Body, DashError, Session};
use crate::accounts::{now, AccountsError, KeyState, KeyUpdate, KeyWithSpend};
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::ids::KeyId;
use crate::money::Micros;

/// Longest key name, in characters.
const MAX_NAME_CHARS: usize = 100;
/// Largest spend limit, in micros (1,000,000 USD), far from `i64` overflow in any sum.
const MAX_LIMIT_MICROS: i64 = 1_000_000_000_000;

/// A key as the dashboard shows it (never the key itself).
#[derive(Serialize)]
pub struct KeyView {
    id: KeyId,
    name: String,
    /// Display prefix, e.g. `sk-svc-3fa9`.
    prefix: String,
    /// Unix seconds.
    created_at: i64,
    last_used_at: Option<i64>,
    /// `active`, `revoked` or `expired`.
    state: &'static str,
    /// Unix seconds, or null (never).
    expires_at: Option<i64>,
    /// The key's lifetime spend limit, or null (only the balance limits it).
    spend_limit_micros: Option<Micros>,
    /// Settled charges of requests made with the key.
    spent_micros: Micros,
    /// Holds of the key's requests still running.
    reserved_micros: Micros,
    /// Requests recorded with the key.
    requests: i64,
}

impl KeyView {
    fn of(KeyWithSpend { record: k, spend }: &KeyWithSpend) -> Self {
        let state = match k.state {
            KeyState::Revoked => "revoked",
            KeyState::Active if k.expired_at(now()) => "expired",
            KeyState::Active => "active",
        };
        Self {
            id: k.id,
            name: k.name.clone(),
            prefix: k.prefix.clone(),
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            state,
            expires_at: k.expires_at,
            spend_limit_micros: k.spend_limit_micros,
            spent_micros: spend.spent_micros,
            reserved_micros: spend.reserved_micros,
            requests: spend.requests,
        }
    }
}

/// `GET /api/v1/keys`: the account's keys, newest first, with what each spent.
pub async fn list(State(state): State<Accounts>, s: Session) -> Result<Response, DashError> {
    let keys = state.service.keys(s.principal.account_id).await?;
    let keys: Vec<KeyView> = keys.iter().map(KeyView::of).collect();
    Ok(ok(StatusCode::OK, KeyList { keys }))
}

/// `GET /keys`'s answer.
#[derive(Serialize)]
struct KeyList {
    keys: Vec<KeyView>,
}

/// `POST /keys`'s answer: the full key, shown this once.
#[derive(Serialize)]
struct CreatedKey {
    key: String,
    record: KeyView,
    warning: &'static str,
}

/// The answer of a key change.
#[derive(Serialize)]
struct KeyRecord {
    record: KeyView,
}

/// `Some(v)` for a field that is present (`v` may be null), `None` (via `default`) when
/// absent: tells "clear the limit" from "leave it".
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Body of `POST /keys`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    name: String,
    /// Decimal USD, e.g. `"2.50"`; null or absent = no limit.
    #[serde(default)]
    spend_limit_usd: Option<String>,
    /// Unix seconds in the future; null or absent = never.
    #[serde(default)]
    expires_at: Option<i64>,
}

/// `PATCH` body: absent fields stay as they are; null clears a limit or an expiry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    spend_limit_usd: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    expires_at: Option<Option<i64>>,
}

fn check_name(name: &str) -> Result<String, DashError> {
    let name = name.trim().to_owned();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(DashError::bad_request(
            DashCode::InvalidName,
            format!("Give the key a name of 1 to {MAX_NAME_CHARS} printable characters."),
        )
        .field("name"));
    }
    Ok(name)
}

fn check_limit(usd: Option<&str>) -> Result<Option<Micros>, DashError> {
    usd.map(|s| {
        Micros::parse_usd(s.trim())
            .ok()
            .filter(|m| m.0 >= 0 && m.0 <= MAX_LIMIT_MICROS)
            .ok_or_else(|| {
                DashError::bad_request(
                    DashCode::InvalidSpendLimit,
                    "Give the spend limit in USD, such as 5.00 or 0.25 (at most 6 decimals, 0 to 1,000,000).",
                )
                .field("spend_limit_usd")
            })
    })
    .transpose()
}

fn check_expiry(at: Option<i64>) -> Result<Option<i64>, DashError> {
    match at {
        Some(t) if t <= now() => Err(DashError::bad_request(
            DashCode::InvalidExpiry,
            "The expiry must be in the future; remove it to keep the key without one.",
        )
        .field("expires_at")),
        other => Ok(other),
    }
}

/// `POST /api/v1/keys {name, spend_limit_usd?, expires_at?}` -> 201 with the full key, shown
/// this once.
pub async fn create(
    State(state): State<Accounts>,
    s: Session,
    Body(b): Body<NewKey>,
) -> Result<Response, DashError> {
    let name = check_name(&b.name)?;
    let limit = check_limit(b.spend_limit_usd.as_deref())?;
    let expires = check_expiry(b.expires_at)?;
    // Only what the request sets: a new key has no limit or expiry to clear.
    let settings = KeyUpdate {
        spend_limit_micros: limit.map(Some),
        expires_at: expires.map(Some),
        ..KeyUpdate::default()
    };
    let (key, created) = (state.service)
        .create_key(s.principal.account_id, name, settings)
        .await?;
    let record = KeyView::of(&created);
    Ok(ok(
        StatusCode::CREATED,
        CreatedKey {
            key,
            record,
            warning: "Copy this key now: it is stored only as a hash and cannot be shown again.",
        },
    ))
}

/// The key id in a route's path; one that is not a number is no key of anyone's.
fn key_id(id: &str) -> Result<KeyId, DashError> {
    id.parse()
        .map(KeyId)
        .map_err(|_| AccountsError::NoSuchKey.into())
}

/// `PATCH /api/v1/keys/{id} {name?, spend_limit_usd?, expires_at?}`: rename a key, set or
/// clear its spend limit or expiry. A lower limit applies to the next request; an expiry in
/// the past is refused (revoke instead).
pub async fn update(
    State(state): State<Accounts>,
    s: Session,
    Path(id): Path<String>,
    Body(b): Body<KeyPatch>,
) -> Result<Response, DashError> {
    let update = KeyUpdate {
        name: b.name.as_deref().map(check_name).transpose()?,
        spend_limit_micros: b
            .spend_limit_usd
            .map(|l| check_limit(l.as_deref()))
            .transpose()?,
        expires_at: b.expires_at.map(check_expiry).transpose()?,
    };
    let updated = (state.service)
        .update_key(s.principal.account_id, key_id(&id)?, update)
        .await?;
    let record = KeyView::of(&updated);
    Ok(ok(StatusCode::OK, KeyRecord { record }))
}

/// `DELETE /api/v1/keys/{id}`: revoke one of the account's keys; the next request with it
/// gets 401 (the key cache is purged at once).
pub async fn revoke(
    State(state): State<Accounts>,
    s: Session,
    Path(id): Path<String>,
) -> Result<Response, DashError> {
    let revoked = (state.service)
        .revoke_key(s.principal.account_id, key_id(&id)?)
        .await?;
    let record = KeyView::of(&revoked);
    Ok(ok(StatusCode::OK, KeyRecord { record }))
}
