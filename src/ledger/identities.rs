//! Accounts reached through an OpenID Connect provider, named by the provider's issuer and the
//! stable subject it gives the user (`sub`, OpenID Connect Core 1.0 section 5.7). The claims
//! arrive here already verified (by `auth::oidc`); this file decides which account they open.

use super::db::args;

use super::accounts::insert_account;
use super::sessions::mark_verified;
use super::{now, AccountId, Ledger, LedgerError, Micros};

/// A user as an identity provider vouches for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalIdentity {
    /// The provider's issuer URL, as configured.
    pub issuer: String,
    /// The provider's subject identifier for the user (`sub`).
    pub subject: String,
    /// The user's address (normalized by the caller), from the ID token or the UserInfo endpoint.
    pub email: String,
    /// Whether the provider says it verified that address (`email_verified`).
    pub email_verified: bool,
}

impl Ledger {
    /// Resolve an identity to the account it signs in to, in one transaction:
    /// 1. an identity seen before opens its linked account (links are made only from addresses
    ///    the provider verified);
    /// 2. otherwise the provider must have verified the address (`UnverifiedIdentity` if not:
    ///    an unverified claim neither opens nor creates anything);
    /// 3. the account with that address is linked, or a new one without a password is made.
    ///
    /// The account counts as verified from then on and, the first time only, is granted
    /// `starter_micros` (as e-mail verification does). If the existing account was still
    /// unverified, whoever signed it up had not proven the address, while the provider has: its
    /// password is removed and its sessions and e-mailed links end, so a squatter who
    /// registered someone else's address cannot sign in to it afterwards.
    ///
    /// # Errors
    /// `UnverifiedIdentity`, database errors.
    pub fn sign_in_identity(
        &self,
        id: &ExternalIdentity,
        starter_micros: Micros,
    ) -> Result<AccountId, LedgerError> {
        self.write(|tx| {
            let linked: Option<AccountId> = tx
                .query_opt(
                    "SELECT account_id FROM identities WHERE issuer = ?1 AND subject = ?2",
                    args![id.issuer, id.subject],
                    |r| r.get(0),
                )?;
            if let Some(account) = linked {
                return Ok(account);
            }
            if !id.email_verified {
                return Err(LedgerError::UnverifiedIdentity(id.email.clone()));
            }
            let existing: Option<(AccountId, bool)> = tx
                .query_opt(
                    "SELECT id, verified_at IS NOT NULL FROM accounts WHERE email = ?1",
                    args![&id.email],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
            let account = match existing {
                Some((account, true)) => account,
                Some((account, false)) => {
                    let t = now();
                    tx.exec(
                        "UPDATE accounts SET password_hash = NULL WHERE id = ?1",
                        args![account],
                    )?;
                    tx.exec("DELETE FROM sessions WHERE account_id = ?1", args![account])?;
                    tx.exec(
                        "UPDATE email_tokens SET used_at = ?1 WHERE account_id = ?2 AND used_at IS NULL",
                        args![t, account],
                    )?;
                    account
                }
                None => insert_account(tx, &id.email, None, false)?,
            };
            tx.exec(
                "INSERT INTO identities (issuer, subject, account_id, created_at) VALUES (?1, ?2, ?3, ?4)",
                args![id.issuer, id.subject, account, now()],
            )?;
            mark_verified(tx, account, starter_micros)?;
            Ok(account)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::temp_ledger;

    fn id(sub: &str, email: &str, verified: bool) -> ExternalIdentity {
        ExternalIdentity {
            issuer: "https://idp.example".into(),
            subject: sub.into(),
            email: email.into(),
            email_verified: verified,
        }
    }

    #[test]
    fn a_new_verified_identity_makes_one_account_and_grants_once() {
        let (_d, l) = temp_ledger();
        let a = l
            .sign_in_identity(&id("s1", "n@example.com", true), Micros(500))
            .unwrap();
        assert_eq!(
            l.sign_in_identity(&id("s1", "n@example.com", true), Micros(500))
                .unwrap(),
            a
        );
        assert_eq!(
            l.account(a).unwrap().balance_micros,
            500,
            "starter granted once"
        );
        let login = l.login("n@example.com").unwrap().unwrap();
        assert!(login.verified && login.password_hash.is_none());
    }

    #[test]
    fn an_unverified_claim_opens_and_creates_nothing() {
        let (_d, l) = temp_ledger();
        assert!(matches!(
            l.sign_in_identity(&id("s3", "u@example.com", false), Micros(500)),
            Err(LedgerError::UnverifiedIdentity(_))
        ));
        assert!(l.login("u@example.com").unwrap().is_none());
        let a = l
            .sign_up("p@example.com", "$argon2id$stub-hash-for-test")
            .unwrap();
        assert!(l
            .sign_in_identity(&id("s2", "p@example.com", false), Micros(500))
            .is_err());
        assert_eq!(
            l.login("p@example.com")
                .unwrap()
                .unwrap()
                .password_hash
                .as_deref(),
            Some("$argon2id$stub-hash-for-test")
        );
        assert_eq!(l.account(a.id).unwrap().balance_micros, 0);
    }

    #[test]
    fn a_verified_claim_takes_an_unconfirmed_address_back_from_a_squatter() {
        let (_d, l) = temp_ledger();
        // Someone signed up with another person's address and a password, never confirmed.
        let squat = l.sign_up("v@example.com", "$argon2id$squatter").unwrap();
        l.insert_session(b"squatter-session-hash", squat.id)
            .unwrap();
        let a = l
            .sign_in_identity(&id("s4", "v@example.com", true), Micros(500))
            .unwrap();
        assert_eq!(a, squat.id);
        let login = l.login("v@example.com").unwrap().unwrap();
        assert!(login.verified);
        assert!(
            login.password_hash.is_none(),
            "the squatter's password is gone"
        );
        assert!(l.session(b"squatter-session-hash").unwrap().is_none());
        // A verified account keeps its password when it gains a linked identity.
        let owner = l.sign_up("o@example.com", "$argon2id$owner").unwrap();
        l.write(|tx| mark_verified(tx, owner.id, Micros(0)))
            .unwrap();
        l.sign_in_identity(&id("s5", "o@example.com", true), Micros(500))
            .unwrap();
        assert_eq!(
            l.login("o@example.com")
                .unwrap()
                .unwrap()
                .password_hash
                .as_deref(),
            Some("$argon2id$owner")
        );
    }
}
