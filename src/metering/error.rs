//! `MeterError`: why a paid request was not run or not charged. `api` maps each variant to the
//! interface's status, `type` and `code`; this module knows nothing of HTTP.

use crate::ledger::{KeyLimitBreach, LedgerError};
use crate::money::Micros;

/// Failures of `Meter::admit` and of a request's settlement.
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    /// The balance minus open holds does not cover the hold (micros). Nothing was written.
    #[error("insufficient balance: {required} required, {available} available")]
    InsufficientBalance { required: Micros, available: Micros },
    /// The API key's spend limit refuses the request's hold. Nothing was written.
    #[error("the key's spend limit of {} would be passed", .0.limit)]
    KeySpendLimit(KeyLimitBreach),
    /// The same `Idempotency-Key` and body are running; retry after about this many seconds.
    #[error("a request with this idempotency key is still running")]
    IdempotencyInFlight { retry_after_s: u64 },
    /// The `Idempotency-Key` was used with another body.
    #[error("the idempotency key was used with another body")]
    IdempotencyMismatch,
    /// A streamed request cannot carry an idempotency key (it cannot be replayed).
    #[error("an idempotency key cannot be combined with streaming")]
    StreamWithIdempotency,
    /// The model's queue is full (the hold was released).
    #[error("the model `{0}` is at capacity")]
    Overloaded(String),
    /// The engine refused or failed the request (the hold was released, nothing charged).
    #[error("the engine failed: {0}")]
    EngineFailed(String),
    /// The ledger could not take the hold (storage full or failing); nothing was charged.
    #[error("the ledger could not record the request: {0}")]
    Storage(String),
    /// The generation ran but its charge could not be recorded; the hold is being released in
    /// the background, so the request is not charged.
    #[error("the charge could not be recorded: {0}")]
    NotRecorded(String),
    /// An image of the request could not be decoded (after its header was read and the hold
    /// taken); the hold was released. `label` is the request's name for it.
    #[error("{message}")]
    Image {
        label: Option<String>,
        message: String,
        /// Over a size limit, rather than unreadable.
        too_large: bool,
    },
    /// The server's image decode budget had no room in time (the hold was released).
    #[error("{0}")]
    ImagesBusy(String),
    /// The tenant's share of the engine queue is taken (`scope`: the account or the API key;
    /// `limit` its cap); the hold was released.
    #[error("{scope} has {limit} requests waiting or running, its most")]
    TenantLimit { scope: &'static str, limit: usize },
    /// The server is stopping: the request was refused, or ended in the queue without running
    /// (the hold was released).
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A metering task died (a bug); nothing is charged.
    #[error("metering failed: {0}")]
    Internal(String),
}

impl MeterError {
    /// The engine's refusal of a held request (`encode_images` or `submit` failed): the hold
    /// is void by now. `labels` name the request's images.
    pub(super) fn refused(e: crate::engine::EngineError, model: &str, labels: &[String]) -> Self {
        use crate::engine::EngineError as E;
        match e {
            E::Overloaded => Self::Overloaded(model.to_owned()),
            E::Image {
                index,
                message,
                too_large,
            } => Self::Image {
                label: labels.get(index).cloned(),
                message,
                too_large,
            },
            E::ImagesBusy(m) => Self::ImagesBusy(m),
            E::TenantLimit { scope, limit } => Self::TenantLimit { scope, limit },
            E::ShutDown => Self::ShuttingDown,
            other => Self::EngineFailed(other.to_string()),
        }
    }

    /// Map a failure of the admission transaction.
    pub(super) fn from_admission(e: LedgerError) -> Self {
        match e {
            LedgerError::InsufficientBalance {
                required,
                available,
            } => Self::InsufficientBalance {
                required,
                available,
            },
            LedgerError::KeySpendLimit(b) => Self::KeySpendLimit(b),
            LedgerError::Join(m) => Self::Internal(m),
            other => Self::Storage(other.to_string()),
        }
    }
}
