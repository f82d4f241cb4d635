//! Payment-provider adapter: Stripe Checkout. Owns the provider's wire formats (creating a
//! Checkout Session, the `Stripe-Signature` webhook check, the `checkout.session.completed`
//! event), minor units per currency, and conversion to micro-USD by a configured rate table.
//! May use: `ureq` (HTTP client), `hmac`/`sha2`, `serde_json`. Never: axum, SQL (the ledger
//! records top-ups; `api` orchestrates).
//!
//! Sources: Stripe API reference "Create a Checkout Session" (`POST /v1/checkout/sessions`,
//! form-encoded, `line_items[0][price_data]`), "Check the webhook signatures" (signed payload
//! `t + "." + body`, HMAC-SHA256 with the endpoint secret, `v1` hex, 300 s tolerance), and
//! "Zero-decimal currencies".

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Stripe settings (from the command line).
#[derive(Debug, Clone)]
pub struct StripeConfig {
    /// Secret API key (`sk_live_...` / `sk_test_...`).
    pub secret_key: String,
    /// Webhook endpoint signing secret (`whsec_...`).
    pub webhook_secret: String,
    /// API base URL (`https://api.stripe.com`; tests point it at a local stand-in).
    pub api_base: String,
    pub rates: FxRates,
}

/// How far a webhook's signed timestamp may be from now, in seconds (Stripe's default).
pub const SIGNATURE_TOLERANCE_SECS: i64 = 300;
/// Smallest first top-up, in micro-USD (1.00 USD).
pub const MIN_FIRST_TOPUP_MICROS: crate::money::Micros = crate::money::Micros(1_000_000);

/// Payment failures.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PaymentError {
    #[error("currency `{0}` is not accepted here (configured: {1})")]
    Currency(String, String),
    #[error("amount `{0}` is not a positive decimal with at most {1} decimals")]
    Amount(String, u32),
    #[error("the Stripe-Signature header is missing, malformed, stale or does not match")]
    Signature,
    #[error("the payment provider failed: {0}")]
    Provider(String),
}

/// USD value of one unit of each accepted currency, in micro-USD (`usd` is always 1 USD).
#[derive(Debug, Clone)]
pub struct FxRates {
    rates: BTreeMap<String, (i64, String)>,
}

/// Currencies Stripe counts in whole units (no minor unit).
const ZERO_DECIMAL: [&str; 16] = [
    "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv",
    "xaf", "xof", "xpf",
];

/// Decimal places of a currency's minor unit.
pub fn decimals(currency: &str) -> u32 {
    if ZERO_DECIMAL.contains(&currency) {
        0
    } else {
        2
    }
}

/// Parse a non-negative decimal string with at most `scale` decimals into an integer scaled by
/// `10^scale` ("10.5", 2 -> 1050).
fn parse_scaled(s: &str, scale: u32) -> Option<i64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > scale as usize {
        return None;
    }
    let padded = format!("{int}{frac:0<width$}", width = scale as usize);
    padded.parse().ok()
}

impl FxRates {
    /// Parse `eur=1.08,gbp=1.27` (USD per unit, up to 6 decimals); `usd=1` is always present.
    ///
    /// # Errors
    /// A malformed entry, named.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut rates = BTreeMap::new();
        rates.insert("usd".to_owned(), (1_000_000, "1".to_owned()));
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (cur, rate) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected CURRENCY=USD_PER_UNIT"))?;
            let cur = cur.trim().to_lowercase();
            let rate = rate.trim();
            let micros = parse_scaled(rate, 6)
                .filter(|&m| m > 0)
                .ok_or_else(|| format!("`{part}`: the rate must be a positive decimal"))?;
            if cur.len() != 3 || !cur.bytes().all(|b| b.is_ascii_lowercase()) {
                return Err(format!("`{part}`: currencies are ISO 4217 codes like eur"));
            }
            rates.insert(cur, (micros, rate.to_owned()));
        }
        Ok(Self { rates })
    }

    fn accepted(&self) -> String {
        self.rates.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// `amount` (a decimal string in `currency`) as (minor units, micro-USD, rate string).
    /// Micro-USD = minor x rate_micros / 10^decimals, rounded down (at most 1 micro in the
    /// operator's favour).
    ///
    /// # Errors
    /// `Currency` (not in the table), `Amount` (malformed, zero or too many decimals).
    pub fn convert(
        &self,
        amount: &str,
        currency: &str,
    ) -> Result<(i64, i64, String), PaymentError> {
        let cur = currency.trim().to_lowercase();
        let (rate, shown) = self
            .rates
            .get(&cur)
            .ok_or_else(|| PaymentError::Currency(cur.clone(), self.accepted()))?;
        let dec = decimals(&cur);
        let minor = parse_scaled(amount.trim(), dec)
            .filter(|&m| m > 0)
            .ok_or_else(|| PaymentError::Amount(amount.to_owned(), dec))?;
        let usd = i128::from(minor) * i128::from(*rate) / 10i128.pow(dec);
        let usd = i64::try_from(usd).map_err(|_| PaymentError::Amount(amount.to_owned(), dec))?;
        Ok((minor, usd, shown.clone()))
    }
}

/// A created Checkout Session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub id: String,
    /// Where to send the user to pay.
    pub url: String,
}

/// Create a Checkout Session for `amount_minor` of `currency` (blocking HTTP: call from a
/// blocking task). `account` goes into `client_reference_id` and metadata.
///
/// # Errors
/// `Provider` with Stripe's message or the transport error.
pub fn create_checkout(
    cfg: &StripeConfig,
    account: crate::ids::AccountId,
    currency: &str,
    amount_minor: i64,
    success_url: &str,
    cancel_url: &str,
) -> Result<Checkout, PaymentError> {
    let form = [
        ("mode", "payment".to_owned()),
        ("client_reference_id", account.to_string()),
        ("metadata[account_id]", account.to_string()),
        ("line_items[0][quantity]", "1".to_owned()),
        ("line_items[0][price_data][currency]", currency.to_owned()),
        (
            "line_items[0][price_data][unit_amount]",
            amount_minor.to_string(),
        ),
        (
            "line_items[0][price_data][product_data][name]",
            "tollgate balance top-up".to_owned(),
        ),
        ("success_url", success_url.to_owned()),
        ("cancel_url", cancel_url.to_owned()),
    ];
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!(
        "{}/v1/checkout/sessions",
        cfg.api_base.trim_end_matches('/')
    );
    let resp = ureq::post(&url)
        .set("Authorization", &format!("Bearer {}", cfg.secret_key))
        .timeout(std::time::Duration::from_secs(30))
        .send_form(&pairs);
    let body: serde_json::Value = match resp {
        Ok(r) => r
            .into_json()
            .map_err(|e| PaymentError::Provider(e.to_string()))?,
        Err(ureq::Error::Status(code, r)) => {
            let v: serde_json::Value = r.into_json().unwrap_or_default();
            let msg = v["error"]["message"].as_str().unwrap_or("no message");
            return Err(PaymentError::Provider(format!("HTTP {code}: {msg}")));
        }
        Err(e) => return Err(PaymentError::Provider(e.to_string())),
    };
    match (body["id"].as_str(), body["url"].as_str()) {
        (Some(id), Some(url)) => Ok(Checkout {
            id: id.to_owned(),
            url: url.to_owned(),
        }),
        _ => Err(PaymentError::Provider(
            "the Checkout Session has no id or url".into(),
        )),
    }
}

/// The `Stripe-Signature` value for `payload` at time `t` (Unix seconds): `t=..,v1=<hex>`.
/// Used by tests and tools that sign events; the server only verifies.
pub fn sign(secret: &str, t: i64, payload: &[u8]) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, payload).finalize().into_bytes())
    )
}

fn mac(secret: &str, t: i64, payload: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so `new_from_slice` cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(payload);
    m
}

/// Most `v1` signatures looked at in one header (Stripe sends one per active secret).
const MAX_SIGNATURES: usize = 8;

/// Check a webhook's `Stripe-Signature` header against the raw body: one of its first
/// `MAX_SIGNATURES` `v1` values must equal HMAC-SHA256(secret, `t.body`) (the MAC is computed
/// once and compared in constant time) and `t` must be within `SIGNATURE_TOLERANCE_SECS` of
/// `now`.
///
/// # Errors
/// `Signature`.
pub fn verify_signature(
    secret: &str,
    header: &str,
    payload: &[u8],
    now: i64,
) -> Result<(), PaymentError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) if v1.len() < MAX_SIGNATURES => v1.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let t = t.ok_or(PaymentError::Signature)?;
    if now.abs_diff(t) > SIGNATURE_TOLERANCE_SECS.unsigned_abs() {
        return Err(PaymentError::Signature);
    }
    let expected = mac(secret, t, payload);
    if v1
        .iter()
        .any(|sig| expected.clone().verify_slice(sig).is_ok())
    {
        Ok(())
    } else {
        Err(PaymentError::Signature)
    }
}

/// A paid `checkout.session.completed` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub event_id: String,
    /// The Checkout Session id.
    pub session_id: String,
    pub currency: String,
    pub amount_total: i64,
}

/// The paid checkout in an event body, or `None` for other event types and unpaid sessions
/// (which are acknowledged and ignored).
///
/// # Errors
/// `Provider` when the body is not a Stripe event.
pub fn completed_checkout(payload: &[u8]) -> Result<Option<Completed>, PaymentError> {
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| PaymentError::Provider(format!("event body: {e}")))?;
    let event_id = v["id"]
        .as_str()
        .ok_or_else(|| PaymentError::Provider("event without id".into()))?;
    let o = &v["data"]["object"];
    if v["type"] != "checkout.session.completed" || o["payment_status"] != "paid" {
        return Ok(None);
    }
    match (
        o["id"].as_str(),
        o["currency"].as_str(),
        o["amount_total"].as_i64(),
    ) {
        (Some(id), Some(cur), Some(total)) => Ok(Some(Completed {
            event_id: event_id.to_owned(),
            session_id: id.to_owned(),
            currency: cur.to_lowercase(),
            amount_total: total,
        })),
        _ => Err(PaymentError::Provider(
            "checkout.session.completed without id, currency or amount_total".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_uses_minor_units_and_rounds_down() {
        let fx = FxRates::parse("eur=1.08, jpy=0.0067, gbp=1.270001").unwrap();
        assert_eq!(
            fx.convert("10.00", "EUR").unwrap(),
            (1000, 10_800_000, "1.08".into())
        );
        assert_eq!(
            fx.convert("10", "usd").unwrap(),
            (1000, 10_000_000, "1".into())
        );
        assert_eq!(fx.convert("1500", "jpy").unwrap().1, 10_050_000);
        assert_eq!(
            fx.convert("0.01", "gbp").unwrap().1,
            12_700,
            "floor of 12700.01"
        );
        assert!(matches!(
            fx.convert("1.5", "jpy"),
            Err(PaymentError::Amount(..))
        ));
        assert!(matches!(
            fx.convert("1.001", "eur"),
            Err(PaymentError::Amount(..))
        ));
        assert!(matches!(
            fx.convert("0", "eur"),
            Err(PaymentError::Amount(..))
        ));
        assert!(matches!(
            fx.convert("-1", "eur"),
            Err(PaymentError::Amount(..))
        ));
        assert!(matches!(
            fx.convert("5", "chf"),
            Err(PaymentError::Currency(..))
        ));
        assert!(FxRates::parse("eur=abc").is_err());
        assert!(FxRates::parse("euro=1").is_err());
    }

    #[test]
    fn signatures_verify_only_with_the_secret_body_and_a_fresh_time() {
        let body = br#"{"id":"evt_1"}"#;
        let h = sign("whsec_test", 1_000_000, body);
        assert_eq!(verify_signature("whsec_test", &h, body, 1_000_100), Ok(()));
        let bad = Err(PaymentError::Signature);
        assert_eq!(verify_signature("whsec_other", &h, body, 1_000_100), bad);
        assert_eq!(verify_signature("whsec_test", &h, b"{}", 1_000_100), bad);
        assert_eq!(verify_signature("whsec_test", &h, body, 1_000_301), bad);
        assert_eq!(
            verify_signature("whsec_test", "v1=00", body, 1_000_000),
            bad
        );
        let extreme = format!("t={},v1=00", i64::MIN);
        assert_eq!(
            verify_signature("whsec_test", &extreme, body, 1_000_000),
            bad
        );
        // Several v1 values (secret rotation): any match is enough.
        let two = format!("{},v1=deadbeef", h);
        assert_eq!(
            verify_signature("whsec_test", &two, body, 1_000_000),
            Ok(())
        );
    }
}
