//! `tollgate serve`'s connection and request-size flags, turned into `api::server::HttpLimits`
//! (whose docs give each limit's meaning and error), and the byte-size parser every size flag
//! uses.

use std::time::Duration;

use crate::api::shared::server::HttpLimits;

/// Connection and request-size limits; every default is `HttpLimits::default()`'s.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Seconds a client has to send a request's headers; idle keep-alive connections are
    /// closed after the same time.
    #[arg(long, env = "TOLLGATE_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
    /// Seconds a request body may pause between two pieces before the request is answered 408.
    #[arg(long, env = "TOLLGATE_BODY_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout: u64,
    /// Open connections at once (lowered to fit the open-file limit); one more is answered 503
    /// and closed.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Open connections at once from one client address (IPv6: one /64); one more is answered
    /// 503 and closed. Default: a thirty-second of `--max-connections` (128 of 4,096). `0`
    /// turns the per-address cap off (behind a reverse proxy, whose connections all come from
    /// one address).
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS_PER_IP", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub max_connections_per_ip: Option<u64>,
    /// Seconds a new connection has to send its first request's headers before it is closed.
    #[arg(long, env = "TOLLGATE_FIRST_REQUEST_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub first_request_timeout: u64,
    /// Largest JSON request body on /v1 (e.g. `4MiB`); audio uploads have their own 25 MB limit.
    #[arg(long, env = "TOLLGATE_MAX_BODY_BYTES", default_value = "4MiB", value_parser = parse_bytes)]
    pub max_body_bytes: u64,
    /// Most messages (chat) or input items (Responses) in one request.
    #[arg(long, env = "TOLLGATE_MAX_MESSAGES", default_value_t = 2048)]
    pub max_messages: usize,
    /// Most content parts over all messages of one request.
    #[arg(long, env = "TOLLGATE_MAX_CONTENT_PARTS", default_value_t = 4096)]
    pub max_content_parts: usize,
    /// Most characters of message text in one request, before the chat template.
    #[arg(long, env = "TOLLGATE_MAX_PROMPT_CHARS", default_value_t = 1 << 20)]
    pub max_prompt_chars: usize,
    /// On SIGTERM or ctrl-c, seconds the requests in flight may take to finish (queued ones
    /// end at once, unrun and uncharged); then those still running are cut off and charged
    /// for what they produced, and the server exits once every charge is recorded.
    #[arg(long, env = "TOLLGATE_DRAIN_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_timeout: u64,
}

impl HttpArgs {
    /// The limits these flags set.
    pub fn limits(&self) -> HttpLimits {
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        HttpLimits {
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            max_connections: size(self.max_connections),
            max_connections_per_ip: self.max_connections_per_ip.map(size),
            first_request_timeout: Duration::from_secs(self.first_request_timeout),
            max_body_bytes: size(self.max_body_bytes),
            max_messages: self.max_messages,
            max_content_parts: self.max_content_parts,
            max_prompt_chars: self.max_prompt_chars,
            drain_timeout: Duration::from_secs(self.drain_timeout),
        }
    }
}

/// Parse a byte size: a number with an optional `KiB`/`MiB`/`GiB`/`KB`/`MB`/`GB` suffix.
///
/// # Errors
/// Anything else.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit `{other}` (use KiB, MiB, GiB)")),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 8GiB"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Probe {
        #[command(flatten)]
        http: HttpArgs,
    }

    #[test]
    fn flag_defaults_are_the_documented_limits() {
        let p = Probe::parse_from(["probe"]);
        assert_eq!(p.http.limits(), HttpLimits::default());
    }

    #[test]
    fn flags_set_the_limits() {
        let p = Probe::parse_from([
            "probe",
            "--header-timeout",
            "5",
            "--max-body-bytes",
            "1MiB",
            "--max-messages",
            "10",
        ]);
        let l = p.http.limits();
        assert_eq!(l.header_timeout, Duration::from_secs(5));
        assert_eq!(l.max_body_bytes, 1 << 20);
        assert_eq!(l.max_messages, 10);
        assert!(Probe::try_parse_from(["probe", "--header-timeout", "0"]).is_err());
    }
}
