//! What every handler shares: `AppState` and its parts (built once by `app::assemble`), the request id,
//! the body limit, the dashboard's settings. Plain data: handlers and the shared request
//! modules use this file; it uses none of them.

use std::sync::Arc;

use axum::extract::FromRef;
use rand::Rng;

use super::limits::{KeyLimits, PublicLimits, SessionLimits, Throttles};
use crate::auth::session::SessionPolicy;
use crate::auth::Authenticator;
use crate::catalog::Catalog;
use crate::engine::SharedEngine;

/// Shared state of every handler, in four parts; a handler takes only the part it needs
/// (`State<Models>`, `State<Accounts>`, ...: axum's `FromRef`).
#[derive(Clone, FromRef)]
pub struct AppState {
    pub models: Models,
    pub paid: Paid,
    pub accounts: Accounts,
    pub public: Public,
    /// Connection and request-size limits (`server::HttpLimits`).
    pub http: crate::api::shared::server::HttpLimits,
    /// How many replicas share the rate limits (`limits::Limiter`).
    pub replicas: super::limits::ReplicaShare,
}

/// The models on sale: what runs them and what they cost.
#[derive(Clone)]
pub struct Models {
    /// Inference backend (`CandleEngine`, or `FakeEngine` in tests).
    pub engine: SharedEngine,
    /// The catalogue: model records and list prices (`/v1/models` is the price list).
    pub catalog: Arc<Catalog>,
    /// Where catalogue weight paths point (for `available` in the model list).
    pub weights_dir: Arc<std::path::PathBuf>,
    /// Measured per-language token costs by model id (`data/language-multipliers.json`).
    pub languages: Arc<std::collections::BTreeMap<String, crate::engine::ModelLanguages>>,
    /// Speech models (transcription and synthesis): `audio::Speech` on its own low-priority
    /// threads, or `audio::FakeAudio` in tests.
    pub speech: crate::audio::SharedAudio,
    /// Embedding models: loaded on first use, run on their own worker thread.
    pub embedder: crate::engine::Embedder,
    /// Whether remote image URLs are fetched (`--allow-image-urls`).
    pub image_urls: super::image_fetch::ImageUrls,
    /// Places for remote image fetches, server-wide and per payer.
    pub image_fetches: Arc<super::image_fetch::FetchSlots>,
}

/// Paid requests: the metering service and the request limits of keys and sessions.
#[derive(Clone)]
pub struct Paid {
    /// The metering service every paid endpoint admits its requests through.
    pub meter: Arc<crate::metering::Meter>,
    /// Per-key request rate limits.
    pub limits: Arc<KeyLimits>,
    /// Per-account limits of the playground's session path, separate from the keys'.
    pub session_limits: Arc<SessionLimits>,
}

/// Accounts and who may act for them: the accounts service, key authentication, the
/// dashboard's settings and throttles, e-mail, card top-ups and single sign-on.
#[derive(Clone)]
pub struct Accounts {
    /// Sign-up, sessions, keys, usage, top-ups and stored responses (`accounts`).
    pub service: Arc<crate::accounts::AccountService>,
    /// Bearer-key authentication with its 60 s lookup cache.
    pub auth: Arc<Authenticator>,
    /// Dashboard settings (cookies, links, sign-up grant, session lifetimes).
    pub dashboard: Arc<DashboardConfig>,
    /// Dashboard throttles against guessing (sign-in, sign-up, reset, redeem).
    pub throttles: Arc<Throttles>,
    /// Outgoing e-mail (verification and reset links).
    pub mail: Arc<crate::mail::Outbox>,
    /// Stripe Checkout settings, when top-ups by card are configured.
    pub payments: Option<Arc<crate::payments::StripeConfig>>,
    /// The OpenID Connect relying party, when sign-in through a provider is configured.
    pub oidc: Option<Arc<crate::auth::oidc::Oidc>>,
}

/// The public endpoints (no key): their per-address limit and `/mcp`'s settings.
#[derive(Clone)]
pub struct Public {
    /// Per-address limit of the public endpoints and `/mcp`.
    pub public_limits: Arc<PublicLimits>,
    /// `/mcp` settings (allowed Host names, reference tokenizers).
    pub mcp: Arc<crate::mcp::McpSettings>,
    /// Origins allowed to call `/v1` from a browser (`--cors-origins`; `*`: any).
    pub cors_origins: Arc<Vec<String>>,
}

/// The request id (`req_` + 24 alphanumerics) of the current request, set by `request_id_layer`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The model a request named, set by the handler once it has read the body, so the request
/// log line of a rejected request can name it (`request_id_layer`).
#[derive(Debug, Clone, Default)]
pub struct RequestModel(Arc<std::sync::OnceLock<String>>);

impl RequestModel {
    /// Record the request's model (the first call wins).
    pub fn set(&self, model: &str) {
        let _ = self.0.set(model.to_owned());
    }

    /// The model, if the handler got as far as reading it.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// Random alphanumeric id of `len` characters from the thread-local CSPRNG.
pub fn random_id(len: usize) -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Dashboard settings.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// Leave `Secure` off the session cookie (plain-HTTP local use only).
    pub insecure_cookies: bool,
    /// Granted once, when a signed-up account verifies its address (micros).
    pub starter_micros: crate::money::Micros,
    /// Base URL for links in e-mails (e.g. `https://llm.example.com`); default: `http://` + the
    /// request's `Host`.
    pub public_url: Option<String>,
    pub sessions: SessionPolicy,
    /// Sign-in attempts per minute per e-mail address (and 4x that per client IP).
    pub sign_in_per_minute: u32,
    /// Chat requests per minute per account through the playground's session path.
    pub playground_rpm: u32,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            insecure_cookies: false,
            starter_micros: crate::money::Micros(100_000),
            public_url: None,
            sessions: SessionPolicy::default(),
            sign_in_per_minute: 5,
            playground_rpm: 20,
        }
    }
}
