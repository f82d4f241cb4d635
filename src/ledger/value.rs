//! The ledger's values: what a statement binds and what a column holds, the same for both
//! engines ([`Value`], [`ToValue`], [`FromValue`], the `args!` macro, [`Row`]), and the
//! database failures below the ledger's own errors ([`DbError`]).
//!
//! Owns: value conversion. May use: the drivers' error types, `ids`, `money`. Never: SQL.

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
        &[$($crate::ledger::value::ToValue::to_value(&$e)),*] as &[$crate::ledger::value::Value]
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
    /// A row of `values`, in column order.
    #[must_use]
    pub fn new(values: Vec<Value>) -> Self {
        Self { values }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
