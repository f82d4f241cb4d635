//! The inference seam: what the server hands an engine (`Prompt`, `GenerateRequest`), what it
//! gets back (`Generation`, `Outcome`, `GenerationEvent`) and the `Engine` trait itself, which
//! `CandleEngine` (`runtime`) and `FakeEngine` (`fake`) implement. The floor above `vision`
//! and below `runtime` (scripts/ci/check-layers): it names the rooms' types, and only `runtime`,
//! `fake` and the face (`engine/mod.rs`) use it.

use std::sync::Arc;

use super::constrain;
use super::error::EngineError;
use super::text;
use super::text::chat::ChatInput;
use super::vision::{self, PromptImage};
use super::weights;

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

/// Sampling settings for one request, OpenAI semantics.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature in [0, 2]; 0 means greedy (argmax).
    pub temperature: f32,
    /// Nucleus sampling mass in (0, 1]; 1 disables it.
    pub top_p: f32,
    /// RNG seed; the same seed and request give the same output. `None` draws one.
    pub seed: Option<u64>,
    /// Subtracted once from the logit of every token already generated (OpenAI `presence_penalty`).
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of generated tokens (OpenAI `frequency_penalty`).
    pub frequency_penalty: f32,
    /// `Some(k)`: report each chosen token's log-probability and the `k` (0-20) most likely
    /// tokens at its step (OpenAI `logprobs` / `top_logprobs`); `None`: off.
    pub logprobs: Option<usize>,
    /// Keep only the `top_k` most likely tokens; 0 disables it (vLLM's and llama.cpp's
    /// `top_k`).
    pub top_k: usize,
    /// Drop tokens less likely than `min_p` times the most likely one, in [0, 1]; 0 disables it.
    pub min_p: f32,
    /// CTRL repetition penalty over prompt and output tokens, > 0; 1 disables it.
    pub repetition_penalty: f32,
    /// Added to the logits of these token ids (OpenAI `logit_bias`, each in [-100, 100]); the
    /// ids are below the model's vocabulary size (checked before submission).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logprobs: None,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
        }
    }
}

/// One generated token's log-probability and its step's most likely alternatives (OpenAI's
/// `logprobs.content[]` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token as text (its bytes decoded lossily: a token that is part of a UTF-8
    /// character shows U+FFFD) and its bytes.
    pub token: text::tokenizer::TokenText,
    /// Natural log of its probability (`sampler::logprobs`).
    pub logprob: f32,
    /// The most likely tokens at this step, most likely first.
    pub top: Vec<(text::tokenizer::TokenText, f32)>,
}
