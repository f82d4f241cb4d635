//! Outgoing e-mail (verification and password-reset links). Owns: the outbox. May use: `std`,
//! `tracing`, `lettre` (SMTP).
//!
//! With `--smtp-url` a message goes through that relay (lettre's blocking `SmtpTransport`:
//! `smtp://host:25` plain, `smtp://host:587?tls=required` STARTTLS, `smtps://host:465`
//! implicit TLS, credentials as `user:password@`); the log then says only that it was sent.
//! Without one (the self-hosted default) the message, link included, is written to the log at
//! info level, which is where an operator finds it. Either way the last [`RECENT`] messages are
//! kept in memory (tests read links from there).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use lettre::message::Mailbox;
use lettre::{Message, SmtpTransport, Transport};

/// How many sent messages the outbox remembers.
pub const RECENT: usize = 64;

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    pub to: String,
    pub subject: String,
    pub body: String,
}

/// An SMTP relay and the sender address.
#[derive(Clone)]
struct Relay {
    transport: SmtpTransport,
    from: Mailbox,
}

/// Where messages go.
#[derive(Default)]
pub struct Outbox {
    relay: Option<Relay>,
    recent: Mutex<VecDeque<Mail>>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("smtp", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox that delivers through the SMTP relay at `url`, from `from`
    /// (e.g. `tollgate <noreply@example.com>`).
    ///
    /// # Errors
    /// A malformed URL or sender address, named.
    pub fn smtp(url: &str, from: &str) -> Result<Self, String> {
        let transport = SmtpTransport::from_url(url)
            .map_err(|e| format!("--smtp-url: {e}"))?
            .timeout(Some(std::time::Duration::from_secs(20)))
            .build();
        let from = from
            .parse()
            .map_err(|e| format!("--mail-from `{from}`: {e}"))?;
        Ok(Self {
            relay: Some(Relay { transport, from }),
            recent: Mutex::default(),
        })
    }

    /// Send a message. Through a relay, delivery runs on its own thread, so the request that
    /// sent it answers at once (and its timing says nothing about the relay); a delivery
    /// failure is logged as a warning. The message is in the outbox when this returns.
    pub fn send(&self, mail: Mail) {
        match &self.relay {
            None => {
                tracing::info!(to = %mail.to, subject = %mail.subject, "e-mail (no SMTP relay configured):\n{}", mail.body);
            }
            Some(relay) => {
                let (relay, m) = (relay.clone(), mail.clone());
                std::thread::spawn(move || match deliver(&relay, &m) {
                    Ok(()) => tracing::info!(to = %m.to, subject = %m.subject, "e-mail sent"),
                    Err(e) => {
                        tracing::warn!(to = %m.to, subject = %m.subject, error = %e, "e-mail not sent");
                    }
                });
            }
        }
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(mail);
    }

    /// The messages sent to `to`, oldest first.
    pub fn sent_to(&self, to: &str) -> Vec<Mail> {
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|m| m.to == to)
            .cloned()
            .collect()
    }
}

fn deliver(relay: &Relay, mail: &Mail) -> Result<(), String> {
    let to: Mailbox = mail.to.parse().map_err(|e| format!("recipient: {e}"))?;
    let message = Message::builder()
        .from(relay.from.clone())
        .to(to)
        .subject(mail.subject.clone())
        .body(mail.body.clone())
        .map_err(|e| e.to_string())?;
    relay
        .transport
        .send(&message)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
