//! What the `/v1` endpoints, the dashboard and the router share: only what two or more of them
//! use (an endpoint's own parser and OpenAPI types live in its folder, `api/v1/<endpoint>/`).
//! Nothing here uses an endpoint file (`v1/*`, `dashboard/*`, `web/`, `metrics.rs`), and the
//! files stand on floors that `scripts/ci/check-layers` checks (`SHARED_FLOORS`, from `codes`
//! and `schema` up to `text`).
//!
//! `state` (what handlers share), `error` (the `/v1` envelope and its table), `schema` (wire
//! shapes two endpoints send, and their OpenAPI schemas), `limits` (every rate limit), `session`
//! (session cookies and the same-site rule), `access` (who pays), `paid` (the opening of every
//! paid request, around `metering`), `text` (the text pipeline: a parsed request to metering,
//! in the endpoint's field names, and the one `respond` path after admission), `request`
//! (chat's parser, the validators and bounds other parsers use), `images` (a request's
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
