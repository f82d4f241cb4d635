//! `tollgate serve`'s flags and the server configuration they make (`ServeConfig`).
//! May use: `app` (the configuration types), `api`, `mcp`, `payments`, `auth` settings. Never:
//! the rest of the CLI (the operator commands use this module, not the other way).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::app::{EngineKind, ServeConfig};
use crate::money::Micros;

use super::http::{self, parse_bytes};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TOLLGATE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// The catalogue file.
    #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
    pub models: PathBuf,
    /// Directory that catalogue weight paths are relative to.
    #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
    pub weights: PathBuf,
    /// Model ids to load at start-up (comma-separated; alias `--preload`); default: every
    /// catalogue model whose
    /// weights file is present.
    #[arg(long, alias = "preload", env = "TOLLGATE_LOAD", value_delimiter = ',')]
    pub load: Vec<String>,
    /// Compute threads for inference (sets candle's and rayon's pools). Default: all cores.
    #[arg(long, env = "TOLLGATE_THREADS")]
    pub threads: Option<usize>,
    /// `cpu` or `cuda` (needs a build with `--features cuda`).
    #[arg(long, env = "TOLLGATE_DEVICE", default_value = "cpu")]
    pub device: String,
    /// `candle` (real models) or `fake` (deterministic test engine, no model).
    #[arg(long, env = "TOLLGATE_ENGINE", value_enum, default_value = "candle")]
    pub engine: EngineKind,
    /// Requests that may wait for the engine; more get 429 `engine_overloaded`.
    #[arg(long, env = "TOLLGATE_QUEUE_DEPTH", default_value_t = 64)]
    pub queue_depth: usize,
    /// Requests one account may have waiting for the engine (all its keys and its playground
    /// together); more get 429 `too_many_concurrent_requests`. `0`: a quarter of
    /// `--queue-depth`.
    #[arg(long, env = "TOLLGATE_MAX_QUEUED_PER_ACCOUNT", default_value_t = 0)]
    pub max_queued_per_account: usize,
    /// Sequences one API key (or one account's playground) may have waiting and running
    /// together (a request of `n` choices is `n`); more get 429
    /// `too_many_concurrent_requests`. `0`: twice `--max-batch`.
    #[arg(long, env = "TOLLGATE_MAX_SEQUENCES_PER_KEY", default_value_t = 0)]
    pub max_sequences_per_key: usize,
    /// While one tenant's sequences decode, another tenant's prefill is cut to chunks that
    /// keep each step near this many milliseconds (from the measured step times), so long
    /// prompts never stall others' streams for whole chunks; `0` turns it off.
    #[arg(long, env = "TOLLGATE_INTERLEAVE_MS", default_value_t = 250)]
    pub interleave_ms: u64,
    /// Most bytes all of one request's images may take to decode (read from their headers
    /// before the balance is held), e.g. `128MiB`; more is 400 `image_too_large`.
    #[arg(long, env = "TOLLGATE_MAX_IMAGE_DECODE_BYTES", default_value = "128MiB", value_parser = parse_bytes)]
    pub max_image_decode_bytes: u64,
    /// Most bytes of images decoded at once, server-wide, e.g. `256MiB`; an image waits up to
    /// 10 s for room, then its request is 503 `image_decode_busy`.
    #[arg(long, env = "TOLLGATE_IMAGE_DECODE_BUDGET", default_value = "256MiB", value_parser = parse_bytes)]
    pub image_decode_budget: u64,
    /// Most sequences decoded together in one batch.
    #[arg(long, env = "TOLLGATE_MAX_BATCH", default_value_t = 16)]
    pub max_batch: usize,
    /// Most tokens per forward step (decode tokens plus prefill chunks).
    #[arg(long, env = "TOLLGATE_STEP_TOKENS", default_value_t = 256)]
    pub step_tokens: usize,
    /// Speculative decoding: most decode plus draft tokens in one step (0 turns it off).
    /// While fewer sequences decode than this, each may feed draft tokens (from the request's
    /// `prediction`, or found by prompt lookup) that the model verifies in the same step; a
    /// batch this large or larger drafts nothing. Outputs are unchanged either way.
    #[arg(long, env = "TOLLGATE_SPECULATIVE_TOKENS", default_value_t = 16)]
    pub speculative_tokens: usize,
    /// Load draft models: a model's catalogue `draft` (a smaller model with its vocabulary,
    /// loaded beside it when its weights are present) drafts where prompt lookup finds
    /// nothing. Off by default: on a 2-core CPU its own prefill and steps cost more than its
    /// drafts save on chat answers (docs/benchmarks.md); the request's `prediction` and
    /// prompt lookup need no draft model.
    #[arg(long, env = "TOLLGATE_DRAFT_MODELS")]
    pub draft_models: bool,
    /// How the KV cache stores keys and values: `f16` (half the memory of f32, so twice the
    /// sequences fit in `--kv-cache-budget`) or `f32`, for every model; `<model id>=f32` sets
    /// one model's (repeat or separate with commas), e.g. `f16,smollm2-135m-instruct=f32`.
    #[arg(
        long,
        env = "TOLLGATE_KV_CACHE_TYPE",
        default_value = "f16",
        value_delimiter = ','
    )]
    pub kv_cache_type: Vec<String>,
    /// Requests per minute per API key.
    #[arg(long, env = "TOLLGATE_RATE_LIMIT_RPM", default_value_t = 60)]
    pub rate_limit_rpm: u32,
    /// Most model weights resident at once, e.g. `8GiB`, `512MiB` or bytes; `0` = no limit.
    /// Loading another model first evicts the least recently used idle ones.
    #[arg(long, env = "TOLLGATE_MEMORY_BUDGET", default_value = "0", value_parser = parse_bytes)]
    pub memory_budget: u64,
    /// Most KV cache memory the running sequences may hold, e.g. `4GiB`; `0` = no limit. A
    /// request is admitted only when its prompt plus `max_tokens` (capped at the context)
    /// fits beside the reservations of those already running; otherwise it waits.
    #[arg(long, env = "TOLLGATE_KV_CACHE_BUDGET", default_value = "4GiB", value_parser = parse_bytes)]
    pub kv_cache_budget: u64,
    /// Most KV cache memory each model's prefix cache keeps, e.g. `1GiB`; `0` turns it off.
    /// Prompts that start with tokens already prefilled (a shared system prompt, earlier turns)
    /// reuse them; least recently used blocks are evicted past this.
    #[arg(long, env = "TOLLGATE_PREFIX_CACHE_BUDGET", default_value = "512MiB", value_parser = parse_bytes)]
    pub prefix_cache_budget: u64,
    /// Leave `Secure` off the dashboard's session cookie, for plain-HTTP local use only.
    #[arg(long, env = "TOLLGATE_INSECURE_COOKIES")]
    pub insecure_cookies: bool,
    /// Fetch `http(s)` image URLs in requests (off: only `data:` URLs are accepted). Fetches
    /// take at most 10 s and 20 MiB each, follow at most 3 redirects, and never reach
    /// loopback, private or other internal addresses.
    #[arg(long, env = "TOLLGATE_ALLOW_IMAGE_URLS")]
    pub allow_image_urls: bool,
    /// With `--allow-image-urls`, also fetch from loopback, private and other internal
    /// addresses (images on an internal network; exposes them to every API key).
    #[arg(
        long,
        env = "TOLLGATE_ALLOW_PRIVATE_IMAGE_URLS",
        requires = "allow_image_urls"
    )]
    pub allow_private_image_urls: bool,
    /// Base URL of the server as users reach it (for links in e-mails), e.g.
    /// `https://llm.example.com`; default: `http://` + the request's Host.
    #[arg(long, env = "TOLLGATE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Balance granted once to a dashboard sign-up when its address is verified, in USD.
    #[arg(long, env = "TOLLGATE_SIGNUP_STARTER_USD", default_value = "0.10")]
    pub signup_starter_usd: String,
    /// Chat requests per minute per account through the playground (session cookie), separate
    /// from `--rate-limit-rpm` for keys.
    #[arg(long, env = "TOLLGATE_PLAYGROUND_RPM", default_value_t = 20)]
    pub playground_rpm: u32,
    /// Stripe secret key; with `--stripe-webhook-secret` it turns on top-ups by card (Stripe
    /// Checkout; point Stripe's webhook for `checkout.session.completed` at `/webhooks/stripe`).
    #[arg(long, env = "TOLLGATE_STRIPE_SECRET_KEY", hide_env_values = true)]
    pub stripe_secret_key: Option<String>,
    /// The webhook endpoint's signing secret (`whsec_...`).
    #[arg(long, env = "TOLLGATE_STRIPE_WEBHOOK_SECRET", hide_env_values = true)]
    pub stripe_webhook_secret: Option<String>,
    /// Stripe's API base URL.
    #[arg(
        long,
        env = "TOLLGATE_STRIPE_API_BASE",
        default_value = "https://api.stripe.com"
    )]
    pub stripe_api_base: String,
    /// Accepted currencies besides USD with their value in USD per unit, e.g. `eur=1.08,gbp=1.27`;
    /// the rate used is recorded on each top-up's ledger entry.
    #[arg(long, env = "TOLLGATE_FX_RATES", default_value = "")]
    pub fx_rates: String,
    /// SMTP relay for verification and reset e-mails, e.g. `smtps://user:pass@smtp.example.com`
    /// or `smtp://relay:587?tls=required`; without it, e-mails go to the log.
    #[arg(long, env = "TOLLGATE_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// Sender of those e-mails.
    #[arg(
        long,
        env = "TOLLGATE_MAIL_FROM",
        default_value = "tollgate <noreply@localhost>"
    )]
    pub mail_from: String,
    /// OpenID Connect issuer URL (e.g. `https://accounts.google.com`); with `--oidc-client-id`
    /// it adds "Sign in with ..." to the dashboard. Register
    /// `{--public-url}/auth/oidc/callback` as the client's redirect URI at the provider.
    #[arg(long, env = "TOLLGATE_OIDC_ISSUER", requires = "oidc_client_id")]
    pub oidc_issuer: Option<String>,
    /// The client id the provider issued to this server.
    #[arg(long, env = "TOLLGATE_OIDC_CLIENT_ID", requires = "oidc_issuer")]
    pub oidc_client_id: Option<String>,
    /// The client secret (`client_secret_basic`); leave out for a public client (PKCE only).
    #[arg(long, env = "TOLLGATE_OIDC_CLIENT_SECRET", hide_env_values = true)]
    pub oidc_client_secret: Option<String>,
    /// The provider's name on the sign-in button.
    #[arg(
        long,
        env = "TOLLGATE_OIDC_LABEL",
        default_value = "your identity provider"
    )]
    pub oidc_label: String,
    /// Requests per minute per client address to the public endpoints (`/v1/models*`,
    /// `/v1/openapi.json`) and the MCP server `/mcp`.
    #[arg(long, env = "TOLLGATE_PUBLIC_RPM", default_value_t = crate::app::DEFAULT_PUBLIC_RPM)]
    pub public_rpm: u32,
    /// More `Host` names the MCP server answers (comma-separated, e.g. `gpu-box.lan,10.0.0.5`),
    /// besides localhost, 127.0.0.1, ::1 and the host of `--public-url`; others get 403
    /// (protection against DNS rebinding).
    #[arg(long, env = "TOLLGATE_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// Reference tokenizers (`<name>/tokenizer.json`, scripts/ops/fetch-tokenizers), for the MCP
    /// server's token counts of models whose weights are not here; default
    /// `<data dir>/tokenizers`.
    #[arg(long, env = "TOLLGATE_TOKENIZERS")]
    pub tokenizers: Option<PathBuf>,
    /// Every file the server reads besides weights and the catalogue: measured language costs
    /// (`language-multipliers.json`) and reference tokenizers (`tokenizers/`). Default: the
    /// directory of `--db` (`data/` for the default ledger).
    #[arg(long, env = "TOLLGATE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Origins whose web pages may call `/v1` with an API key (comma-separated, e.g.
    /// `https://app.example.com`); `*` allows any, as OpenAI's API does. Credentials (the
    /// session cookie) are never allowed cross-site.
    #[arg(
        long,
        env = "TOLLGATE_CORS_ORIGINS",
        value_delimiter = ',',
        default_value = "*"
    )]
    pub cors_origins: Vec<String>,
    #[command(flatten)]
    pub http: http::HttpArgs,
}

impl ServeArgs {
    /// The server's configuration.
    ///
    /// # Errors
    /// A malformed `--signup-starter-usd`.
    pub fn config(&self, db: &std::path::Path) -> anyhow::Result<ServeConfig> {
        let data_dir = crate::app::data_dir(self.data_dir.as_deref(), db);
        Ok(ServeConfig {
            bind: self.bind,
            catalog: self.models.clone(),
            weights: self.weights.clone(),
            load: self.load.clone(),
            device: self.device.clone(),
            engine: self.engine,
            queue_depth: self.queue_depth,
            queued_per_account: self.max_queued_per_account,
            sequences_per_key: self.max_sequences_per_key,
            interleave_ms: self.interleave_ms,
            images: crate::engine::ImageConfig {
                request_bytes: self.max_image_decode_bytes,
                decode_budget_bytes: self.image_decode_budget,
                ..Default::default()
            },
            max_batch: self.max_batch,
            step_tokens: self.step_tokens,
            speculative_tokens: self.speculative_tokens,
            draft_models: self.draft_models,
            kv_cache: crate::engine::KvTypes::parse(&self.kv_cache_type)
                .map_err(|e| anyhow::anyhow!("--kv-cache-type: {e}"))?,
            db: db.to_owned(),
            rate_limit_rpm: self.rate_limit_rpm,
            memory_budget: self.memory_budget,
            kv_cache_budget: self.kv_cache_budget,
            prefix_cache_budget: self.prefix_cache_budget,
            dashboard: crate::api::DashboardConfig {
                insecure_cookies: self.insecure_cookies,
                public_url: self.public_url.clone(),
                starter_micros: usd_to_micros(&self.signup_starter_usd)?,
                playground_rpm: self.playground_rpm,
                ..Default::default()
            },
            smtp: match (&self.smtp_url, &self.public_url) {
                // Mailed links must not take their host from a request's Host header.
                (Some(_), None) => anyhow::bail!(
                    "--smtp-url needs --public-url (the base of the links in e-mails)"
                ),
                (url, _) => url.clone().map(|url| (url, self.mail_from.clone())),
            },
            payments: match (&self.stripe_secret_key, &self.stripe_webhook_secret) {
                (Some(key), Some(secret)) => Some(crate::payments::StripeConfig {
                    secret_key: key.clone(),
                    webhook_secret: secret.clone(),
                    api_base: self.stripe_api_base.clone(),
                    rates: crate::payments::FxRates::parse(&self.fx_rates)
                        .map_err(|e| anyhow::anyhow!("--fx-rates: {e}"))?,
                }),
                (None, None) => None,
                _ => anyhow::bail!("--stripe-secret-key and --stripe-webhook-secret go together"),
            },
            public_rpm: self.public_rpm,
            cors_origins: self.cors_origins.clone(),
            http: self.http.limits(),
            image_urls: crate::api::shared::image_fetch::ImageUrls {
                allow: self.allow_image_urls,
                allow_private: self.allow_private_image_urls,
            },
            mcp: crate::mcp::McpSettings {
                allowed_hosts: mcp_hosts(self.public_url.as_deref(), &self.mcp_allowed_hosts),
                tokenizers_dir: self
                    .tokenizers
                    .clone()
                    .unwrap_or_else(|| data_dir.join("tokenizers")),
            },
            data_dir,
            oidc: match (&self.oidc_issuer, &self.oidc_client_id) {
                // The redirect URI registered at the provider must not come from a Host header.
                (Some(_), Some(_)) if self.public_url.is_none() => anyhow::bail!(
                    "--oidc-issuer needs --public-url (the base of the redirect URI registered at the provider)"
                ),
                (Some(issuer), Some(client_id)) => Some(crate::auth::oidc::OidcConfig {
                    issuer: issuer.clone(),
                    client_id: client_id.clone(),
                    client_secret: self.oidc_client_secret.clone(),
                    label: self.oidc_label.clone(),
                }),
                _ => None,
            },
        })
    }
}

/// The host of an `http(s)://` URL, without port or brackets (`[2001:db8::1]` -> `2001:db8::1`).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// Hosts the MCP server answers: the loopback names, the host of `public_url`, and `extra`.
fn mcp_hosts(public_url: Option<&str>, extra: &[String]) -> Vec<String> {
    let mut hosts = crate::mcp::McpSettings::default().allowed_hosts;
    if let Some(host) = public_url.and_then(url_host) {
        hosts.push(host);
    }
    hosts.extend(
        extra
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty()),
    );
    hosts
}

/// Parse a USD amount into micros (`Micros::parse_usd`: at most 6 decimals, a leading `-`
/// allowed).
///
/// # Errors
/// Anything else.
pub fn usd_to_micros(s: &str) -> anyhow::Result<Micros> {
    Micros::parse_usd(s).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    #[test]
    fn mcp_hosts_take_the_public_url_host() {
        let h = super::mcp_hosts(
            Some("https://[2001:db8::1]:8443/x"),
            &["lan.box:8080".into()],
        );
        assert_eq!(
            h[3..],
            ["2001:db8::1".to_owned(), "lan.box:8080".to_owned()]
        );
        let h = super::mcp_hosts(Some("https://user@llm.example.com/"), &[]);
        assert_eq!(h.last().map(String::as_str), Some("llm.example.com"));
    }

    /// `--data-dir` defaults to the ledger's directory, so a server started from anywhere reads
    /// the language costs and tokenizers kept next to its ledger; a flag or a tokenizer path
    /// overrides it.
    #[test]
    fn the_data_dir_follows_the_ledger_unless_named() {
        use clap::Parser;
        let serve = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(args).unwrap();
            let crate::cli::Command::Serve(s) = &cli.command else {
                panic!("serve")
            };
            s.config(&cli.db).unwrap()
        };
        let c = serve(&["tollgate", "serve"]);
        assert_eq!(c.data_dir, std::path::Path::new("data"));
        assert_eq!(
            c.mcp.tokenizers_dir,
            std::path::Path::new("data/tokenizers")
        );
        let c = serve(&["tollgate", "--db", "/srv/tg/ledger.db", "serve"]);
        assert_eq!(c.data_dir, std::path::Path::new("/srv/tg"));
        let c = serve(&[
            "tollgate",
            "--db",
            "ledger.db",
            "serve",
            "--data-dir",
            "/opt/tg",
        ]);
        assert_eq!(c.data_dir, std::path::Path::new("/opt/tg"));
        assert_eq!(
            c.mcp.tokenizers_dir,
            std::path::Path::new("/opt/tg/tokenizers")
        );
        let c = serve(&["tollgate", "--db", "ledger.db", "serve"]);
        assert_eq!(c.data_dir, std::path::Path::new("."));
    }
}
