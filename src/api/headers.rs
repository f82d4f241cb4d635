//! Response header values shared by several handler files.

/// Content-Security-Policy of every page and asset (the web pages and the OIDC callback page).
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
