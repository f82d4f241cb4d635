//! `estimate_cost` for chat models: prompt tokens counted the best way available, the cost by
//! the ledger's rule, the up-front hold a request would reserve, whether it fits the context,
//! and the language of the text (given, see `language`, or detected with `whatlang`).
//! May use: the catalogue, billing, the engine's token counter. Never: the protocol (`mod.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::data::McpData;
use super::language::language_code;
use super::tools::{MessageArg, COST_RULE, MAX_ESTIMATE_CHARS};
use crate::billing;
use crate::catalog::ModelEntry;
use crate::engine::{ChatInput, ChatMessage, Role};

/// Most of the text `whatlang` reads to detect its language (characters).
const DETECT_CHARS: usize = 2000;
/// Choices a request may ask for (`n`), as the API allows (`api::request::MAX_CHOICES`).
const MAX_CHOICES: u64 = 8;

/// The language of `chat`'s text (ISO 639-3, the measured code where there is one), when
/// `whatlang` is confident; read from the first [`DETECT_CHARS`] characters.
fn detect(chat: &[ChatMessage]) -> Option<String> {
    let text: String = chat
        .iter()
        .flat_map(|m| m.content.chars().chain(std::iter::once('\n')))
        .take(DETECT_CHARS)
        .collect();
    let info = whatlang::detect(&text)?;
    let code = info.lang().code();
    // whatlang names some languages by their macrolanguage (`ara`); the table maps those.
    info.is_reliable()
        .then(|| language_code(code).unwrap_or_else(|_| code.to_owned()))
}

/// The messages of `a`: `prompt` as a user message, then `messages`.
///
/// # Errors
/// An unknown role; more than [`MAX_ESTIMATE_CHARS`] characters.
fn chat_of(a: &EstimateArgs) -> Result<Vec<ChatMessage>, String> {
    let mut chat = Vec::new();
    if let Some(p) = &a.prompt {
        chat.push(ChatMessage::text(Role::User, p.clone()));
    }
    for msg in a.messages.iter().flatten() {
        let role = match msg.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(format!(
                    "Unknown role `{other}`: system, developer, user or assistant."
                ))
            }
        };
        chat.push(ChatMessage::text(role, msg.content.clone()));
    }
    let chars: usize = chat.iter().map(|c| c.content.chars().count()).sum();
    if chars > MAX_ESTIMATE_CHARS {
        return Err(format!("The prompt is {chars} characters; at most {MAX_ESTIMATE_CHARS} are counted. Give `prompt_tokens` instead."));
    }
    Ok(chat)
}

/// Whether a request fits model `id`'s context of `ctx` tokens, by the API's rule
/// (`api::paid::max_new_tokens`): the prompt must leave room, and a given `max_tokens` must fit
/// beside it; without `max_tokens` the output stops where the context ends. The warning says
/// what would happen otherwise.
fn context_check(
    id: &str,
    ctx: u64,
    prompt: u64,
    max_tokens: Option<u64>,
    expected: u64,
) -> (bool, Option<String>) {
    let refused = |asked: u64| {
        format!(
            "{prompt} prompt tokens plus {asked} output tokens exceed {id}'s context of {ctx} \
             tokens: the request would get 400 context_length_exceeded."
        )
    };
    match max_tokens {
        _ if prompt >= ctx => (false, Some(refused(max_tokens.unwrap_or(1)))),
        Some(max) if prompt.saturating_add(max) > ctx => (false, Some(refused(max))),
        None if prompt.saturating_add(expected) > ctx => (
            true,
            Some(format!(
                "Only {} output tokens fit in {id}'s context of {ctx} tokens after the prompt: \
                 a choice would stop there (finish_reason `length`).",
                ctx - prompt
            )),
        ),
        _ => (true, None),
    }
}

/// `estimate_cost` input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::optional_not_null)]
pub struct EstimateArgs {
    /// Model id.
    pub model: String,
    /// The prompt as one user message. Or give `messages`, or `prompt_tokens`.
    pub prompt: Option<String>,
    /// The prompt as chat messages.
    pub messages: Option<Vec<MessageArg>>,
    /// Prompt tokens when already known (nothing is counted then).
    pub prompt_tokens: Option<u64>,
    /// Expected completion tokens (default 256).
    pub expected_output_tokens: Option<u64>,
    /// The request's `max_tokens`: the up-front hold reserves that many output tokens per
    /// choice (without it, the rest of the context, as a request without `max_tokens` does).
    pub max_tokens: Option<u64>,
    /// The request's `n`, choices to generate (1 to 8, default 1): the prompt is billed once,
    /// the output once per choice.
    pub n: Option<u64>,
    /// Language of the text, ISO 639-1 or 639-3 (`ja`, `jpn`; a region such as `pt-BR` is
    /// ignored); detected from the text when left out. Used to estimate tokens from characters
    /// when the model's tokenizer is not on this server; its measured multiplier vs English is
    /// reported.
    pub language: Option<String>,
    /// Transcription models: seconds of audio (billed in whole seconds, rounded up).
    pub audio_seconds: Option<f64>,
    /// Speech models: the text to speak (its characters are billed). Embedding models: the
    /// text to embed (its tokens are billed).
    pub input: Option<String>,
}

/// `estimate_cost` output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Estimate {
    pub model: String,
    pub prompt_tokens: u64,
    /// Expected output tokens over all choices (`expected_output_tokens` per choice, at most
    /// `max_tokens` and what fits in the context).
    pub completion_tokens: u64,
    /// How `prompt_tokens` was obtained: `given`, `chat template + tokenizer` (exactly as a
    /// request is billed: the loaded model's, or read from its weights file on this server),
    /// `tokenizer` (a tokenizer alone, message text only: the chat template adds a few tokens
    /// per message), `measured characters per
    /// token`, or `4 characters per token` (a rough guess, nothing measured).
    pub counted_by: String,
    /// The tokenizer used, when one was (`gguf:<file>`, `tokenizer.json:<dir>`).
    pub tokenizer: Option<String>,
    /// Micro-USD, by the ledger's rule.
    #[schemars(with = "i64")]
    pub cost_micros: crate::money::Micros,
    /// `cost_micros` / 1e6 (a rendering).
    pub cost_usd: f64,
    pub input_micros_per_mtok: i64,
    pub output_micros_per_mtok: i64,
    pub rule: &'static str,
    /// The language counted with (ISO 639-3): given, or detected from the text.
    pub language: Option<String>,
    /// Whether `language` was detected from the text (not given).
    pub language_detected: bool,
    /// Tokens of the `language` vs English for the same text, as measured for this model.
    pub language_multiplier: Option<f64>,
    /// The model's context window, tokens.
    pub context_length: usize,
    /// Whether the prompt plus the output fits the context; a request that does not gets 400
    /// `context_length_exceeded`.
    pub fits_context: bool,
    /// What a request reserves from the balance before the model runs, micro-USD: every prompt
    /// token plus `max_tokens` output tokens per choice (the rest of the context without it). A
    /// balance below this gets 402 `insufficient_quota`; the unused part is released at the end.
    #[schemars(with = "i64")]
    pub hold_micros: crate::money::Micros,
    /// Why this estimate may not be what happens, if anything: a request past the context (400),
    /// or output cut where the context ends.
    pub warning: Option<String>,
    /// false: requests for this model get 403.
    pub commercial_use: bool,
    /// Transcription estimates: the billed seconds of audio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio_seconds: Option<u64>,
    /// Speech estimates: the billed characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_characters: Option<u64>,
}

impl McpData {
    /// `estimate_cost`. Blocking (may read a tokenizer from a weights file): call off the async
    /// workers.
    ///
    /// # Errors
    /// Unknown model, no prompt given, a bad role.
    pub fn estimate_cost(&self, a: &EstimateArgs) -> Result<Estimate, String> {
        if let Some(estimate) = self
            .estimate_audio(a)
            .or_else(|| self.estimate_embedding(a))
        {
            return estimate;
        }
        let m = self.model(&a.model)?;
        let choices = a.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&choices) {
            return Err(format!("`n` is 1 to {MAX_CHOICES}, as in a request."));
        }
        if a.max_tokens == Some(0) {
            return Err("`max_tokens` is at least 1, as in a request.".into());
        }
        let chat = chat_of(a)?;
        let given = a.language.as_deref().map(language_code).transpose()?;
        let detected = given.is_none().then(|| detect(&chat)).flatten();
        let language = given.clone().or(detected);
        let measured = self.languages.get(&m.id).and_then(|l| l.languages.as_ref());
        let multiplier = language
            .as_deref()
            .and_then(|code| measured.and_then(|l| l.get(code)))
            .map(|c| c.multiplier);
        let (prompt, counted_by, tokenizer) = match a.prompt_tokens {
            Some(n) => (n, "given".to_owned(), None),
            None if chat.is_empty() => {
                return Err("Give `prompt`, `messages` or `prompt_tokens`.".into())
            }
            None => self.count(m, &chat, language.as_deref().unwrap_or("eng")),
        };
        let ctx = u64::try_from(m.context_length).unwrap_or(u64::MAX);
        let room = ctx.saturating_sub(prompt);
        let expected = a.expected_output_tokens.unwrap_or(256);
        let (fits, warning) = context_check(&m.id, ctx, prompt, a.max_tokens, expected);
        // A choice stops at `max_tokens`, and without it where the context ends; a request that
        // would be refused is priced as asked (the warning says it would not run).
        let completion = match a.max_tokens {
            _ if !fits => expected,
            None => expected.min(room),
            Some(max) => expected.min(max),
        } * choices;
        let cost = billing::cost_micros(&m.pricing, prompt, 0, completion);
        let reserved = a.max_tokens.unwrap_or(room) * choices;
        let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Estimate {
            model: m.id.clone(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            counted_by,
            tokenizer,
            cost_micros: cost,
            cost_usd: cost.usd(),
            input_micros_per_mtok: m.pricing.input.0,
            output_micros_per_mtok: m.pricing.output.0,
            rule: COST_RULE,
            language_detected: given.is_none() && language.is_some(),
            language,
            language_multiplier: multiplier,
            context_length: m.context_length,
            fits_context: fits,
            hold_micros: billing::hold_micros(&m.pricing, as_usize(prompt), as_usize(reserved)),
            warning,
            commercial_use: m.commercial_use,
            audio_seconds: None,
            input_characters: None,
        })
    }

    /// Prompt tokens of `chat` for `m`, best source first: the engine (template and tokenizer,
    /// as billed) when the model is loaded; the same read from its GGUF file; its tokenizer;
    /// measured characters per token of `language`; 4 characters per token.
    fn count(
        &self,
        m: &ModelEntry,
        chat: &[ChatMessage],
        language: &str,
    ) -> (u64, String, Option<String>) {
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        if let Some(n) = self
            .engine
            .as_ref()
            .and_then(|e| e.count_prompt_tokens(&m.id, &ChatInput::messages(chat.to_vec())))
        {
            return (as_u64(n), "chat template + tokenizer".into(), None);
        }
        if let Some((source, n)) = self.template_count(m, &ChatInput::messages(chat.to_vec())) {
            return (as_u64(n), "chat template + tokenizer".into(), Some(source));
        }
        if let Some((source, n)) = self.tokenizer_count(m, chat) {
            return (as_u64(n), "tokenizer".into(), Some(source));
        }
        let chars: usize = chat.iter().map(|c| c.content.chars().count()).sum();
        let per_1000 = self
            .languages
            .get(&m.id)
            .and_then(|l| l.languages.as_ref())
            .and_then(|l| l.get(language))
            .map(|c| c.tokens_per_1000_chars);
        match per_1000 {
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            Some(r) => (
                (chars as f64 * r / 1000.0).ceil() as u64,
                format!("measured characters per token ({language})"),
                None,
            ),
            None => (
                as_u64(chars.div_ceil(4)),
                "4 characters per token".into(),
                None,
            ),
        }
    }
}
