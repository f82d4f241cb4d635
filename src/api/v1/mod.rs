//! The `/v1` endpoints, one unit per endpoint group: `chat` (chat completions), `completions`
//! (legacy text completions, fill-in-the-middle), `responses`
//! (the Responses API), `audio` (transcriptions, translations, speech), `embeddings`,
//! `models` (the price list and `/health`). No unit uses another; what they share is in `api::shared`.
//! An endpoint's folder holds its handler (`mod.rs`), its request parser (`request.rs`), its
//! OpenAPI types (`doc.rs`) and its stream (`sse.rs`), as it needs them.
//!
//! Each route is registered here once, with its OpenAPI operation (utoipa-axum's `routes!`
//! reads the handler's `#[utoipa::path]`): `api::router` serves these routers and
//! `api::openapi` documents the same ones.

pub mod audio;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod models;
pub mod responses;

use axum::extract::DefaultBodyLimit;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use super::shared::state::AppState;

/// The largest multipart body of an upload route: the file limit and room for the form.
fn upload_limit() -> DefaultBodyLimit {
    DefaultBodyLimit::max(audio::transcriptions::MAX_FILE_BYTES + 64 * 1024)
}

/// The paid routes (an API key or the playground's session pays).
pub fn paid_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(chat::chat_completions))
        .routes(routes!(completions::completions))
        .routes(routes!(responses::create))
        .routes(routes!(responses::get, responses::delete))
        .routes(routes!(audio::transcriptions::transcriptions).layer(upload_limit()))
        .routes(routes!(audio::transcriptions::translations).layer(upload_limit()))
        .routes(routes!(audio::speech::create))
        .routes(routes!(embeddings::create))
}

/// The public routes (no key): the price list.
pub fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(models::list_models))
        .routes(routes!(models::get_model))
        .routes(routes!(models::get_languages))
}
