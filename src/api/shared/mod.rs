//! What the `/v1` endpoints, the dashboard and the router share. Nothing here uses an
//! endpoint file (`v1/*`, `dashboard/*`, `web/`, `metrics.rs`).
//!
//! `state` (what handlers share), `error` (the `/v1` envelope and its table), `schema` (wire
//! shapes and their OpenAPI schemas), `limits` (every rate limit), `session` (session cookies
//! and the same-site rule), `access` (who pays), `paid` (the opening of every paid request,
//! around `metering`), `request` (parsing and bounding request bodies), `images` (a request's
//! images from its `data:` URLs), `image_fetch` (remote images, when the operator allows them), `completion` (chat
//! completion wire shapes, also rendered by the Responses API), `sse` (the framing every
//! streamed answer shares), `headers`, `cors`, `server` and `connections` (the HTTP layer's
//! limits).

pub mod access;
pub(crate) mod call;
pub mod codes;
pub(crate) mod completion;
pub(crate) mod connections;
pub(crate) mod cors;
pub mod error;
pub(crate) mod headers;
pub mod image_fetch;
pub(crate) mod images;
pub mod limits;
pub(crate) mod paid;
pub mod request;
pub mod schema;
pub mod server;
pub(crate) mod session;
pub(crate) mod sse;
pub mod state;
pub(crate) mod text;
