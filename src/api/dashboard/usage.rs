//! The balance page's data: metered requests (filtered by key, model, status and time, paged,
//! or as CSV), spend per day and model for the chart, ledger entries, and redeem codes.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::common::{ok, AccountView, Body, DashError, Session, Q};
use crate::accounts::{EntryRow, KeyFilter, UsageFilter, UsageLine, UsagePage};
use crate::api::shared::codes::DashCode;
use crate::api::shared::state::Accounts;
use crate::ids::KeyId;
use crate::money::Micros;

/// Most rows one page of usage or entries returns.
const MAX_PAGE: usize = 500;
/// Most rows in one CSV export.
const MAX_CSV_ROWS: usize = 100_000;
/// Most days the spend chart may ask for.
const MAX_DAYS: i64 = 90;
/// The statuses a usage record can have (`ledger::UsageStatus`).
const STATUSES: [&str; 4] = ["ok", "cancelled", "failed", "undelivered"];

/// Query of `/usage` and `/usage.csv`: page and filters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    limit: Option<usize>,
    /// Rows older than this cursor (the previous page's `next_before`).
    before: Option<i64>,
    /// A key id, or `playground` for requests made from the dashboard.
    key_id: Option<String>,
    model: Option<String>,
    status: Option<String>,
    /// Unix seconds, inclusive.
    since: Option<i64>,
    /// Unix seconds, exclusive.
    until: Option<i64>,
}

impl UsageQuery {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(50).clamp(1, MAX_PAGE)
    }

    fn filter(&self) -> Result<UsageFilter, DashError> {
        let key = match self.key_id.as_deref().filter(|k| !k.is_empty()) {
            None => None,
            Some("playground") => Some(KeyFilter::Playground),
            Some(k) => Some(KeyFilter::Key(KeyId(k.parse().map_err(|_| {
                DashError::bad_request(
                    DashCode::InvalidFilter,
                    "key_id is a key's id or `playground`.",
                )
                .field("key_id")
            })?))),
        };
        let status = self.status.clone().filter(|s| !s.is_empty());
        if status.as_deref().is_some_and(|s| !STATUSES.contains(&s)) {
            return Err(DashError::bad_request(
                DashCode::InvalidFilter,
                format!("status is one of {}.", STATUSES.join(", ")),
            )
            .field("status"));
        }
        Ok(UsageFilter {
            key,
            model: self.model.clone().filter(|m| !m.is_empty()),
            status,
            since: self.since,
            until: self.until,
        })
    }
}

/// One metered request as the activity table shows it.
#[derive(Serialize)]
pub struct UsageRow {
    request_id: String,
    model: String,
    /// The API key that made it, or null for the dashboard playground.
    key_id: Option<KeyId>,
    key_name: Option<String>,
    prompt_tokens: i64,
    cached_tokens: i64,
    completion_tokens: i64,
    cost_micros: Micros,
    /// Rendering of `cost_micros` only.
    cost_usd: f64,
    status: &'static str,
    latency_ms: i64,
    /// Unix seconds.
    created_at: i64,
}

fn row(line: UsageLine) -> UsageRow {
    let u = &line.record;
    UsageRow {
        request_id: u.request_id.clone(),
        model: u.model.clone(),
        key_id: u.key_id,
        key_name: line.key_name,
        prompt_tokens: u.prompt_tokens,
        cached_tokens: u.cached_tokens,
        completion_tokens: u.completion_tokens,
        cost_micros: u.cost_micros,
        cost_usd: u.cost_micros.usd(),
        status: u.status.as_str(),
        latency_ms: u.latency_ms,
        created_at: line.created_at,
    }
}

/// `GET /usage`'s answer: a page, and the cursor of the next.
#[derive(Serialize)]
struct UsagePageView {
    usage: Vec<UsageRow>,
    next_before: Option<i64>,
}

/// `GET /usage/daily`'s answer.
#[derive(Serialize)]
struct Days {
    days: Vec<DayView>,
}

/// One ledger entry as the balance page shows it.
#[derive(Serialize)]
struct EntryView<'a> {
    id: i64,
    kind: &'a str,
    amount_micros: Micros,
    request_id: Option<&'a str>,
    note: Option<&'a str>,
    /// Unix seconds.
    created_at: i64,
}

impl<'a> EntryView<'a> {
    fn of(e: &'a EntryRow) -> Self {
        Self {
            id: e.id,
            kind: &e.kind,
            amount_micros: e.amount_micros,
            request_id: e.request_id.as_deref(),
            note: e.note.as_deref(),
            created_at: e.created_at,
        }
    }
}

/// `GET /entries`'s answer.
#[derive(Serialize)]
struct Entries<'a> {
    entries: Vec<EntryView<'a>>,
}

/// `POST /redeem`'s answer.
#[derive(Serialize)]
struct Redeemed<'a> {
    credited_micros: Micros,
    credited_usd: f64,
    account: AccountView<'a>,
}

/// The rows of `page` and its next cursor.
fn rows(page: UsagePage) -> (Vec<UsageRow>, Option<i64>) {
    (page.lines.into_iter().map(row).collect(), page.next_before)
}

/// `GET /api/v1/usage?limit=50&before=CURSOR&key_id=&model=&status=&since=&until=`: metered
/// requests matching every filter given, newest first; `next_before` is the cursor of the
/// next page (null at the end).
pub async fn usage(
    State(state): State<Accounts>,
    s: Session,
    Q(q): Q<UsageQuery>,
) -> Result<Response, DashError> {
    let (filter, limit, before) = (q.filter()?, q.limit(), q.before);
    let page = (state.service)
        .usage(s.principal.account_id, filter, before, limit)
        .await?;
    let (rows, next) = rows(page);
    Ok(ok(
        StatusCode::OK,
        UsagePageView {
            usage: rows,
            next_before: next,
        },
    ))
}

/// A key name (the one free-text field) as a CSV field: a name a spreadsheet would run as a
/// formula (starting with `=`, `+`, `-`, `@`, tab or CR) gets a leading `'` (OWASP "CSV
/// injection"), then RFC 4180 quoting where needed.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// `GET /api/v1/usage.csv` (filters as `/usage`): matching requests, newest first, up to
/// 100,000, as CSV: `created_at,created_at_iso,request_id,key_id,key_name,model,
/// prompt_tokens,completion_tokens,cost_micros,cost_usd,status,latency_ms`. `created_at` is
/// Unix seconds and `created_at_iso` the same instant in RFC 3339 (UTC); the cost in USD is
/// rendered from the integer micros.
pub async fn usage_csv(
    State(state): State<Accounts>,
    s: Session,
    Q(q): Q<UsageQuery>,
) -> Result<Response, DashError> {
    let filter = q.filter()?;
    let page = (state.service)
        .usage(s.principal.account_id, filter, None, MAX_CSV_ROWS)
        .await?;
    let (rows, _) = rows(page);
    let mut out = String::from(
        "created_at,created_at_iso,request_id,key_id,key_name,model,prompt_tokens,completion_tokens,cost_micros,cost_usd,status,latency_ms\n",
    );
    for r in &rows {
        let iso = chrono::DateTime::from_timestamp(r.created_at, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        // Model ids and request ids are [A-Za-z0-9._-]; only the key name may need quoting.
        out.push_str(&format!(
            "{},{iso},{},{},{},{},{},{},{},{},{},{}\n",
            r.created_at,
            r.request_id,
            r.key_id.map(|k| k.to_string()).unwrap_or_default(),
            csv_field(r.key_name.as_deref().unwrap_or("")),
            r.model,
            r.prompt_tokens,
            r.completion_tokens,
            r.cost_micros.0,
            r.cost_micros.usd_decimal(),
            r.status,
            r.latency_ms
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

/// Query of `/usage/daily`: how many days (1 to 90, default 14).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaysQuery {
    days: Option<i64>,
}

/// One UTC day of the spend chart.
#[derive(Serialize)]
pub struct DayView {
    /// `YYYY-MM-DD`, UTC.
    day: String,
    total_micros: Micros,
    /// Micros per model id (models without spend that day are absent).
    models: std::collections::BTreeMap<String, Micros>,
}

/// `GET /api/v1/usage/daily?days=14` (1 to 90): settled spend per UTC day, split by model,
/// oldest first, every day present.
pub async fn daily(
    State(state): State<Accounts>,
    s: Session,
    Q(q): Q<DaysQuery>,
) -> Result<Response, DashError> {
    let days = q.days.unwrap_or(14).clamp(1, MAX_DAYS);
    let spend = state
        .service
        .daily_spend(s.principal.account_id, days)
        .await?;
    let out: Vec<DayView> = spend
        .into_iter()
        .map(|d| DayView {
            day: chrono::DateTime::from_timestamp(d.day * 86_400, 0)
                .map(|t| t.date_naive().to_string())
                .unwrap_or_default(),
            total_micros: d.total_micros,
            models: d.by_model,
        })
        .collect();
    Ok(ok(StatusCode::OK, Days { days: out }))
}

/// Query of `/entries`: how many rows (1 to 500, default 50).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntriesQuery {
    limit: Option<usize>,
}

/// `GET /api/v1/entries?limit=50`: the newest ledger entries (grants, top-ups, redemptions,
/// holds, charges, releases).
pub async fn entries(
    State(state): State<Accounts>,
    s: Session,
    Q(p): Q<EntriesQuery>,
) -> Result<Response, DashError> {
    let limit = p.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let rows = state.service.entries(s.principal.account_id, limit).await?;
    let entries = rows.iter().map(EntryView::of).collect();
    Ok(ok(StatusCode::OK, Entries { entries }))
}

/// Body of `/redeem`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Code {
    code: String,
}

/// `POST /api/v1/redeem {code}`: credit a single-use code (any case, surrounding spaces
/// ignored), atomically; throttled per account.
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
    let (credited, a) = state.service.redeem(account, b.code).await?;
    Ok(ok(
        StatusCode::OK,
        Redeemed {
            credited_micros: credited,
            credited_usd: credited.usd(),
            account: AccountView::of(&a),
        },
    ))
}
