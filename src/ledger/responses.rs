//! Stored Responses API objects (`POST /v1/responses` with `store: true`): the response body
//! as it was sent and the conversation it ends (chat-format messages, for
//! `previous_response_id`), kept 30 days and visible only to the account that made them.
//! An expired row reads as absent and is purged on the next save.

use super::db::args;

use super::{now, AccountId, Ledger, LedgerError};

/// How long a stored response is kept (seconds): 30 days, as OpenAI keeps them.
pub const RESPONSE_TTL_S: i64 = 30 * 24 * 3600;

/// One stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedResponse {
    /// The response object (JSON), as `GET /v1/responses/{id}` returns it.
    pub body: String,
    /// The whole conversation up to and including this response's output, as a JSON array of
    /// chat-format messages (instructions excluded, as OpenAI does not carry them over).
    pub conversation: String,
}

impl Ledger {
    /// Keep response `id` of `account` for `RESPONSE_TTL_S` (replacing one with the same id),
    /// and forget every expired one.
    ///
    /// # Errors
    /// Database errors.
    pub fn save_response(
        &self,
        id: &str,
        account: AccountId,
        saved: &SavedResponse,
    ) -> Result<(), LedgerError> {
        let t = now();
        self.write(|tx| {
            tx.exec("DELETE FROM stored_responses WHERE expires_at <= ?1", args![t])?;
            tx.exec(
                "INSERT INTO stored_responses (id, account_id, body, conversation, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, body = excluded.body,
                   conversation = excluded.conversation, created_at = excluded.created_at, expires_at = excluded.expires_at",
                args![id, account, saved.body, saved.conversation, t, t + RESPONSE_TTL_S],
            )?;
            Ok(())
        })
    }

    /// Response `id` if `account` stored it and it has not expired (another account's id reads
    /// as absent).
    ///
    /// # Errors
    /// Database errors.
    pub fn response(
        &self,
        id: &str,
        account: AccountId,
    ) -> Result<Option<SavedResponse>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                "SELECT body, conversation FROM stored_responses
                 WHERE id = ?1 AND account_id = ?2 AND expires_at > ?3",
                args![id, account, now()],
                |r| {
                    Ok(SavedResponse {
                        body: r.get(0)?,
                        conversation: r.get(1)?,
                    })
                },
            )?)
        })
    }

    /// Delete response `id` of `account`; whether there was one.
    ///
    /// # Errors
    /// Database errors.
    pub fn delete_response(&self, id: &str, account: AccountId) -> Result<bool, LedgerError> {
        self.write(|tx| {
            Ok(tx.exec(
                "DELETE FROM stored_responses WHERE id = ?1 AND account_id = ?2 AND expires_at > ?3",
                args![id, account, now()],
            )? > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Micros;

    #[test]
    fn a_response_is_seen_and_deleted_only_by_its_account() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(&dir.path().join("l.db")).unwrap();
        let a = l.create_account("a@x.com", Micros(0)).unwrap().id;
        let b = l.create_account("b@x.com", Micros(0)).unwrap().id;
        let saved = SavedResponse {
            body: "{}".into(),
            conversation: "[]".into(),
        };
        l.save_response("resp_1", a, &saved).unwrap();
        assert_eq!(l.response("resp_1", a).unwrap(), Some(saved));
        assert_eq!(l.response("resp_1", b).unwrap(), None);
        assert!(!l.delete_response("resp_1", b).unwrap());
        assert!(l.delete_response("resp_1", a).unwrap());
        assert_eq!(l.response("resp_1", a).unwrap(), None);
    }
}
