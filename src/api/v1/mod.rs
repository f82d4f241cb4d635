//! The `/v1` endpoints, one unit per endpoint group: `chat` (chat completions), `responses`
//! (the Responses API), `audio` (transcriptions, translations, speech), `models` (the price
//! list and `/health`). No unit uses another; what they share is in `api::shared`.

pub mod audio;
pub mod chat;
pub mod models;
pub mod responses;
