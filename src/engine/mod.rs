//! Inference: turns chat messages into a stream of text with candle, and texts into embedding
//! vectors (`embed`).
//!
//! Owns: weight loading (GGUF files and Hugging Face safetensors checkpoints), tokenizers (built
//! from GGUF metadata or read from `tokenizer.json`), chat templates, the packed batched
//! forward, sampling, stop matching, the scheduler thread, and embedding encoders. May use: `candle_core`,
//! `candle_nn`, `tokenizers`, `minijinja`, and `crate::catalog` for the model list.
//! Never: HTTP, SQL or money (`api`, `ledger`, `billing`).

pub mod constrain;
pub mod embed;
pub mod fake;
pub mod kernels;
pub mod model;
pub mod perplexity;
pub mod runtime;
pub mod text;
pub mod vision;
pub mod weights;

pub use runtime::candle_engine::{CandleEngine, EngineConfig};
pub use runtime::choices::ChoiceEvents;
pub use runtime::sampler::{SamplingParams, TokenLogprob};
pub use runtime::spec_state::WEIGHT_READ_ROWS;
pub use text::chat::{
    ChatInput, ChatMessage, ContentPart, InputImage, OutputConstraint, Role, TextPrompt, ToolCall,
    ToolChoice, ToolSpec,
};
pub use text::tokenizer::TokenText;

use std::sync::Arc;

/// A rendered and tokenized prompt, ready to submit.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// The catalogue id of the model that will run it.
    pub model: String,
    /// Prompt token ids (BOS included where the model wants one).
    pub token_ids: Vec<u32>,
    /// The model's context length in tokens.
    pub context_length: usize,
    /// The compiled output constraint (`response_format`, tool calls), if any.
    pub grammar: Option<Box<constrain::grammar::Grammar>>,
    /// Tokens never sampled (the call trigger under `tool_choice: "none"`).
    pub banned_tokens: Vec<u32>,
    /// How to read tool calls back out of the text; `None` when tools are off.
    pub tool_syntax: Option<constrain::tools::ToolSyntax>,
    /// Token ids the model's vocabulary has (special tokens included), for checking
    /// `logit_bias`; `None` when the engine has no vocabulary (the fake engine).
    pub vocab_size: Option<usize>,
    /// How the generation thinks (`text::reasoning`); `None` when it does not.
    pub reasoning: Option<text::reasoning::Reasoning>,
    /// The image rows that replace runs of `token_ids` (one entry per run, in order).
    pub images: Vec<PromptImage>,
    /// The images whose rows `images` still waits for: `Engine::encode_images` fills them
    /// after the hold and clears this; `submit` refuses a prompt that still has any.
    pub pending_images: Option<vision::PendingImages>,
    /// The request's predicted output (OpenAI's `prediction`), tokenized: speculative
    /// decoding drafts from it (`runtime::speculate`). Empty when none was given.
    pub prediction: Vec<u32>,
}

/// A run of image tokens in a prompt and the rows that replace their embeddings.
#[derive(Debug, Clone)]
pub struct PromptImage {
    /// Index in `Prompt::token_ids` of the run's first token.
    pub at: usize,
    /// The run's tokens.
    pub len: usize,
    /// `[len][hidden]` f32; empty until `Engine::encode_images`.
    pub rows: Arc<[f32]>,
    /// The run's tokens attend to each other both ways (Gemma 3).
    pub bidirectional: bool,
    /// The run as a grid this many tokens wide, for multimodal RoPE (Qwen2.5-VL:
    /// `model::mrope_position`); `None` where positions are token indices.
    pub cols: Option<usize>,
    /// A hash of the image's rows, so the prefix cache never takes one image's KV rows for
    /// another's (`Prompt::cache_key`).
    pub hash: u64,
}

impl PromptImage {
    /// The run's positions in the prompt.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.at..self.at + self.len
    }
}

impl Prompt {
    /// The ids the prefix cache keys this prompt by: `token_ids`, with each image token
    /// replaced by an id above any vocabulary's (bit 31 set) drawn from its image's hash and
    /// its place in the run, so equal images share cached KV rows and different ones do not.
    pub fn cache_key(&self) -> std::borrow::Cow<'_, [u32]> {
        if self.images.is_empty() {
            return std::borrow::Cow::Borrowed(&self.token_ids);
        }
        let mut key = self.token_ids.clone();
        for image in &self.images {
            for (i, k) in image.range().enumerate() {
                if let Some(slot) = key.get_mut(k) {
                    let mixed = image.hash ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    *slot = 0x8000_0000 | ((mixed ^ (mixed >> 32)) as u32 & 0x7FFF_FFFF);
                }
            }
        }
        std::borrow::Cow::Owned(key)
    }
}

impl Prompt {
    /// A plain prompt: no constraint, no tools.
    pub fn plain(model: &str, token_ids: Vec<u32>, context_length: usize) -> Self {
        Self {
            model: model.to_owned(),
            token_ids,
            context_length,
            grammar: None,
            banned_tokens: Vec::new(),
            tool_syntax: None,
            vocab_size: None,
            reasoning: None,
            images: Vec::new(),
            pending_images: None,
            prediction: Vec::new(),
        }
    }
}

/// How to read a generation's text back: tool calls out of the answer, and the thinking before
/// it. Taken from the `Prompt` (`Prompt::output_syntax`) before it is submitted.
#[derive(Debug, Clone, Default)]
pub struct OutputSyntax {
    /// `None`: tools are off, the answer is all content.
    pub tools: Option<constrain::tools::ToolSyntax>,
    /// `None`: no thinking to split off.
    pub reasoning: Option<text::reasoning::Reasoning>,
}

impl Prompt {
    /// How to read this prompt's generations back.
    pub fn output_syntax(&self) -> OutputSyntax {
        OutputSyntax {
            tools: self.tool_syntax.clone(),
            reasoning: self.reasoning,
        }
    }
}

/// Who a generation is for: the account that pays and the API key that asked (`None` on the
/// playground's session path). The scheduler shares its queue, its batch and each step's
/// prefill between tenants by these (`runtime::tenants`); `Tenant::default()` (account 0, no
/// key) is one tenant for work of nobody in particular (benches, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tenant {
    pub account: crate::ids::AccountId,
    pub key: Option<crate::ids::KeyId>,
}

impl Default for Tenant {
    fn default() -> Self {
        Self {
            account: crate::ids::AccountId(0),
            key: None,
        }
    }
}

/// A generation job for the scheduler.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// Request id (`req_...`), for logs.
    pub request_id: String,
    /// Who it is for (fair shares of the queue, the batch and prefill).
    pub tenant: Tenant,
    pub prompt: Prompt,
    pub sampling: SamplingParams,
    /// Most new tokens to generate (already checked against the context).
    pub max_new_tokens: usize,
    /// Up to 4 stop strings; matched across token boundaries and never emitted.
    pub stop: Vec<String>,
    /// Choices to generate (OpenAI's `n`; 0 counts as 1). The prompt is prefilled once and
    /// its KV cache shared by every choice (`model::kv_cache`); each choice then samples on
    /// its own, choice `i` with seed `sampling.seed + i` when a seed is given.
    pub n: usize,
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS, end-of-turn token, or a stop string.
    Stop,
    /// `max_new_tokens` reached.
    Length,
    /// The receiver went away (client disconnected) before the end.
    Cancelled,
    /// The forward pass failed; the message is for logs.
    Failed(String),
    /// Ended in the queue without running: the server is stopping (`Engine::drain`). Nothing
    /// was read, so nothing is charged.
    NotRun,
}

/// The authoritative result of a generation: exact token counts, also when cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Tokens in the prompt (input tokens); 0 for a job that ended before it was admitted
    /// (its client left while it waited, or the server stopped): nothing of it was read.
    pub prompt_tokens: usize,
    /// Of `prompt_tokens`, those whose KV cache came from the prefix cache instead of being
    /// prefilled for this request (OpenAI's `cached_tokens`).
    pub cached_tokens: usize,
    /// Output tokens: those generated and sampled, including a final EOS, plus
    /// `rejected_prediction_tokens` (OpenAI counts and bills those as output too).
    pub completion_tokens: usize,
    /// Of `completion_tokens`, the thinking ones, `<think>` through `</think>`
    /// (`text::reasoning::ReasoningCounter`; OpenAI's `reasoning_tokens`).
    pub reasoning_tokens: usize,
    /// Tokens of the request's `prediction` accepted as output by speculative decoding
    /// (`runtime::speculate`; OpenAI's `accepted_prediction_tokens`).
    pub accepted_prediction_tokens: usize,
    /// Tokens of the request's `prediction` computed as drafts and rejected (OpenAI's
    /// `rejected_prediction_tokens`); included in `completion_tokens`.
    pub rejected_prediction_tokens: usize,
    pub finish: FinishReason,
}

/// Events sent to the request while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// Prefill finished; the first token follows (used for keep-alive decisions).
    Started,
    /// New text, always whole UTF-8 characters, never part of a stop string.
    Delta(String),
    /// A sampled token's log-probability, when the request asked for them
    /// (`SamplingParams::logprobs`); sent before the `Delta` that carries its text. Not sent for
    /// a stop token.
    Logprob(TokenLogprob),
}

/// Handle to one choice of a running generation. Dropping `events` cancels it before the next
/// step.
pub struct Generation {
    pub events: tokio::sync::mpsc::UnboundedReceiver<GenerationEvent>,
    /// Resolves exactly once, even if `events` was dropped: the source of truth for billing.
    pub outcome: tokio::sync::oneshot::Receiver<Outcome>,
}

/// Live counters of one model's scheduler.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ModelStats {
    pub model: String,
    /// Sequences in the running batch (prefilling or decoding).
    pub running: usize,
    /// Sequences admitted but not yet scheduled.
    pub waiting: usize,
    /// Images encoded since the model was loaded (`Engine::encode_images`).
    pub images_encoded: u64,
    /// Draft tokens speculative decoding verified since the model was loaded (from requests'
    /// `prediction`, prompt lookup and the draft model), and those accepted as output.
    pub draft_tokens: u64,
    pub accepted_draft_tokens: u64,
}

/// What an engine knows of a loaded model.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub id: String,
    /// Context length in tokens (the smaller of the catalogue's and the file's).
    pub context_length: usize,
}

/// Engine errors the caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("model `{0}` is not loaded")]
    ModelNotLoaded(String),
    #[error("the generation queue is full")]
    Overloaded,
    /// The tenant's share of the engine is taken: its account's queued jobs, or its key's
    /// queued and running sequences, are at `limit` (`runtime::tenants::TenantLimits`).
    #[error("{scope} has {limit} requests waiting or running, its most")]
    TenantLimit { scope: &'static str, limit: usize },
    #[error("the engine is shut down")]
    ShutDown,
    #[error("failed to render the chat template: {0}")]
    Template(String),
    #[error("failed to tokenize: {0}")]
    Tokenize(String),
    /// The prompt has more than `limit` tokens (the model's context less one); the count
    /// stopped at `counted`.
    #[error("the prompt has more than {limit} tokens (at least {counted})")]
    PromptTooLong { limit: usize, counted: usize },
    #[error("the output constraint does not compile: {0}")]
    Grammar(String),
    /// A fill-in-the-middle prompt (`suffix`) for a model whose vocabulary has no FIM tokens.
    #[error("the model's vocabulary has no fill-in-the-middle tokens")]
    NoFim,
    /// Thinking asked of a model that does not think (no `<think>` in its template and
    /// vocabulary).
    #[error("the model does not think")]
    NoReasoning,
    /// Image `index` of the request (`ChatInput::images`) cannot be read or is too large.
    #[error("image {index}: {message}")]
    Image {
        index: usize,
        message: String,
        /// Over the size limits (rather than unreadable).
        too_large: bool,
    },
    /// Images sent to a model without a vision part (the catalogue lets only image models
    /// through, so this is a model whose vision part is missing).
    #[error("the model does not read images")]
    NoVision,
    #[error("failed to load model `{model}`: {message}")]
    Load { model: String, message: String },
    #[error("cannot load a model of {needed} bytes: the memory budget of {budget} bytes is held by busy models")]
    NoRoom { needed: u64, budget: u64 },
    #[error("no weights could be found or fetched for model `{model}`; tried: {}", tried.join("; "))]
    Unavailable { model: String, tried: Vec<String> },
    #[error("the prompt's images were not encoded before it was submitted")]
    Unencoded,
    /// The rendered prompt has no tokens (an empty completions `prompt` for a model that adds
    /// no BOS): nothing to prefill.
    #[error("the prompt has no tokens")]
    EmptyPrompt,
    /// The server's image decode budget (`vision::budget`) had no room within its wait.
    #[error("{0}")]
    ImagesBusy(String),
    #[error("the vision encoder failed: {0}")]
    Encoder(String),
}

/// The seam between the HTTP layer and inference. `CandleEngine` runs real models; `FakeEngine`
/// is a deterministic fake for HTTP and ledger tests.
pub trait Engine: Send + Sync + 'static {
    /// Models this engine can run now.
    fn loaded(&self) -> Vec<LoadedModel>;
    /// Make `model` ready to run: nothing when it is loaded; otherwise (an engine that loads
    /// on demand) load it, which may first fetch its weights from the hub and evict idle
    /// models. Blocking, seconds to minutes: call from a blocking task, before `prepare`.
    ///
    /// # Errors
    /// `ModelNotLoaded` (not in the catalogue, or this engine does not load on demand),
    /// `Unavailable` (no weights found or fetched), `Load`, `NoRoom`, `ShutDown`.
    fn load(&self, model: &str) -> Result<(), EngineError>;
    /// Render the chat template (with the tools), tokenize, and compile the output constraint
    /// for a loaded model (`load`). CPU-bound (milliseconds): call from a blocking task.
    ///
    /// # Errors
    /// `ModelNotLoaded`, `Template`, `NoFim`, `NoReasoning`, `PromptTooLong` (at least the model's context: refused
    /// before the rest is tokenized), `Tokenize`, `Grammar`, `Image` (an image that cannot be
    /// read or is too large), `NoVision`.
    fn prepare(&self, model: &str, input: &ChatInput) -> Result<Prompt, EngineError>;
    /// The fewest prompt tokens `input` can have on a loaded `model`, whatever its images turn
    /// out to be (each counted as its family's cheapest; their bytes are not read, so images
    /// not fetched yet may be empty placeholders; only their number counts): for the balance and
    /// context checks of a request whose images are not fetched yet. CPU-bound like
    /// `prepare`. The default is `prepare`'s count (an engine whose prompts carry no images).
    ///
    /// # Errors
    /// As `prepare`, but for errors of the images themselves.
    fn prompt_floor(&self, model: &str, input: &ChatInput) -> Result<usize, EngineError> {
        self.prepare(model, input).map(|p| p.token_ids.len())
    }
    /// Prompt tokens of `messages` exactly as `prepare` counts them, but only when `model` is
    /// loaded now: never loads a model and does not count as a use (for cost estimates).
    /// `None` when the model is not loaded or its template fails. CPU-bound like `prepare`.
    fn count_prompt_tokens(&self, model: &str, input: &ChatInput) -> Option<usize>;
    /// Run the vision encoder over `prompt`'s pending images (`Prompt::pending_images`) and
    /// give its image runs their rows; nothing when it has none. The expensive part of an image
    /// request (seconds for a large image on a CPU), so the caller runs it once the request's
    /// money is held. Blocking: call from a blocking task.
    ///
    /// # Errors
    /// `ModelNotLoaded` (evicted since `prepare`), `NoVision`, `Image` (pixels that cannot be
    /// decoded after a readable header), `ImagesBusy` (no room in the decode budget in time),
    /// `Encoder`.
    fn encode_images(&self, prompt: &mut Prompt) -> Result<(), EngineError>;
    /// Queue a generation; never blocks. Returns one handle per choice (`request.n`, at least
    /// one), in choice order; each choice's outcome counts the whole prompt, which was
    /// prefilled once for all of them.
    ///
    /// # Errors
    /// `Overloaded` when the model's admission queue is full; `ModelNotLoaded`; `ShutDown`;
    /// `Unencoded` when the prompt still has pending images.
    fn submit(&self, request: GenerateRequest) -> Result<Vec<Generation>, EngineError>;
    /// Scheduler counters per model.
    fn stats(&self) -> Vec<ModelStats>;
    /// Stop for a clean shutdown: refuse new jobs from now on (`ShutDown`) and end every
    /// queued one unrun (`FinishReason::NotRun`: its hold is voided); running sequences go on
    /// to their normal end. Never blocks. The default does nothing (an engine without a queue).
    fn drain(&self) {}
    /// End every running sequence now as if its client had left (`Cancelled`: the tokens so
    /// far are charged), for a shutdown whose drain time is over. Never blocks.
    fn cancel_running(&self) {}
    /// Models being fetched or loaded now (`weights::progress`); none for an engine that
    /// loads nothing on demand.
    fn preparing(&self) -> Vec<weights::progress::Preparation> {
        Vec::new()
    }
}

/// Shared engine handle.
pub type SharedEngine = Arc<dyn Engine>;
