//! `AccountService` on a temporary ledger (`ledger::temp_ledger`: SQLite, or PostgreSQL with
//! `TOLLGATE_TEST_DB=postgres`), without HTTP: each rule the service owns, with the ledger's
//! books checked after. The dashboard's HTTP tests (tests/it/dashboard*.rs) cover the forms.

use std::sync::Arc;

use super::{AccountService, AccountsError, EmailLinks, KeyUpdate};
use crate::auth::session::SessionPolicy;
use crate::auth::{AuthError, Authenticator};
use crate::ids::AccountId;
use crate::ledger::{temp_ledger, Ledger};
use crate::mail::Outbox;
use crate::money::Micros;

const STARTER: Micros = Micros(2_000_000);

struct Rig {
    _dir: tempfile::TempDir,
    ledger: Arc<Ledger>,
    auth: Arc<Authenticator>,
    service: AccountService,
    outbox: Arc<Outbox>,
}

fn rig() -> Rig {
    let (dir, ledger) = temp_ledger();
    let ledger = Arc::new(ledger);
    let auth = Arc::new(Authenticator::new(ledger.clone()));
    let service = AccountService::new(ledger.clone(), auth.clone());
    Rig {
        _dir: dir,
        ledger,
        auth,
        service,
        outbox: Arc::new(Outbox::default()),
    }
}

impl Rig {
    fn links(&self) -> EmailLinks {
        EmailLinks {
            outbox: self.outbox.clone(),
            base: "http://127.0.0.1:1".into(),
        }
    }

    /// The token of the last link of `path` (`/verify`, `/reset`) mailed to `email`.
    fn token(&self, email: &str, path: &str) -> String {
        let mail = self
            .outbox
            .sent_to(email)
            .pop()
            .expect("a message was sent");
        let at = mail.body.find(&format!("{path}?token=")).expect("the link") + path.len() + 7;
        mail.body[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }

    /// A verified account of `email` with password `pw`.
    async fn verified(&self, email: &str, pw: &str) -> AccountId {
        let a = self
            .service
            .sign_up(email.into(), pw.into(), self.links())
            .await
            .unwrap();
        self.service
            .verify_email(self.token(email, "/verify"), STARTER)
            .await
            .unwrap();
        a.id
    }

    fn books_balance(&self) {
        assert!(
            self.ledger.check().unwrap().is_empty(),
            "ledger check failed"
        );
    }
}

#[tokio::test]
async fn sign_up_verify_and_sign_in_grant_the_starter_credit_once() {
    let r = rig();
    let a = r
        .service
        .sign_up("ada@example.com".into(), "correct horse".into(), r.links())
        .await
        .unwrap();
    assert!(!a.verified);
    let again = r
        .service
        .sign_up("ada@example.com".into(), "other pw 1".into(), r.links())
        .await;
    assert!(matches!(again, Err(AccountsError::EmailTaken)), "{again:?}");
    let early = r
        .service
        .sign_in("ada@example.com".into(), "correct horse".into())
        .await;
    assert!(
        matches!(early, Err(AccountsError::EmailNotVerified)),
        "{early:?}"
    );

    let token = r.token("ada@example.com", "/verify");
    r.service
        .verify_email(token.clone(), STARTER)
        .await
        .unwrap();
    let used = r.service.verify_email(token, STARTER).await;
    assert!(matches!(used, Err(AccountsError::BadToken)), "{used:?}");
    let signed = r
        .service
        .sign_in("ada@example.com".into(), "correct horse".into())
        .await
        .unwrap();
    assert_eq!(signed.id, a.id);
    assert_eq!(signed.balance_micros, STARTER, "the starter credit, once");

    for (email, pw) in [
        ("ada@example.com", "wrong horse"),
        ("nobody@example.com", "correct horse"),
    ] {
        let e = r.service.sign_in(email.into(), pw.into()).await;
        assert!(
            matches!(e, Err(AccountsError::InvalidCredentials)),
            "{email}: {e:?}"
        );
    }
    r.books_balance();
}

#[tokio::test]
async fn keys_need_a_confirmed_address_and_only_their_owner_revokes_them() {
    let r = rig();
    let unverified = r
        .service
        .sign_up("new@example.com".into(), "pw for new 1".into(), r.links())
        .await
        .unwrap()
        .id;
    let refused = r
        .service
        .create_key(unverified, "k".into(), KeyUpdate::default())
        .await;
    assert!(
        matches!(refused, Err(AccountsError::KeysNeedVerifiedEmail)),
        "{:?}",
        refused.err()
    );

    let owner = r.verified("owner@example.com", "pw for owner").await;
    let other = r.verified("other@example.com", "pw for other").await;
    let (secret, key) = r
        .service
        .create_key(owner, "ci".into(), KeyUpdate::default())
        .await
        .unwrap();
    let bearer = format!("Bearer {secret}");
    assert_eq!(
        r.auth.authenticate(Some(&bearer)).unwrap().account_id,
        owner
    );
    assert_eq!(r.service.keys(owner).await.unwrap().len(), 1);
    assert!(r.service.keys(other).await.unwrap().is_empty());

    let id = key.record.id;
    let stolen = r.service.revoke_key(other, id).await;
    assert!(
        matches!(stolen, Err(AccountsError::NoSuchKey)),
        "{:?}",
        stolen.err()
    );
    assert!(
        r.auth.authenticate(Some(&bearer)).is_ok(),
        "another account's revoke changes nothing"
    );
    r.service.revoke_key(owner, id).await.unwrap();
    let after = r.auth.authenticate(Some(&bearer));
    assert!(
        matches!(after, Err(AuthError::Revoked)),
        "the key cache is purged: {:?}",
        after.err()
    );
    r.books_balance();
}

#[tokio::test]
async fn a_new_session_ends_the_old_one_and_sign_out_everywhere_counts_them() {
    let r = rig();
    let a = r.verified("s@example.com", "pw for sess").await;
    let policy = SessionPolicy::default();
    let first = r.service.start_session(a, None).await.unwrap();
    let seen = r
        .service
        .resolve_session(policy, first.clone())
        .await
        .unwrap();
    assert_eq!(seen.map(|p| p.account_id), Some(a));
    let second = r
        .service
        .start_session(a, Some(first.clone()))
        .await
        .unwrap();
    assert_ne!(first, second, "a new id at every sign-in");
    assert!(r
        .service
        .resolve_session(policy, first)
        .await
        .unwrap()
        .is_none());
    let _third = r.service.start_session(a, None).await.unwrap();
    assert_eq!(r.service.end_all_sessions(a).await.unwrap(), 2);
    assert!(r
        .service
        .resolve_session(policy, second)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn adjustments_are_for_admins_and_never_overdraw() {
    let r = rig();
    let admin = r.verified("admin@example.com", "pw for admin").await;
    let user = r.verified("user@example.com", "pw for user1").await;
    let e = r
        .service
        .adjust(user, admin, Micros(1), "self-help".into())
        .await;
    assert!(matches!(e, Err(AccountsError::AdminOnly)), "{:?}", e.err());
    r.ledger.set_admin(admin, true).unwrap();
    let over = r
        .service
        .adjust(admin, user, Micros(-STARTER.0 - 1), "too much".into())
        .await;
    assert!(
        matches!(over, Err(AccountsError::WouldGoNegative { available }) if available == STARTER),
        "{:?}",
        over.err()
    );
    let credited = r
        .service
        .adjust(admin, user, Micros(500_000), "goodwill".into())
        .await
        .unwrap();
    assert_eq!(credited.balance_micros, Micros(STARTER.0 + 500_000));
    let missing = r
        .service
        .adjust(admin, AccountId(9_999), Micros(1), "ghost".into())
        .await;
    assert!(
        matches!(missing, Err(AccountsError::NoSuchAccount)),
        "{:?}",
        missing.err()
    );
    r.books_balance();
}

#[tokio::test]
async fn a_code_is_redeemed_once_and_deletion_needs_the_right_address() {
    let r = rig();
    let a = r.verified("r@example.com", "pw for redeem").await;
    r.ledger.insert_code("GIFT-ONE", Micros(750_000)).unwrap();
    let (credited, after) = r.service.redeem(a, "gift-one".into()).await.unwrap();
    assert_eq!(credited, Micros(750_000));
    assert_eq!(after.balance_micros, Micros(STARTER.0 + 750_000));
    let twice = r.service.redeem(a, "GIFT-ONE".into()).await;
    assert!(
        matches!(twice, Err(AccountsError::BadCode)),
        "{:?}",
        twice.err()
    );

    let wrong = r
        .service
        .delete_account(a, "someone@example.com".into())
        .await;
    assert!(
        matches!(wrong, Err(AccountsError::ConfirmationMismatch)),
        "{wrong:?}"
    );
    r.service
        .delete_account(a, " R@example.com ".into())
        .await
        .unwrap();
    let gone = r
        .service
        .sign_in("r@example.com".into(), "pw for redeem".into())
        .await;
    assert!(
        matches!(gone, Err(AccountsError::InvalidCredentials)),
        "{gone:?}"
    );
    r.books_balance();
}

#[tokio::test]
async fn a_password_reset_link_works_once_and_ends_the_sessions() {
    let r = rig();
    let a = r.verified("p@example.com", "old password").await;
    let policy = SessionPolicy::default();
    let cookie = r.service.start_session(a, None).await.unwrap();
    r.service
        .request_reset("p@example.com".into(), r.links())
        .await
        .unwrap();
    let token = r.token("p@example.com", "/reset");
    r.service
        .confirm_reset(token.clone(), "new password".into(), STARTER)
        .await
        .unwrap();
    let again = r
        .service
        .confirm_reset(token, "third password".into(), STARTER)
        .await;
    assert!(matches!(again, Err(AccountsError::BadToken)), "{again:?}");
    assert!(r
        .service
        .resolve_session(policy, cookie)
        .await
        .unwrap()
        .is_none());
    let old = r
        .service
        .sign_in("p@example.com".into(), "old password".into())
        .await;
    assert!(
        matches!(old, Err(AccountsError::InvalidCredentials)),
        "{old:?}"
    );
    let new = r
        .service
        .sign_in("p@example.com".into(), "new password".into())
        .await
        .unwrap();
    assert_eq!(
        new.balance_micros, STARTER,
        "a confirmed address gets no second starter credit"
    );
}
