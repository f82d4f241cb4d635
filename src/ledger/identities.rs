//! Accounts reached through an OpenID Connect provider, named by the provider's issuer and the
//! stable subject it gives the user (`sub`, OpenID Connect Core 1.0 section 5.7). The claims
//! arrive here already verified (by `auth::oidc`); this file decides which account they open.

use r2d2_sqlite::rusqlite::{params, OptionalExtension};

use super::accounts::insert_account;
use super::sessions::mark_verified;
use super::{now, AccountId, Ledger, LedgerError};

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

/// Which account an identity signs in to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySignIn {
    /// A verified account: start a session for it.
    Account(AccountId),
    /// An account whose address nobody has verified yet (the provider did not vouch for it):
    /// no session; a verification link must go to `email`.
    Unverified { account: AccountId, email: String },
}

impl Ledger {
    /// Resolve a provider-verified identity to an account, in one transaction:
    /// 1. an identity seen before opens its linked account;
    /// 2. otherwise, an account with the same address is linked to it, but only when the
    ///    provider verified the address (`UnverifiedLink` if not: whoever controls an
    ///    unverified claim must not take over an existing account);
    /// 3. otherwise a new account without a password is made and linked.
    ///
    /// An address the provider verified counts as verified here too: the account is marked so
    /// and, the first time only, granted `starter_micros` (as e-mail verification does).
    ///
    /// # Errors
    /// `UnverifiedLink`, database errors.
    pub fn sign_in_identity(
        &self,
        id: &ExternalIdentity,
        starter_micros: i64,
    ) -> Result<IdentitySignIn, LedgerError> {
        self.write(|tx| {
            let linked: Option<AccountId> = tx
                .query_row(
                    "SELECT account_id FROM identities WHERE issuer = ?1 AND subject = ?2",
                    params![id.issuer, id.subject],
                    |r| r.get(0),
                )
                .optional()?;
            let account = match linked {
                Some(a) => a,
                None => {
                    let existing: Option<AccountId> = tx
                        .query_row(
                            "SELECT id FROM accounts WHERE email = ?1",
                            [&id.email],
                            |r| r.get(0),
                        )
                        .optional()?;
                    let account = match existing {
                        Some(_) if !id.email_verified => {
                            return Err(LedgerError::UnverifiedLink(id.email.clone()))
                        }
                        Some(a) => a,
                        None => insert_account(tx, &id.email, None, false)?,
                    };
                    tx.execute(
                        "INSERT INTO identities (issuer, subject, account_id, created_at) VALUES (?1, ?2, ?3, ?4)",
                        params![id.issuer, id.subject, account, now()],
                    )?;
                    account
                }
            };
            let (email, verified): (String, bool) = tx.query_row(
                "SELECT email, verified_at IS NOT NULL FROM accounts WHERE id = ?1",
                [account],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            // The provider vouches only for the address it sent, not for one the account had.
            if verified || (id.email_verified && email == id.email) {
                mark_verified(tx, account, starter_micros)?;
                Ok(IdentitySignIn::Account(account))
            } else {
                Ok(IdentitySignIn::Unverified { account, email })
            }
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
        let IdentitySignIn::Account(a) = l
            .sign_in_identity(&id("s1", "n@example.com", true), 500)
            .unwrap()
        else {
            panic!("expected a verified account")
        };
        let again = l
            .sign_in_identity(&id("s1", "n@example.com", true), 500)
            .unwrap();
        assert_eq!(again, IdentitySignIn::Account(a));
        let acc = l.account(a).unwrap();
        assert_eq!(acc.balance_micros, 500, "starter granted once");
        assert!(l
            .login("n@example.com")
            .unwrap()
            .unwrap()
            .password_hash
            .is_none());
    }

    #[test]
    fn an_existing_address_links_only_when_the_provider_verified_it() {
        let (_d, l) = temp_ledger();
        let a = l
            .sign_up("p@example.com", "$argon2id$stub-hash-for-test")
            .unwrap();
        assert!(matches!(
            l.sign_in_identity(&id("s2", "p@example.com", false), 500),
            Err(LedgerError::UnverifiedLink(_))
        ));
        assert_eq!(
            l.sign_in_identity(&id("s2", "p@example.com", true), 500)
                .unwrap(),
            IdentitySignIn::Account(a.id)
        );
        // Linked now: the subject opens it even if the address claim changes later.
        assert_eq!(
            l.sign_in_identity(&id("s2", "other@example.com", true), 500)
                .unwrap(),
            IdentitySignIn::Account(a.id)
        );
        assert_eq!(l.account(a.id).unwrap().balance_micros, 500);
    }

    #[test]
    fn an_unverified_new_address_needs_the_e_mail_link() {
        let (_d, l) = temp_ledger();
        let out = l
            .sign_in_identity(&id("s3", "u@example.com", false), 500)
            .unwrap();
        let IdentitySignIn::Unverified { account, email } = out else {
            panic!("expected an unverified account")
        };
        assert_eq!(email, "u@example.com");
        assert_eq!(l.account(account).unwrap().balance_micros, 0);
        assert!(!l.login("u@example.com").unwrap().unwrap().verified);
    }
}
