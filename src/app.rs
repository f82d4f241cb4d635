//! Composition root: the only place that builds concrete engines and the router, binds and serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::api::shared::limits::{Limiter, PublicLimits, Throttles};
use crate::api::{self, AppState};
use crate::auth::Authenticator;
use crate::catalog::Catalog;
use crate::engine::{CandleEngine, EngineConfig, FakeEngine, SharedEngine};
use crate::ledger::Ledger;

/// Which engine to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// Real inference with candle.
    Candle,
    /// The deterministic FAKE engine (no model; for HTTP tests and demos).
    Fake,
}

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    pub catalog: PathBuf,
    pub weights: PathBuf,
    /// Model ids to load; empty = every catalogue model whose weights are present.
    pub load: Vec<String>,
    pub device: String,
    pub engine: EngineKind,
    pub queue_depth: usize,
    /// Jobs one account may have queued (0: a quarter of the queue).
    pub queued_per_account: usize,
    /// Sequences one key may have queued and running (0: twice the batch).
    pub sequences_per_key: usize,
    /// Target step time while another tenant decodes, ms (0: off).
    pub interleave_ms: u64,
    /// One request's image decode bytes and the server's decode budget.
    pub images: crate::engine::ImageConfig,
    pub max_batch: usize,
    pub step_tokens: usize,
    /// Most decode and draft tokens per step for speculative decoding (0: off).
    pub speculative_tokens: usize,
    /// Load the catalogue's draft models beside their targets.
    pub draft_models: bool,
    /// How each model's KV cache stores keys and values.
    pub kv_cache: crate::engine::KvTypes,
    /// The ledger database file.
    pub db: PathBuf,
    /// Requests per minute per API key.
    pub rate_limit_rpm: u32,
    /// Bytes of model weights resident at once (0: no limit).
    pub memory_budget: u64,
    /// Bytes of KV cache the running sequences may reserve (0: no limit).
    pub kv_cache_budget: u64,
    /// Bytes of KV blocks each model's prefix cache keeps (0: off).
    pub prefix_cache_budget: u64,
    /// Dashboard cookies, links and sign-up grant.
    pub dashboard: api::DashboardConfig,
    /// SMTP relay URL and sender for e-mails (`None`: e-mails go to the log).
    pub smtp: Option<(String, String)>,
    /// Stripe Checkout for top-ups (`None`: codes and the CLI only).
    pub payments: Option<crate::payments::StripeConfig>,
    /// Sign-in through an OpenID Connect provider (`None`: passwords only).
    pub oidc: Option<crate::auth::oidc::OidcConfig>,
    /// Requests per minute per client address to the public endpoints and `/mcp`.
    pub public_rpm: u32,
    /// `/mcp` settings.
    pub mcp: crate::mcp::McpSettings,
    /// Origins allowed to call `/v1` from a browser (`*`: any).
    pub cors_origins: Vec<String>,
    /// Files the server reads besides weights: `language-multipliers.json` (measured language
    /// costs) and `tokenizers/` (reference tokenizers), unless flags name them elsewhere.
    pub data_dir: PathBuf,
    /// Connection and request-size limits.
    pub http: api::shared::server::HttpLimits,
    /// Whether remote image URLs are fetched.
    pub image_urls: api::shared::image_fetch::ImageUrls,
}

/// Start the engine for `cfg` and return the application state.
///
/// # Errors
/// Catalogue errors, unknown ids in `load`, missing weights (naming the file and the script that
/// fetches it), model load failures.
pub fn build_state(cfg: &ServeConfig) -> anyhow::Result<AppState> {
    let catalog = Catalog::load(&cfg.catalog).map_err(anyhow::Error::msg)?;
    let chosen: Vec<_> = if cfg.load.is_empty() && cfg.engine == EngineKind::Fake {
        catalog.models.iter().collect()
    } else if cfg.load.is_empty() {
        // Default: every catalogue model whose weights file is on this machine.
        let present: Vec<_> = catalog
            .models
            .iter()
            .filter(|m| m.local_path(&cfg.weights).is_some_and(|p| p.exists()))
            .collect();
        anyhow::ensure!(
            !present.is_empty(),
            "no model weights found under `{}`; fetch the default ones with `scripts/fetch-weights`",
            cfg.weights.display()
        );
        present
    } else {
        cfg.load
            .iter()
            .map(|id| {
                catalog.get(id).with_context(|| {
                    format!(
                        "`--load {id}`: no such model in `{}`",
                        cfg.catalog.display()
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let engine: SharedEngine = match cfg.engine {
        EngineKind::Fake => Arc::new(FakeEngine::new(
            chosen
                .iter()
                .map(|m| (m.id.clone(), m.context_length))
                .collect(),
            Duration::from_millis(20),
        )),
        EngineKind::Candle => {
            let mut models = Vec::new();
            for m in &chosen {
                let path = m.local_path(&cfg.weights).context("model has no source")?;
                if !path.exists() {
                    let script = m.fetch_script().unwrap_or("scripts/fetch-weights");
                    anyhow::bail!(
                        "weights for `{}` not found: `{}` is missing; fetch them with `{script}`",
                        m.id,
                        path.display()
                    );
                }
                models.push((m.id.clone(), path, m.context_length));
            }
            let device = candle_device(&cfg.device)?;
            Arc::new(CandleEngine::start(EngineConfig {
                models,
                device,
                queue_depth: cfg.queue_depth,
                queued_per_account: cfg.queued_per_account,
                sequences_per_key: cfg.sequences_per_key,
                interleave_ms: cfg.interleave_ms,
                images: cfg.images,
                limits_max_batch: cfg.max_batch,
                limits_step_tokens: cfg.step_tokens,
                speculative_tokens: cfg.speculative_tokens,
                weight_read_rows: crate::engine::WEIGHT_READ_ROWS,
                draft_models: cfg.draft_models,
                kv_cache: cfg.kv_cache.clone(),
                on_demand: Some((Arc::new(catalog.clone()), cfg.weights.clone())),
                memory_budget: cfg.memory_budget,
                kv_cache_budget: cfg.kv_cache_budget,
                prefix_cache_budget: cfg.prefix_cache_budget,
            })?)
        }
    };
    let ledger = Arc::new(open_ledger(&cfg.db)?);
    let p = cfg.dashboard.sessions;
    let purged = ledger.purge_expired_sign_in(p.idle_secs, p.absolute_secs)?;
    if purged > 0 {
        tracing::info!(rows = purged, "purged expired sessions and e-mail tokens");
    }
    let oidc = match &cfg.oidc {
        Some(o) => Some(Arc::new(
            crate::auth::oidc::Oidc::new(o.clone()).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let mail = match &cfg.smtp {
        Some((url, from)) => crate::mail::Outbox::smtp(url, from).map_err(anyhow::Error::msg)?,
        None => crate::mail::Outbox::default(),
    };
    let settings = ApiSettings {
        rate_limit_rpm: cfg.rate_limit_rpm,
        public_rpm: cfg.public_rpm,
        dashboard: cfg.dashboard.clone(),
        weights_dir: cfg.weights.clone(),
        mcp: cfg.mcp.clone(),
        cors_origins: cfg.cors_origins.clone(),
        payments: cfg.payments.clone(),
        oidc,
        mail,
        http: cfg.http,
        data_dir: cfg.data_dir.clone(),
        image_urls: cfg.image_urls,
    };
    Ok(assemble(engine, catalog, ledger, settings))
}

/// The environment variable naming this replica (default: a random id per start). Give each
/// replica sharing a PostgreSQL ledger a stable id, so that a restart releases the holds its
/// previous run left open at once rather than after their lease.
pub const REPLICA_ID_ENV: &str = "TOLLGATE_REPLICA_ID";

/// `db` for messages: a PostgreSQL URL loses its password.
fn redact_url(db: &Path) -> String {
    let s = db.display().to_string();
    match (s.find("://"), s.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &s[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &s[..scheme + 3], &s[at..])
        }
        _ => s,
    }
}

/// Open the ledger and clean up after a process that died: release its open holds (nothing is
/// charged: those clients got no complete response) and forget its running idempotency claims.
/// Runs before the server listens.
///
/// # Errors
/// Database errors, with the path.
pub fn open_ledger(path: &Path) -> anyhow::Result<Ledger> {
    let ledger = Ledger::open(path)
        .map_err(|e| anyhow::anyhow!("failed to open the ledger `{}`: {e}", redact_url(path)))?
        .with_replica(&std::env::var(REPLICA_ID_ENV).unwrap_or_default());
    let (released, cleared) = crate::metering::Meter::recover(&ledger)?;
    if released + cleared > 0 {
        tracing::warn!(
            released_holds = released,
            cleared_idempotency_claims = cleared,
            "recovered from an unclean shutdown"
        );
    }
    Ok(ledger)
}

/// The HTTP surface's settings besides its engine, catalogue and ledger. `Default` is what the
/// tests run with: 10,000 requests per minute per key, the default dashboard, no payments, no
/// OpenID Connect, e-mails to the log.
pub struct ApiSettings {
    /// Requests per minute per API key.
    pub rate_limit_rpm: u32,
    /// Requests per minute per client address to the public endpoints and `/mcp`.
    pub public_rpm: u32,
    /// Dashboard cookies, links, sign-up grant, session lifetimes, playground limit.
    pub dashboard: api::DashboardConfig,
    /// Where catalogue weight paths point.
    pub weights_dir: PathBuf,
    /// `/mcp` settings.
    pub mcp: crate::mcp::McpSettings,
    /// Origins allowed to call `/v1` from a browser (`*`: any).
    pub cors_origins: Vec<String>,
    /// Stripe Checkout for top-ups (`None`: codes and the CLI only).
    pub payments: Option<crate::payments::StripeConfig>,
    /// The OpenID Connect relying party (`None`: passwords only).
    pub oidc: Option<Arc<crate::auth::oidc::Oidc>>,
    /// Outgoing e-mail.
    pub mail: crate::mail::Outbox,
    /// Where `language-multipliers.json` is read from (`--data-dir`).
    pub data_dir: PathBuf,
    /// Connection and request-size limits.
    pub http: api::shared::server::HttpLimits,
    /// Whether remote image URLs are fetched.
    pub image_urls: api::shared::image_fetch::ImageUrls,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            rate_limit_rpm: 10_000,
            public_rpm: DEFAULT_PUBLIC_RPM,
            dashboard: api::DashboardConfig::default(),
            weights_dir: PathBuf::from("weights"),
            mcp: crate::mcp::McpSettings::default(),
            cors_origins: vec!["*".into()],
            payments: None,
            oidc: None,
            mail: crate::mail::Outbox::default(),
            http: api::shared::server::HttpLimits::default(),
            image_urls: api::shared::image_fetch::ImageUrls::default(),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
        }
    }
}

/// The one constructor of `AppState`, for the server and the tests alike.
pub fn assemble(
    engine: SharedEngine,
    catalog: Catalog,
    ledger: Arc<Ledger>,
    s: ApiSettings,
) -> AppState {
    use crate::api::shared::state::{Accounts, Models, Paid, Public};
    // Ask whether the hub is reachable now, so no request waits for the first answer.
    crate::engine::warm_hub();
    let pacer = text_generation_pacer(&engine);
    let replicas = crate::api::shared::limits::one_replica();
    let auth = Arc::new(Authenticator::new(ledger.clone()));
    AppState {
        paid: Paid {
            meter: Arc::new(crate::metering::Meter::new(ledger.clone(), engine.clone())),
            limits: Arc::new(Limiter::new(s.rate_limit_rpm).with_replicas(replicas.clone())),
            session_limits: Arc::new(
                Limiter::new(s.dashboard.playground_rpm).with_replicas(replicas.clone()),
            ),
        },
        models: Models {
            engine,
            catalog: Arc::new(catalog),
            weights_dir: Arc::new(s.weights_dir),
            languages: Arc::new(load_languages(&s.data_dir.join(LANGUAGES_FILE))),
            speech: Arc::new(
                crate::audio::Speech::new(
                    std::thread::available_parallelism().map_or(1, usize::from),
                )
                .with_pacer(pacer),
            ),
            embedder: crate::engine::Embedder::new(),
            image_urls: s.image_urls,
            image_fetches: api::shared::image_fetch::FetchSlots::new(
                api::shared::image_fetch::FETCHES_IN_FLIGHT,
                api::shared::image_fetch::FETCHES_PER_PAYER,
            ),
        },
        accounts: Accounts {
            service: Arc::new(crate::accounts::AccountService::new(ledger, auth.clone())),
            auth,
            mail: Arc::new(s.mail),
            throttles: Arc::new(Throttles::new(s.dashboard.sign_in_per_minute)),
            dashboard: Arc::new(s.dashboard),
            payments: s.payments.map(Arc::new),
            oidc: s.oidc,
        },
        public: Public {
            public_limits: Arc::new(
                PublicLimits::new(s.public_rpm).with_replicas(replicas.clone()),
            ),
            mcp: Arc::new(s.mcp),
            cors_origins: Arc::new(s.cors_origins),
        },
        http: s.http,
        replicas,
    }
}

/// `assemble` with the default settings but `rate_limit_rpm` per key (tests and benches).
pub fn state_with(
    engine: SharedEngine,
    catalog: Catalog,
    ledger: Arc<Ledger>,
    rate_limit_rpm: u32,
) -> AppState {
    assemble(
        engine,
        catalog,
        ledger,
        ApiSettings {
            rate_limit_rpm,
            ..ApiSettings::default()
        },
    )
}

/// Serve the MCP server over stdin/stdout on the catalogue at `models` (no engine: token counts
/// come from tokenizers read from `weights` or `tokenizers`).
///
/// # Errors
/// Catalogue errors; the MCP session failing.
pub async fn serve_mcp_stdio(
    models: &Path,
    weights: &Path,
    tokenizers: &Path,
    data_dir: &Path,
) -> anyhow::Result<()> {
    let catalog = Arc::new(Catalog::load(models).map_err(anyhow::Error::msg)?);
    let ids: Vec<&str> = catalog.models.iter().map(|m| m.id.as_str()).collect();
    let openapi = api::openapi::document(&ids).to_string();
    let data = crate::mcp::McpData::new(
        catalog.clone(),
        Arc::new(load_languages(&data_dir.join(LANGUAGES_FILE))),
        None,
        Arc::new(weights.to_owned()),
        tokenizers.to_owned(),
        api::shared::request::SUPPORTED_PARAMETERS.as_slice(),
        openapi,
    );
    crate::mcp::serve_stdio(Arc::new(data))
        .await
        .map_err(anyhow::Error::msg)
}

/// Default requests per minute per client address to the public endpoints and `/mcp`.
pub const DEFAULT_PUBLIC_RPM: u32 = 600;

/// The language costs `tollgate measure-languages` writes and the server reads, in the data
/// directory.
pub const LANGUAGES_FILE: &str = "language-multipliers.json";

/// The data directory when neither `--data-dir` nor `--db` says otherwise: the default
/// ledger's directory.
pub const DEFAULT_DATA_DIR: &str = "data";

/// The data directory: `flag` if given, else the directory that holds the ledger `db` (so a
/// server started anywhere with `--db /srv/tollgate/tollgate.db` reads `/srv/tollgate/`); for
/// a PostgreSQL URL, `DEFAULT_DATA_DIR`.
pub fn data_dir(flag: Option<&Path>, db: &Path) -> PathBuf {
    let url = db.to_str().is_some_and(|s| s.contains("://"));
    match (flag, db.parent()) {
        (Some(dir), _) => dir.to_owned(),
        (None, _) if url => PathBuf::from(DEFAULT_DATA_DIR),
        (None, Some(parent)) if !parent.as_os_str().is_empty() => parent.to_owned(),
        (None, _) => PathBuf::from("."),
    }
}

/// The language costs measured for this release's catalogue (`tollgate measure-languages`
/// over `data/udhr`), built into the binary so a server reads them wherever it runs.
pub const BUILT_IN_LANGUAGES: &str = include_str!("../data/language-multipliers.json");

/// Measured language costs: the file at `path` when there is one (written by
/// `measure-languages`, e.g. for a catalogue of one's own), else the built-in measurements.
/// A file that does not parse is ignored with a warning, as if it were missing.
pub fn load_languages(
    path: &Path,
) -> std::collections::BTreeMap<String, crate::engine::ModelLanguages> {
    let parse = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| serde_json::from_value(v["models"].clone()).ok())
    };
    if let Ok(text) = std::fs::read_to_string(path) {
        if let Some(parsed) = parse(&text) {
            tracing::info!(path = %path.display(), "language costs read from the data directory");
            return parsed;
        }
        tracing::warn!(path = %path.display(),
            "language costs file does not parse; the built-in measurements are used");
    }
    parse(BUILT_IN_LANGUAGES).unwrap_or_default()
}

/// Purge the key cache when another process (the CLI) revokes a key; polls once a second.
/// Also trims the dashboard throttles' memory once a minute.
fn spawn_revocation_sync(state: &AppState) {
    let auth = state.accounts.auth.clone();
    let throttles = state.accounts.throttles.clone();
    let public = state.public.public_limits.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            throttles.retain_recent();
            public.retain_recent();
        }
    });
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let a = auth.clone();
            let _ = tokio::task::spawn_blocking(move || a.sync_revocations()).await;
        }
    });
}

/// Replicas sharing a PostgreSQL ledger: every `LEASE_RENEW_S`, renew this replica's hold
/// leases, record it as alive and share the rate limits among the replicas alive; every
/// `LEASE_SWEEP_S`, release the holds of replicas that died; purge the key cache the moment any
/// replica changes a key (`LISTEN`), and purge it all when that feed is lost. Nothing on SQLite.
fn spawn_replica_upkeep(state: &AppState) {
    let ledger = state.accounts.service.ledger().clone();
    if !ledger.is_postgres() {
        return;
    }
    let auth = state.accounts.auth.clone();
    let share = state.replicas.clone();
    let watching = ledger.watch_key_changes(move |_| auth.clear_cache());
    if !watching {
        tracing::warn!("could not start the key-change watch; revocations reach this replica within a second by polling");
    }
    tokio::spawn(async move {
        let renew_every = crate::ledger::LEASE_RENEW_S / crate::ledger::LEASE_SWEEP_S;
        let mut tick = tokio::time::interval(Duration::from_secs(crate::ledger::LEASE_SWEEP_S));
        for round in 0u64.. {
            tick.tick().await;
            let (l, share) = (ledger.clone(), share.clone());
            let renew = round % renew_every.max(1) == 0;
            let done = tokio::task::spawn_blocking(move || lease_round(&l, &share, renew)).await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "hold lease upkeep failed");
            }
        }
    });
}

/// One round of `spawn_replica_upkeep`: when `renew`, renew this replica's leases first (its
/// requests must not lose their holds to a failure elsewhere), then write the heartbeat and
/// share the limits; always release expired leases. A failed step is logged and the next
/// steps still run.
fn lease_round(ledger: &Ledger, share: &crate::api::shared::limits::ReplicaShare, renew: bool) {
    if renew {
        // The id's lock goes with its connection; take it again if that was lost.
        match ledger.keep_replica_id() {
            Ok(true) => {}
            Ok(false) => tracing::error!(replica = ledger.replica(), "another process holds this replica id (TOLLGATE_REPLICA_ID); give each replica its own"),
            Err(e) => tracing::warn!(error = %e, "could not hold this replica id's lock"),
        }
        if let Err(e) = ledger.renew_leases() {
            tracing::warn!(error = %e, "could not renew this replica's hold leases");
        }
        match ledger.heartbeat() {
            Ok(live) => share.store(live.max(1), std::sync::atomic::Ordering::Relaxed),
            Err(e) => tracing::warn!(error = %e, "could not write this replica's heartbeat"),
        }
    }
    match ledger.release_expired_leases() {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            released_holds = n,
            "released the holds of a replica whose lease expired"
        ),
        Err(e) => tracing::warn!(error = %e, "could not release expired hold leases"),
    }
}

/// Audio's pacer: text generation is busy while any model has sequences running or waiting.
fn text_generation_pacer(engine: &SharedEngine) -> crate::audio::pacer::Pacer {
    let engine = engine.clone();
    crate::audio::pacer::Pacer::new(
        move || engine.stats().iter().any(|s| s.running + s.waiting > 0),
        crate::audio::pacer::BUSY_SHARE,
    )
}

/// The compute device named `cpu` or `cuda` (CUDA device 0).
///
/// # Errors
/// Another name, or no CUDA device 0 (no GPU or driver, or a build without the `cuda`
/// feature).
pub fn candle_device(name: &str) -> anyhow::Result<candle_core::Device> {
    match name {
        "cpu" => Ok(candle_core::Device::Cpu),
        "cuda" => candle_core::Device::new_cuda(0).context(if cfg!(feature = "cuda") {
            "failed to open CUDA device 0 (is there an NVIDIA GPU and driver?)"
        } else {
            "failed to open CUDA device 0: this binary was built without CUDA \
             (scripts/build-cuda, or `cargo build --release --features cuda`)"
        }),
        other => anyhow::bail!("unknown device `{other}` (cpu or cuda)"),
    }
}

/// Serve `state` on `listener` until `shutdown` resolves (then finish the requests in
/// flight); the server's and the tests' one way to serve. Starts the background upkeep (key
/// revocations from other processes, limiter memory, the heap trimmer).
///
/// # Errors
/// Serve failures.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    spawn_revocation_sync(&state);
    spawn_replica_upkeep(&state);
    crate::heap::spawn_trimmer();
    let limits = state.http;
    let engine = state.models.engine.clone();
    let stopped_at = Arc::new(std::sync::OnceLock::new());
    let at = stopped_at.clone();
    let stopping = async move {
        shutdown.await;
        let _ = at.set(std::time::Instant::now());
        engine.drain();
    };
    api::shared::server::serve(listener, api::router(state.clone()), limits, stopping).await;
    let since = stopped_at.get().map_or(Duration::ZERO, |t| t.elapsed());
    settle_before_exit(&state, limits.drain_timeout.saturating_sub(since)).await;
    Ok(())
}

/// The end of a clean stop: wait up to `left` for every admitted request to settle; past it,
/// cut off the generations still running (charged for what they produced, as a client that
/// left) and wait for those charges, so the process exits with no hold open.
async fn settle_before_exit(state: &AppState, left: Duration) {
    let meter = &state.paid.meter;
    if meter.wait_settled(left).await {
        tracing::info!("stopped: every request settled");
        return;
    }
    tracing::warn!(
        in_flight = meter.in_flight(),
        "drain time over: cutting off the requests still running"
    );
    state.models.engine.cancel_running();
    if meter.wait_settled(Duration::from_secs(10)).await {
        tracing::info!("stopped: every request settled");
    } else {
        tracing::error!(
            in_flight = meter.in_flight(),
            "stopping with requests unsettled; their holds are released at the next start"
        );
    }
}

/// Bind `addr` and serve `state` until ctrl-c / SIGTERM; logs the bound address.
///
/// # Errors
/// Bind and serve failures.
pub async fn serve_until_signal(state: AppState, addr: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("failed to bind {addr}"))?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    serve(listener, state, shutdown_signal()).await
}

/// Spawn a server for `state` on 127.0.0.1 with a free port (for tests); returns its address.
///
/// # Errors
/// Bind failures.
pub async fn spawn_for_tests(state: AppState) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener, state, std::future::pending()));
    Ok(addr)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!("shutting down");
}

/// Print the catalogue as a table: id, maker, licence flag, prices, weights present.
pub fn print_models(catalog: &Path, weights: &Path) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let c = Catalog::load(catalog).map_err(anyhow::Error::msg)?;
    let mut out = String::new();
    writeln!(
        out,
        "{:<31} {:<24} {:<10} {:>8} {:>8}  weights",
        "id", "maker", "commercial", "in $/1M", "out $/1M"
    )?;
    for m in &c.models {
        let weights_state = if m.local_path(weights).is_some_and(|p| p.exists()) {
            "present"
        } else if m.sources.iter().any(|s| s.hf_file.is_some()) {
            "missing (fetched from the hub on first use)"
        } else {
            "missing"
        };
        writeln!(
            out,
            "{:<31} {:<24} {:<10} {:>8} {:>8}  {weights_state}",
            m.id,
            m.maker,
            if m.commercial_use { "yes" } else { "NO" },
            crate::catalog::record::usd_per_million(m.pricing.input),
            crate::catalog::record::usd_per_million(m.pricing.output),
        )?;
    }
    Ok(out)
}
