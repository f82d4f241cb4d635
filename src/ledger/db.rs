//! The ledger's one SQL seam: a transaction handle ([`Tx`]) over either engine, SQLite
//! (rusqlite through r2d2, the embedded default) or PostgreSQL (tokio-postgres through
//! deadpool-postgres, for several replicas; see `pg`). Every ledger statement is written once,
//! in the SQL both engines accept: `?N` placeholders (rewritten to `$N` for PostgreSQL),
//! `ON CONFLICT` rather than `INSERT OR ...`, `CASE` rather than `IIF`, `RETURNING` rather than
//! `last_insert_rowid()`, and `CAST(SUM(..) AS BIGINT)` (PostgreSQL sums BIGINT into NUMERIC).
//!
//! Owns: running a statement on either engine. May use: `value`, `pg`, rusqlite. Never: money
//! rules (those are in the ledger's modules).

use r2d2_sqlite::rusqlite;

pub(crate) use super::pg::block;
pub use super::pg::{pg_execute, IdLock, PgPool};
use super::pg::{pg_params, pg_sql, pg_value};
pub(crate) use super::value::args;
pub use super::value::{DbError, Row, Value};

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
                    out.push(f(&Row::new(values))?);
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
                        f(&Row::new(values))
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
