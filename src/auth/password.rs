//! Passwords: argon2id with the `argon2` crate's defaults (m = 19 MiB, t = 2, p = 1: OWASP's
//! minimum for argon2id, Password Storage Cheat Sheet), stored as PHC strings. Hashing takes
//! tens of milliseconds: call from a blocking task.

use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;

/// Shortest accepted password, in characters (NIST SP 800-63B, 5.1.1.2).
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest accepted password, in bytes (bounds the hashing work per request).
pub const MAX_PASSWORD_BYTES: usize = 256;

/// Why a password cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PasswordError {
    #[error("the password must have at least {MIN_PASSWORD_CHARS} characters")]
    TooShort,
    #[error("the password must have at most {MAX_PASSWORD_BYTES} bytes")]
    TooLong,
    #[error("hashing failed: {0}")]
    Hash(String),
}

/// Check the length rules.
///
/// # Errors
/// `TooShort`, `TooLong`.
pub fn check_policy(password: &str) -> Result<(), PasswordError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(PasswordError::TooShort);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(PasswordError::TooLong);
    }
    Ok(())
}

/// Hash a password (policy checked first) with a fresh random salt; returns the PHC string
/// (`$argon2id$v=19$m=19456,t=2,p=1$...`).
///
/// # Errors
/// Policy errors; `Hash` if the OS random source or argon2 fails.
pub fn hash(password: &str) -> Result<String, PasswordError> {
    check_policy(password)?;
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Whether `password` matches the stored PHC string (parameters are read from the string).
/// A malformed stored string never matches.
pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Spend the same work as `verify` for an account that does not exist or has no password, so
/// response times do not reveal which e-mail addresses have accounts.
pub fn verify_dummy(password: &str) {
    static DUMMY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(phc) = DUMMY.get_or_init(|| hash("dummy-password-for-timing").ok()) {
        let _ = verify(password, phc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_argon2id_salted_and_verify() {
        let a = hash("correct horse").unwrap();
        let b = hash("correct horse").unwrap();
        assert!(a.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{a}");
        assert_ne!(a, b, "salted");
        assert!(verify("correct horse", &a));
        assert!(!verify("correct horsE", &a));
        assert!(!verify("correct horse", "not a phc string"));
        assert_eq!(hash("short"), Err(PasswordError::TooShort));
        assert_eq!(hash(&"x".repeat(257)), Err(PasswordError::TooLong));
    }
}
