//! Tool calling: how each model family is told about tools and the format its calls take
//! (`text::tool_format`, re-exported here), the grammar that makes a call well formed (`constrain`, `schema`, and `lead` for
//! calls written as bare JSON), and turning generated text back into calls (`parse`, `header`).
//!
//! A facade: declarations and re-exports only.

mod constrain;
mod header;
pub mod lead;
pub mod parse;
mod schema;

pub use crate::engine::text::tool_format::{python_json, PyFormatter, ToolFormat, ToolSyntax};
