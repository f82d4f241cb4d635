//! Inference: turns chat messages into a stream of text with candle, and texts into embedding
//! vectors (`embed`).
//!
//! Owns: weight loading (GGUF files and Hugging Face safetensors checkpoints), tokenizers (built
//! from GGUF metadata or read from `tokenizer.json`), chat templates, the packed batched
//! forward, sampling, stop matching, the scheduler thread, and embedding encoders. May use: `candle_core`,
//! `candle_nn`, `tokenizers`, `minijinja`, and `crate::catalog` for the model list.
//! Never: HTTP, SQL or money (`api`, `ledger`, `billing`).
//!
//! This file is the face: it declares the rooms and re-exports what the rest of the crate uses;
//! it defines nothing. The rooms stand on floors, lowest first (scripts/ci/check-layers,
//! `ENGINE_FLOORS`): `error` (`EngineError`), `kernels`, `weights`, `text`, `constrain`,
//! `model`, `embed`, `vision`, `seam` (the `Engine` trait and its request and outcome types),
//! `runtime` (`CandleEngine`), then `fake` and `perplexity`. A room uses its own and lower
//! floors only, never this face.

pub mod constrain;
pub mod embed;
mod error;
pub mod fake;
pub mod kernels;
pub mod model;
pub mod perplexity;
pub mod runtime;
mod seam;
pub mod text;
pub mod vision;
pub mod weights;

pub use error::EngineError;
pub use runtime::candle_engine::{CandleEngine, EngineConfig};
pub use runtime::choices::ChoiceEvents;
pub use runtime::spec_state::WEIGHT_READ_ROWS;
pub use seam::{
    Engine, FinishReason, GenerateRequest, Generation, GenerationEvent, LoadedModel, ModelStats,
    Outcome, OutputSyntax, Prompt, SamplingParams, SharedEngine, Tenant, TokenLogprob,
};
pub use text::chat::{
    ChatInput, ChatMessage, ContentPart, InputImage, OutputConstraint, Role, TextPrompt, ToolCall,
    ToolChoice, ToolSpec,
};
pub use text::tokenizer::TokenText;

// The rest of the face: what the server, the CLI and MCP use of the rooms (scripts/ci/check-layers
// rule 5 refuses any path into a room from outside `engine`).
pub use constrain::grammar::{check as check_grammar, close_objects, GrammarSpec};
pub use constrain::tools::parse::{parse_all as parse_tool_calls, ToolCallParser, ToolEvent};
pub use embed::{
    truncate as truncate_embedding, weights_present as embedding_weights_present, EmbedError,
    EmbedInput, Embedder, EmbeddingEncoder, EmbeddingModel, FakeEncoder,
};
pub use fake::{FakeEngine, FakeFault};
pub use kernels::Isa;
pub use model::attention::{KvType, KvTypes};
pub use model::device_check::compare_paths as compare_kernel_paths;
pub use model::linear::KernelPath;
pub use perplexity::{model_file as perplexity_model_file, perplexity as measure_perplexity};
pub use text::languages::{
    measure_catalog as measure_languages, read_corpus, tokenizer_for, LanguageCost, ModelLanguages,
    TextTokenizer,
};
pub use text::prompt::PromptFormat;
pub use text::reasoning::{split_all as split_reasoning, Piece, ReasoningSplitter};
pub use vision::{ImageConfig, ImageLimits, PromptImage};
pub use weights::hub::warm as warm_hub;
pub use weights::resolve::{availability, fetch_hint};
