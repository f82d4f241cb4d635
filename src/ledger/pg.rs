//! PostgreSQL plumbing for the ledger's SQL seam (`db`): binding [`Value`]s and reading
//! columns, `?N` to `$N`, the connection pool, and the background runtime that drives the
//! connections.
//!
//! Why tokio-postgres and not the blocking `postgres` crate: the ledger is synchronous, and the
//! server calls it from tokio's blocking pool (`Ledger::run`, the accounts service) while tests
//! and start-up call it from plain threads and test runtimes. The `postgres` crate drives each
//! connection with its own runtime's `block_on`, which panics inside a tokio context. Here the
//! connections are driven by one process-wide background runtime, and a statement's future
//! (which only talks to its connection over channels) is awaited with `futures`' executor on
//! the calling thread. Should a call ever come from an async worker of a multi-threaded
//! runtime, `block` first hands that worker's other tasks to another thread
//! (`block_in_place`), so a round trip never stalls the requests queued behind it.
//!
//! Owns: tokio-postgres and deadpool-postgres. May use: `value`. Never: money rules.

use std::borrow::Cow;
use std::sync::OnceLock;

use super::value::{DbError, Value};

impl tokio_postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use tokio_postgres::types::{IsNull, Type};
        match self {
            Self::Null => Ok(IsNull::Yes),
            Self::Int(i) => match *ty {
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Self::Text(s) => s.as_str().to_sql(ty, out),
            Self::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

pub(super) fn pg_params(args: &[Value]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

pub(super) fn pg_value(row: &tokio_postgres::Row, i: usize) -> Result<Value, DbError> {
    use tokio_postgres::types::Type;
    let ty = row.columns()[i].type_().clone();
    let int = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
    Ok(match ty {
        Type::INT8 => int(row.try_get::<_, Option<i64>>(i)?),
        Type::INT4 => int(row.try_get::<_, Option<i32>>(i)?.map(i64::from)),
        Type::INT2 => int(row.try_get::<_, Option<i16>>(i)?.map(i64::from)),
        Type::BOOL => int(row.try_get::<_, Option<bool>>(i)?.map(i64::from)),
        Type::BYTEA => row
            .try_get::<_, Option<Vec<u8>>>(i)?
            .map_or(Value::Null, Value::Blob),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
            .try_get::<_, Option<String>>(i)?
            .map_or(Value::Null, Value::Text),
        other => {
            return Err(DbError::Column {
                index: i,
                message: format!("unsupported PostgreSQL type {other} (cast sums to BIGINT)"),
            })
        }
    })
}

/// Rewrite `?N` placeholders to PostgreSQL's `$N` (a bare `?` takes the next number), leaving
/// quoted strings and identifiers alone.
#[must_use]
pub fn pg_sql(sql: &str) -> Cow<'_, str> {
    if !sql.contains('?') {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    let mut next = 1u32;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), c) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '?') => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                out.push('$');
                if digits.is_empty() {
                    out.push_str(&next.to_string());
                    next += 1;
                } else {
                    out.push_str(&digits);
                }
            }
            (None, c) => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The process-wide runtime that drives PostgreSQL connections (never dropped, so a ledger
/// dropped inside an async task cannot drop a runtime there).
fn pg_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-pg")
            .enable_all()
            .build()
            .expect("the PostgreSQL background runtime starts")
    })
}

/// Wait for a statement's future on this thread (it only waits on its connection's channels).
/// On an async worker of a multi-threaded runtime the worker's queue moves to another thread
/// first; on the blocking pool, a plain thread or a current-thread runtime it just waits.
pub(crate) fn block<F: std::future::Future>(f: F) -> F::Output {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| futures::executor::block_on(f))
        }
        _ => futures::executor::block_on(f),
    }
}

/// How long connecting, waiting for a pooled connection, or an unanswered send may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The connection settings of `url`, with timeouts: a dead database or a half-open
/// connection fails within seconds instead of holding requests (and the lease upkeep) forever.
/// The URL may still set its own connect timeout.
fn config(url: &str) -> Result<tokio_postgres::Config, DbError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| DbError::Pool(e.to_string()))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(TIMEOUT);
    }
    config
        .keepalives_idle(std::time::Duration::from_secs(10))
        .tcp_user_timeout(TIMEOUT);
    Ok(config)
}

/// A PostgreSQL connection pool whose connections run on the background runtime.
#[derive(Clone)]
pub struct PgPool {
    pool: deadpool_postgres::Pool,
}

impl PgPool {
    /// A pool of at most `max` connections to `url` (`postgres://user@host:port/db`).
    ///
    /// # Errors
    /// `Pool` when the URL does not parse or the pool cannot be built.
    pub fn new(url: &str, max: usize) -> Result<Self, DbError> {
        let config = config(url)?;
        let manager = deadpool_postgres::Manager::from_config(
            config,
            tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let _guard = pg_runtime().enter();
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(max)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(TIMEOUT))
            .create_timeout(Some(TIMEOUT))
            .build()
            .map_err(|e| DbError::Pool(e.to_string()))?;
        Ok(Self { pool })
    }

    /// A connection (connecting on the background runtime when the pool has none idle).
    ///
    /// # Errors
    /// `Pool` on connection failure.
    pub fn get(&self) -> Result<deadpool_postgres::Object, DbError> {
        let pool = self.pool.clone();
        let task = pg_runtime().spawn(async move { pool.get().await });
        block(task)
            .map_err(|e| DbError::Pool(e.to_string()))?
            .map_err(|e| DbError::Pool(e.to_string()))
    }

    /// A dedicated connection outside the pool (for `LISTEN`), with its asynchronous messages
    /// (notifications) sent to `on_message`; the connection runs until the client is dropped or
    /// the server goes away, and `on_message` gets `None` when it ends.
    ///
    /// # Errors
    /// `Pool` on connection failure.
    pub fn listener(
        url: &str,
        on_message: impl Fn(Option<tokio_postgres::Notification>) + Send + 'static,
    ) -> Result<tokio_postgres::Client, DbError> {
        let config = config(url)?;
        let task = pg_runtime().spawn(async move {
            let (client, mut conn) = config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(async move {
                let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                while let Some(m) = futures::StreamExt::next(&mut messages).await {
                    match m {
                        Ok(tokio_postgres::AsyncMessage::Notification(n)) => on_message(Some(n)),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                on_message(None);
            });
            Ok::<_, tokio_postgres::Error>(client)
        });
        block(task)
            .map_err(|e| DbError::Pool(e.to_string()))?
            .map_err(DbError::from)
    }
}

/// Where a ledger keeps the dedicated connection holding its replica id's advisory lock
/// (`Ledger::claim_replica_id`), shared by the ledger's clones; the lock goes with the
/// connection when the last clone is dropped.
#[derive(Clone, Default)]
pub struct IdLock(pub(crate) std::sync::Arc<std::sync::Mutex<Option<tokio_postgres::Client>>>);

/// Connect to `url`, run `sql` (one or more statements, no parameters) outside any
/// transaction, and disconnect: for `CREATE DATABASE` and other administration.
///
/// # Errors
/// Connection and statement errors.
pub fn pg_execute(url: &str, sql: &str) -> Result<(), DbError> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    let task = pg_runtime().spawn(async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(conn);
        let result = client.batch_execute(&sql).await;
        drop(client);
        let _ = driver.await;
        result
    });
    block(task)
        .map_err(|e| DbError::Pool(e.to_string()))?
        .map_err(DbError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres_outside_quotes() {
        assert_eq!(
            pg_sql("SELECT a FROM t WHERE b = ?1 AND c = ?12 AND d = '?x'"),
            "SELECT a FROM t WHERE b = $1 AND c = $12 AND d = '?x'"
        );
        assert_eq!(pg_sql("VALUES (?, ?)"), "VALUES ($1, $2)");
        assert!(matches!(pg_sql("SELECT 1"), Cow::Borrowed(_)));
    }
}
