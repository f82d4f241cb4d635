//! Outgoing e-mail (verification and password-reset links). Owns: the outbox. May use: `std`,
//! `tracing`. Without an SMTP relay configured (the self-hosted default) a message is written
//! to the log at info level, which is where an operator finds the link; the last
//! [`RECENT`] messages are also kept in memory (tests read links from there).
//!
//! Not done yet (issue 6): delivery through SMTP (`--smtp-url`, the `lettre` crate).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// How many sent messages the outbox remembers.
pub const RECENT: usize = 64;

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    pub to: String,
    pub subject: String,
    pub body: String,
}

/// Where messages go.
#[derive(Debug, Default)]
pub struct Outbox {
    recent: Mutex<VecDeque<Mail>>,
}

impl Outbox {
    /// Send (log) a message.
    pub fn send(&self, mail: Mail) {
        tracing::info!(to = %mail.to, subject = %mail.subject, "e-mail (no SMTP relay configured):\n{}", mail.body);
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
