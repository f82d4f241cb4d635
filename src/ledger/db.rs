//! The ledger's one SQL seam: a transaction handle ([`Tx`]) over either engine, SQLite
//! (rusqlite through r2d2, the embedded default) or PostgreSQL (tokio-postgres through
//! deadpool-postgres, for several replicas), with one value type for parameters and columns.
//! Every ledger statement is written once, in the SQL both engines accept: `?N` placeholders
//! (rewritten to `$N` for PostgreSQL), `ON CONFLICT` rather than `INSERT OR ...`, `CASE` rather
//! than `IIF`, `RETURNING` rather than `last_insert_rowid()`, and `CAST(SUM(..) AS BIGINT)`
//! (PostgreSQL sums BIGINT into NUMERIC).
//!
//! Owns: the two drivers' types, value conversion, placeholder rewriting, PostgreSQL's
//! background runtime. May use: rusqlite, tokio-postgres, deadpool-postgres. Never: money
//! rules (those are in the ledger's modules).
//!
//! Why tokio-postgres and not the blocking `postgres` crate: the ledger is synchronous and is
//! called from tokio worker threads as well as the blocking pool. The `postgres` crate drives
//! each connection with its own runtime's `block_on`, which panics inside a tokio context. Here
//! the connections are driven by one process-wide background runtime, and a statement's future
//! (which only talks to its connection over channels) is awaited with `futures`' executor on
//! the calling thread, which is allowed anywhere.

use std::borrow::Cow;
use std::sync::OnceLock;

use r2d2_sqlite::rusqlite;

use crate::ids::{AccountId, KeyId};
use crate::money::Micros;

/// A parameter or column value: the four storage classes the ledger uses (it has no REAL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// A type that binds as a statement parameter.
pub trait ToValue {
    /// The value bound for `self`.
    fn to_value(&self) -> Value;
}

/// A type read from a column.
pub trait FromValue: Sized {
    /// `Err` names what was expected when the column holds something else.
    ///
    /// # Errors
    /// A message naming the expected type.
    fn from_value(v: &Value) -> Result<Self, String>;
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
        impl FromValue for $t {
            fn from_value(v: &Value) -> Result<Self, String> {
                match v {
                    Value::Int(i) => <$t>::try_from(*i).map_err(|e| e.to_string()),
                    other => Err(format!("expected an integer, found {other:?}")),
                }
            }
        }
    )*};
}
int_value!(i64, i32, u32, u64, usize, u16, u8);

macro_rules! newtype_value {
    ($($t:ident),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                Value::Int(self.0)
            }
        }
        impl FromValue for $t {
            fn from_value(v: &Value) -> Result<Self, String> {
                i64::from_value(v).map($t)
            }
        }
    )*};
}
newtype_value!(Micros, AccountId, KeyId);

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self, String> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl<const N: usize> ToValue for [u8; N] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

/// Statement parameters: `args![a, b]` binds `a` as `?1` and `b` as `?2` (by reference).
macro_rules! args {
    ($($e:expr),* $(,)?) => {
        &[$($crate::ledger::db::ToValue::to_value(&$e)),*] as &[$crate::ledger::db::Value]
    };
}
pub(crate) use args;

/// Database failures below the ledger's own errors.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// `query_one` found no row.
    #[error("the query returned no row")]
    NoRow,
    /// A column held a value the caller's type cannot take.
    #[error("column {index}: {message}")]
    Column { index: usize, message: String },
    #[error("connection pool: {0}")]
    Pool(String),
    /// The operation exists for one engine only.
    #[error("not supported on this database engine: {0}")]
    Unsupported(&'static str),
}

impl DbError {
    /// PostgreSQL's serialization failure (40001) or deadlock (40P01): the transaction did
    /// nothing and may be run again.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        use tokio_postgres::error::SqlState;
        match self {
            Self::Postgres(e) => matches!(
                e.code(),
                Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
            ),
            _ => false,
        }
    }
}

/// One result row, read into values.
#[derive(Debug)]
pub struct Row {
    values: Vec<Value>,
}

/// A column position (0-based); only `usize`, so `get::<_, T>` reads as in rusqlite.
pub trait ColIndex {
    /// The position.
    fn index(self) -> usize;
}
impl ColIndex for usize {
    fn index(self) -> usize {
        self
    }
}

impl Row {
    /// Column `i` as `T`.
    ///
    /// # Errors
    /// `Column` when the column is missing or holds another type.
    pub fn get<I: ColIndex, T: FromValue>(&self, i: I) -> Result<T, DbError> {
        let index = i.index();
        let v = self.values.get(index).ok_or_else(|| DbError::Column {
            index,
            message: "no such column".into(),
        })?;
        T::from_value(v).map_err(|message| DbError::Column { index, message })
    }
}

/// A connection inside a transaction (or, for SQLite reads, a plain connection).
pub enum Tx<'a> {
    Sqlite(&'a rusqlite::Connection),
    Postgres(&'a deadpool_postgres::Transaction<'a>),
}

impl Tx<'_> {
    /// Whether this is PostgreSQL (for the few statements written per engine).
    #[must_use]
    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// Run a statement that returns no rows; returns how many rows it changed.
    ///
    /// # Errors
    /// Driver errors (constraint violations included).
    pub fn exec(&self, sql: &str, args: &[Value]) -> Result<usize, DbError> {
        match self {
            Self::Sqlite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args.iter()))?),
            Self::Postgres(t) => {
                let params = pg_params(args);
                let n = block(async {
                    let st = t.prepare_cached(&pg_sql(sql)).await?;
                    t.execute(&st, &params).await
                })?;
                Ok(usize::try_from(n).unwrap_or(usize::MAX))
            }
        }
    }

    /// Run several statements with no parameters (migrations).
    ///
    /// # Errors
    /// Driver errors.
    pub fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Self::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Self::Postgres(t) => Ok(block(t.batch_execute(sql))?),
        }
    }

    /// Every row, each mapped by `f`.
    ///
    /// # Errors
    /// Driver errors and `f`'s errors.
    pub fn query_all<T>(
        &self,
        sql: &str,
        args: &[Value],
        mut f: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        match self {
            Self::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let mut rows = st.query(rusqlite::params_from_iter(args.iter()))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    let values = (0..n)
                        .map(|i| sqlite_value(r.get_ref(i)?, i))
                        .collect::<Result<_, DbError>>()?;
                    out.push(f(&Row { values })?);
                }
                Ok(out)
            }
            Self::Postgres(t) => {
                let params = pg_params(args);
                let rows = block(async {
                    let st = t.prepare_cached(&pg_sql(sql)).await?;
                    t.query(&st, &params).await
                })?;
                rows.iter()
                    .map(|r| {
                        let values = (0..r.len())
                            .map(|i| pg_value(r, i))
                            .collect::<Result<_, DbError>>()?;
                        f(&Row { values })
                    })
                    .collect()
            }
        }
    }

    /// The first row mapped by `f`, or `None`.
    ///
    /// # Errors
    /// Driver errors and `f`'s errors.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        args: &[Value],
        f: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Option<T>, DbError> {
        Ok(self.query_all(sql, args, f)?.into_iter().next())
    }

    /// The first row mapped by `f`.
    ///
    /// # Errors
    /// `NoRow` when there is none; driver errors and `f`'s errors.
    pub fn query_one<T>(
        &self,
        sql: &str,
        args: &[Value],
        f: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        self.query_opt(sql, args, f)?.ok_or(DbError::NoRow)
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            Self::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Self::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Self::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Self::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

fn sqlite_value(v: rusqlite::types::ValueRef<'_>, index: usize) -> Result<Value, DbError> {
    use rusqlite::types::ValueRef;
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        ValueRef::Real(r) => {
            return Err(DbError::Column {
                index,
                message: format!("unexpected real {r}"),
            })
        }
    })
}

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

fn pg_params(args: &[Value]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

fn pg_value(row: &tokio_postgres::Row, i: usize) -> Result<Value, DbError> {
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
pub(crate) fn block<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
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
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| DbError::Pool(e.to_string()))?;
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
        let url = url.to_owned();
        let task = pg_runtime().spawn(async move {
            let (client, mut conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
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

    #[test]
    fn values_convert_both_ways_and_name_a_wrong_type() {
        let row = Row {
            values: vec![
                Value::Int(7),
                Value::Null,
                Value::Text("x".into()),
                Value::Blob(vec![1]),
            ],
        };
        assert_eq!(row.get::<_, i64>(0).unwrap(), 7);
        assert_eq!(row.get::<_, Micros>(0).unwrap(), Micros(7));
        assert!(row.get::<_, bool>(0).unwrap());
        assert_eq!(row.get::<_, Option<i64>>(1).unwrap(), None);
        assert_eq!(row.get::<_, String>(2).unwrap(), "x");
        assert_eq!(row.get::<_, Vec<u8>>(3).unwrap(), vec![1]);
        assert!(matches!(
            row.get::<_, i64>(2),
            Err(DbError::Column { index: 2, .. })
        ));
        assert!(matches!(row.get::<_, i64>(9), Err(DbError::Column { .. })));
        assert_eq!(
            args![1i64, "a", None::<i64>, Some(KeyId(3))].to_vec(),
            vec![
                Value::Int(1),
                Value::Text("a".into()),
                Value::Null,
                Value::Int(3)
            ]
        );
    }
}
