//! Reading an account's usage records: filtered pages (by key, model, status, time) for the
//! dashboard's activity view and CSV export, and spend per UTC day and model for its chart.
//! Writes happen elsewhere (`accounts::insert_usage`, inside the settlement transaction).

use std::collections::BTreeMap;

use super::db::{args, Value};

use super::accounts::{row_to_usage, UsageRecord, USAGE_COLUMNS};
use super::{AccountId, KeyId, Ledger, LedgerError, Micros};

/// Which key's requests to select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFilter {
    /// Requests made with this API key.
    Key(KeyId),
    /// Requests made from the dashboard playground (no key).
    Playground,
}

/// Filters on usage records; every field set must match (AND). Times are Unix seconds,
/// `since` inclusive, `until` exclusive.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    /// Requests of one key, or of the playground.
    pub key: Option<KeyFilter>,
    /// Catalogue id of the model.
    pub model: Option<String>,
    /// A `UsageStatus` name: `ok`, `cancelled`, `failed`, `undelivered`.
    pub status: Option<String>,
    /// Unix seconds, inclusive.
    pub since: Option<i64>,
    /// Unix seconds, exclusive.
    pub until: Option<i64>,
}

impl UsageFilter {
    /// The filter's SQL conditions (after `account_id = ?1`) and their parameters.
    fn sql(&self) -> (String, Vec<Value>) {
        let mut sql = String::new();
        let mut args = Vec::new();
        let mut add = |cond: &str, v: Option<Value>| {
            sql.push_str(" AND ");
            sql.push_str(cond);
            if let Some(v) = v {
                args.push(v);
            }
        };
        match self.key {
            Some(KeyFilter::Key(k)) => add("key_id = ?", Some(Value::Int(k.0))),
            Some(KeyFilter::Playground) => add("key_id IS NULL", None),
            None => {}
        }
        if let Some(m) = &self.model {
            add("model = ?", Some(Value::Text(m.clone())));
        }
        if let Some(s) = &self.status {
            add("status = ?", Some(Value::Text(s.clone())));
        }
        if let Some(t) = self.since {
            add("created_at >= ?", Some(Value::Int(t)));
        }
        if let Some(t) = self.until {
            add("created_at < ?", Some(Value::Int(t)));
        }
        (sql, args)
    }
}

/// Spend of one UTC day: the total and its split by model (micros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaySpend {
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// Settled charges of the day.
    pub total_micros: Micros,
    /// The same, per model id (models without spend are absent).
    pub by_model: BTreeMap<String, Micros>,
}

const DAY_SECS: i64 = 86_400;

impl Ledger {
    /// One page of an account's usage matching `filter`, newest first: rows older than the
    /// cursor `before` (a row's `seq`; `None` = from the newest), at most `limit`. Each row is
    /// `(seq, created_at Unix seconds, record)`; pass the last `seq` as the next `before`.
    ///
    /// # Errors
    /// Database errors.
    pub fn usage_page(
        &self,
        account: AccountId,
        filter: &UsageFilter,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<(i64, i64, UsageRecord)>, LedgerError> {
        let (conds, extra) = filter.sql();
        let mut args = vec![
            Value::Int(account.0),
            Value::Int(before.unwrap_or(i64::MAX)),
        ];
        args.extend(extra);
        args.push(Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        self.read(|c| {
            let rows = c.query_all(
                &format!(
                    "SELECT rowid, created_at, {USAGE_COLUMNS}
                 FROM usage WHERE account_id = ? AND rowid < ?{conds} ORDER BY rowid DESC LIMIT ?"
                ),
                &args,
                |r| Ok((r.get(0)?, r.get(1)?, row_to_usage(r, 2)?)),
            )?;
            Ok(rows)
        })
    }

    /// Spend per UTC day and model over the `days` days ending with the day of `now` (Unix
    /// seconds), oldest first; every day is present, days without spend with zero.
    ///
    /// # Errors
    /// Database errors.
    pub fn daily_spend(
        &self,
        account: AccountId,
        now: i64,
        days: i64,
    ) -> Result<Vec<DaySpend>, LedgerError> {
        let last = now.div_euclid(DAY_SECS);
        let first = last - days.max(1) + 1;
        let mut out: Vec<DaySpend> = (first..=last)
            .map(|day| DaySpend {
                day,
                total_micros: Micros::ZERO,
                by_model: BTreeMap::new(),
            })
            .collect();
        let rows: Vec<(i64, String, Micros)> = self.read(|c| {
            let rows = c.query_all(
                "SELECT created_at / 86400, model, CAST(SUM(cost_micros) AS BIGINT) FROM usage
                 WHERE account_id = ?1 AND created_at >= ?2 AND created_at < ?3 AND cost_micros > 0
                 GROUP BY 1, 2",
                args![account.0, first * DAY_SECS, (last + 1) * DAY_SECS],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            Ok(rows)
        })?;
        for (day, model, micros) in rows {
            if let Some(d) = usize::try_from(day - first)
                .ok()
                .and_then(|i| out.get_mut(i))
            {
                d.total_micros += micros;
                d.by_model.insert(model, micros);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{temp_ledger, test_usage};

    #[test]
    fn pages_filter_by_key_model_and_status_and_days_split_by_model() {
        let (_d, l) = temp_ledger();
        let a = l
            .create_account("u@example.com", Micros(1_000_000))
            .unwrap();
        let k = l.insert_key(a.id, "k", b"h1", "sk-svc-aaaa").unwrap();
        for (i, key) in [(0, Some(k.id)), (1, None), (2, Some(k.id))] {
            let id = format!("r{i}");
            l.reserve(&id, a.id, Micros(100)).unwrap();
            let mut u = test_usage(&id, a.id, 10 + i);
            u.key_id = key;
            u.model = if i == 2 { "other".into() } else { u.model };
            l.settle(&u).unwrap();
        }
        let all = l
            .usage_page(a.id, &UsageFilter::default(), None, 10)
            .unwrap();
        assert_eq!(all.len(), 3);
        let by_key = UsageFilter {
            key: Some(KeyFilter::Key(k.id)),
            ..UsageFilter::default()
        };
        let rows = l.usage_page(a.id, &by_key, None, 10).unwrap();
        assert_eq!(
            rows.iter()
                .map(|r| r.2.request_id.as_str())
                .collect::<Vec<_>>(),
            ["r2", "r0"]
        );
        let playground = UsageFilter {
            key: Some(KeyFilter::Playground),
            status: Some("ok".into()),
            ..UsageFilter::default()
        };
        assert_eq!(
            l.usage_page(a.id, &playground, None, 10).unwrap()[0]
                .2
                .request_id,
            "r1"
        );
        let page = l.usage_page(a.id, &by_key, None, 1).unwrap();
        let next = l.usage_page(a.id, &by_key, Some(page[0].0), 1).unwrap();
        assert_eq!(next[0].2.request_id, "r0");
        let days = l.daily_spend(a.id, crate::ledger::now(), 14).unwrap();
        assert_eq!(days.len(), 14);
        let today = days.last().unwrap();
        assert_eq!(today.total_micros, Micros(10 + 11 + 12));
        assert_eq!(today.by_model.get("other"), Some(&Micros(12)));
        assert!(days[..13].iter().all(|d| d.total_micros == Micros::ZERO));
        assert!(l.check().unwrap().is_empty());
    }
}
