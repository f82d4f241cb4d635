//! Sign-in through an OpenID Connect provider: the authorization-code flow (OpenID Connect
//! Core 1.0 section 3.1) with PKCE (RFC 7636, S256), a `state` bound to the browser and a
//! `nonce` bound to the ID token, through the `openidconnect` crate. The provider's discovery
//! document and signing keys are fetched on first use and again every hour.
//!
//! Owns: the relying party's pending flows (in memory, 10 minutes each, bounded) and the
//! verification of what the provider returns. Makes outbound HTTPS requests to the provider
//! only; serving HTTP is `api`'s. Accounts are resolved by `ledger::sign_in_identity`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use openidconnect::core::{CoreClient, CoreProviderMetadata, CoreResponseType, CoreUserInfoClaims};
use openidconnect::{
    AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
};

/// How long a started sign-in may take before its `state` is forgotten.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// Most sign-ins in progress at once (bounds memory against floods of `start`; past it the
/// oldest is forgotten, so a flood cannot lock out new sign-ins).
pub const MAX_PENDING: usize = 10_000;
/// How long discovery metadata and the provider's keys are reused.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Timeout of each request to the provider.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Relying-party settings (`--oidc-*` flags).
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// Issuer URL, e.g. `https://accounts.google.com` (discovery at
    /// `{issuer}/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// Client secret (`client_secret_basic`); `None` for a public client (PKCE only).
    pub client_secret: Option<String>,
    /// Shown on the sign-in button: "Sign in with {label}".
    pub label: String,
}

/// Failures of the flow. None carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the identity provider could not be reached or described itself wrongly: {0}")]
    Discovery(String),
    #[error("this sign-in attempt is unknown or expired; start again")]
    UnknownState,
    #[error("the identity provider did not accept the sign-in: {0}")]
    Exchange(String),
    #[error("the identity provider's answer failed verification: {0}")]
    Verification(String),
    #[error("the identity provider gave no e-mail address (the `email` scope is needed)")]
    NoEmail,
    #[error("bad OpenID Connect setting: {0}")]
    Config(String),
}

/// What a verified ID token (and, where it lacks the address, the UserInfo endpoint) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedClaims {
    /// The configured issuer URL.
    pub issuer: String,
    /// `sub`.
    pub subject: String,
    /// `email`, as the provider sent it.
    pub email: String,
    /// `email_verified` (absent counts as false).
    pub email_verified: bool,
}

struct Pending {
    verifier: PkceCodeVerifier,
    nonce: Nonce,
    redirect: RedirectUrl,
    started: Instant,
}

/// The relying party: one per server.
pub struct Oidc {
    cfg: OidcConfig,
    issuer: IssuerUrl,
    /// Synchronous (ureq, the server's one HTTP client): every call runs on the blocking pool.
    http: ureq::Agent,
    metadata: tokio::sync::Mutex<Option<(CoreProviderMetadata, Instant)>>,
    /// `state` -> the secrets of its flow.
    pending: Mutex<HashMap<String, Pending>>,
}

impl Oidc {
    /// A relying party for `cfg`. Nothing is fetched until the first sign-in.
    ///
    /// # Errors
    /// `Config` when the issuer is not a URL or the HTTP client cannot be built.
    pub fn new(cfg: OidcConfig) -> Result<Self, OidcError> {
        let issuer =
            IssuerUrl::new(cfg.issuer.clone()).map_err(|e| OidcError::Config(e.to_string()))?;
        // No redirects: a provider endpoint that redirects is refused rather than followed
        // (the openidconnect crate's advice against server-side request forgery).
        let http = ureq::AgentBuilder::new()
            .redirects(0)
            .timeout(HTTP_TIMEOUT)
            .build();
        Ok(Self {
            cfg,
            issuer,
            http,
            metadata: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// The label of the sign-in button.
    pub fn label(&self) -> &str {
        &self.cfg.label
    }

    /// A client for the provider's metadata (cached for an hour; `refresh` fetches it anew,
    /// e.g. after the provider rotated its signing keys).
    async fn client(
        &self,
        redirect: RedirectUrl,
        refresh: bool,
    ) -> Result<CoreClientFor, OidcError> {
        let metadata = {
            let mut cached = self.metadata.lock().await;
            match cached.as_ref() {
                Some((m, at)) if !refresh && at.elapsed() < METADATA_TTL => m.clone(),
                _ => {
                    let (issuer, http) = (self.issuer.clone(), self.http.clone());
                    let m = off_thread(move || {
                        CoreProviderMetadata::discover(&issuer, &http)
                            .map_err(|e| OidcError::Discovery(error_chain(&e)))
                    })
                    .await?;
                    *cached = Some((m.clone(), Instant::now()));
                    m
                }
            }
        };
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.cfg.client_id.clone()),
            self.cfg.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect))
    }

    /// Start a sign-in that returns to `redirect_url` (our callback). Returns the provider's
    /// authorization URL to send the browser to and the `state` to bind to the browser (a
    /// cookie); the PKCE verifier and nonce stay here.
    ///
    /// # Errors
    /// `Config` (bad redirect URL), `Discovery`.
    pub async fn begin(&self, redirect_url: &str) -> Result<(String, String), OidcError> {
        let redirect = RedirectUrl::new(redirect_url.to_owned())
            .map_err(|e| OidcError::Config(e.to_string()))?;
        let client = self.client(redirect.clone(), false).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .set_pkce_challenge(challenge)
            .url();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, p| p.started.elapsed() < FLOW_TTL);
        if pending.len() >= MAX_PENDING {
            let oldest = pending
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                pending.remove(&k);
            }
        }
        pending.insert(
            state.secret().clone(),
            Pending {
                verifier,
                nonce,
                redirect,
                started: Instant::now(),
            },
        );
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Finish the sign-in that `state` started: the flow is used up (a replayed callback finds
    /// nothing), the code is exchanged with the PKCE verifier, and the ID token's signature,
    /// issuer, audience, expiry and nonce are verified. When the ID token carries no address
    /// (providers may put it only in UserInfo), the UserInfo endpoint is asked, for the same
    /// subject.
    ///
    /// # Errors
    /// `UnknownState`, `Discovery`, `Exchange`, `Verification`, `NoEmail`.
    pub async fn finish(&self, state: &str, code: String) -> Result<VerifiedClaims, OidcError> {
        let flow = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(state)
            .filter(|p| p.started.elapsed() < FLOW_TTL)
            .ok_or(OidcError::UnknownState)?;
        let client = self.client(flow.redirect.clone(), false).await?;
        let (exchanging, http, verifier) = (client.clone(), self.http.clone(), flow.verifier);
        let token = off_thread(move || {
            exchanging
                .exchange_code(AuthorizationCode::new(code))
                .map_err(|e| OidcError::Discovery(e.to_string()))?
                .set_pkce_verifier(verifier)
                .request(&http)
                .map_err(|e| OidcError::Exchange(error_chain(&e)))
        })
        .await?;
        let id_token = token
            .id_token()
            .ok_or_else(|| OidcError::Verification("no ID token in the token response".into()))?;
        // A failure may be a key the provider rotated in since the metadata was cached: fetch
        // it again once and verify with the fresh keys.
        let refreshed;
        let (client, claims) = match id_token.claims(&client.id_token_verifier(), &flow.nonce) {
            Ok(c) => (&client, c),
            Err(_) => {
                refreshed = self.client(flow.redirect, true).await?;
                let c = id_token
                    .claims(&refreshed.id_token_verifier(), &flow.nonce)
                    .map_err(|e| OidcError::Verification(error_chain(&e)))?;
                (&refreshed, c)
            }
        };
        let subject = claims.subject().clone();
        let mut email = claims.email().map(|e| e.to_string());
        let mut email_verified = claims.email_verified().unwrap_or(false);
        if email.is_none() {
            let (asking, http) = (client.clone(), self.http.clone());
            let (access, sub) = (token.access_token().clone(), subject.clone());
            let info = off_thread(move || match asking.user_info(access, Some(sub)) {
                // No UserInfo endpoint: the address stays unknown.
                Err(_) => Ok(None),
                Ok(request) => request
                    .request(&http)
                    .map(Some::<CoreUserInfoClaims>)
                    .map_err(|e| OidcError::Verification(error_chain(&e))),
            })
            .await?;
            if let Some(info) = info {
                email = info.email().map(|e| e.to_string());
                email_verified = info.email_verified().unwrap_or(false);
            }
        }
        Ok(VerifiedClaims {
            issuer: self.cfg.issuer.clone(),
            subject: subject.to_string(),
            email: email.ok_or(OidcError::NoEmail)?,
            email_verified,
        })
    }
}

/// Run a synchronous call to the provider on tokio's blocking pool.
async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, OidcError> + Send + 'static,
) -> Result<T, OidcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| OidcError::Discovery(e.to_string()))?
}

type CoreClientFor = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// An error and its sources on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp() -> Oidc {
        Oidc::new(OidcConfig {
            issuer: "http://127.0.0.1:9".into(),
            client_id: "c".into(),
            client_secret: None,
            label: "Test".into(),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn an_unknown_state_is_refused_without_contacting_the_provider() {
        let e = rp()
            .finish("never-issued", "code".into())
            .await
            .unwrap_err();
        assert!(matches!(e, OidcError::UnknownState), "{e}");
    }

    #[tokio::test]
    async fn an_unreachable_provider_is_a_discovery_error() {
        // The issuer is port 9 (discard) on loopback, where nothing listens in tests.
        let e = rp()
            .begin("http://127.0.0.1:1/auth/oidc/callback")
            .await
            .unwrap_err();
        assert!(matches!(e, OidcError::Discovery(_)), "{e}");
    }

    #[test]
    fn a_bad_issuer_is_a_config_error() {
        let e = Oidc::new(OidcConfig {
            issuer: "not a url".into(),
            client_id: "c".into(),
            client_secret: None,
            label: "x".into(),
        });
        assert!(matches!(e, Err(OidcError::Config(_))));
    }
}
