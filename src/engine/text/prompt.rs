//! A model's prompt format: its tokenizer and chat template, and the prompt ids of a
//! conversation (the template rendered, tools through the model's own template when it
//! supports them, else through the built-in layer of `tools`; BOS where the model wants one).
//! The engine builds every request's prompt with [`prompt_ids`]; token counters open a
//! [`PromptFormat`] from a GGUF file's metadata without loading weights, so a count is the same
//! whether or not the model is loaded.
//! May use: tokenizer, template, tools, gguf. Never: the scheduler, HTTP.

use std::path::Path;

use candle_core::Device;

use super::chat::{ChatInput, OutputConstraint};
use super::reasoning::{Reasoning, THINK_CLOSE};
use super::template::ChatTemplate;
use super::tokenizer::{EncodeError, ModelTokenizer};
use super::tool_format::ToolFormat;
use crate::engine::error::EngineError;
use crate::engine::weights::gguf::GgufFile;
use crate::engine::weights::store::TensorStore;

/// The prompt ids of `input` for model `id` (its catalogue id chooses the tool-call format),
/// if there are at most `limit` of them (BOS included): a longer prompt is refused after
/// tokenizing about `limit` tokens of it (`ModelTokenizer::encode_within`).
///
/// # Errors
/// As [`rendered_prompt`].
pub fn prompt_ids(
    id: &str,
    tokenizer: &ModelTokenizer,
    template: &ChatTemplate,
    input: &ChatInput,
    limit: usize,
) -> Result<Vec<u32>, EngineError> {
    rendered_prompt(id, tokenizer, template, input, limit).map(|(ids, _)| ids)
}

/// [`prompt_ids`], and how the generation reasons (`None`: the model does not think, or not
/// this time).
///
/// A raw `input.text` is used as it is, without the template (with a suffix: laid out in the
/// vocabulary's FIM tokens). For a thinking model (`Reasoning::of_model`) the template's
/// `enable_thinking` is `input.thinking` (default on), off under a constraint that starts at
/// the first token; where the template has no switch and opens the thinking itself, switching
/// it off closes the tag after it (`<think>\n\n</think>\n\n`, as Qwen3's template writes).
///
/// # Errors
/// `Template` (the template refuses the messages), `NoFim` (a suffix for a vocabulary without
/// FIM tokens), `NoReasoning` (`thinking: Some(true)` for a model that does not think),
/// `PromptTooLong`, `Tokenize`.
pub fn rendered_prompt(
    id: &str,
    tokenizer: &ModelTokenizer,
    template: &ChatTemplate,
    input: &ChatInput,
    limit: usize,
) -> Result<(Vec<u32>, Option<Reasoning>), EngineError> {
    rendered_prompt_with(id, tokenizer, template, input, limit, &|text| Ok(text))
}

/// [`rendered_prompt`] with the rendered text passed through `expand` before it is tokenized
/// (images: each placeholder the template wrote becomes the image's tokens).
///
/// # Errors
/// As [`rendered_prompt`], and `expand`'s.
pub fn rendered_prompt_with(
    id: &str,
    tokenizer: &ModelTokenizer,
    template: &ChatTemplate,
    input: &ChatInput,
    limit: usize,
    expand: &dyn Fn(String) -> Result<String, EngineError>,
) -> Result<(Vec<u32>, Option<Reasoning>), EngineError> {
    let (text, reasoning) = prompt_text(id, tokenizer, template, input)?;
    let text = expand(text)?;
    let bos = tokenizer.bos_id.filter(|_| tokenizer.add_bos);
    let room = limit.saturating_sub(usize::from(bos.is_some()));
    let mut ids = tokenizer.encode_within(&text, room).map_err(|e| match e {
        EncodeError::TooLong { counted, .. } => EngineError::PromptTooLong {
            limit,
            counted: counted + usize::from(bos.is_some()),
        },
        EncodeError::Failed(m) => EngineError::Tokenize(m),
    })?;
    if let Some(bos) = bos {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    if ids.len() > limit {
        return Err(EngineError::PromptTooLong {
            limit,
            counted: ids.len(),
        });
    }
    Ok((ids, reasoning))
}

/// The prompt's text and its reasoning spec (see [`rendered_prompt`]).
fn prompt_text(
    id: &str,
    tokenizer: &ModelTokenizer,
    template: &ChatTemplate,
    input: &ChatInput,
) -> Result<(String, Option<Reasoning>), EngineError> {
    if let Some(raw) = &input.text {
        let text = match &raw.suffix {
            None => raw.prompt.clone(),
            Some(suffix) => {
                let [pre, suf, mid] = fim_tokens(tokenizer).ok_or(EngineError::NoFim)?;
                format!("{pre}{}{suf}{suffix}{mid}", raw.prompt)
            }
        };
        return Ok((text, None));
    }
    let model = Reasoning::of_model(tokenizer, &template.text);
    if model.is_none() && input.thinking == Some(true) {
        return Err(EngineError::NoReasoning);
    }
    let forced = input
        .constraint
        .as_ref()
        .is_some_and(OutputConstraint::from_first_token);
    let thinking = input.thinking.unwrap_or(true) && !forced;
    let switch = model.is_some().then_some(thinking);
    let format = ToolFormat::for_model(id);
    let (bos, eos) = (&tokenizer.bos_text, &tokenizer.eos_text);
    let mut text = if format.template_supports(&template.text) {
        template.render_thinking(&input.messages, &input.tools, bos, eos, switch)
    } else {
        let folded = format.fold_messages(&input.messages, &input.tools);
        template.render_thinking(&folded, &[], bos, eos, switch)
    }
    .map_err(EngineError::Template)?;
    let Some(model) = model else {
        return Ok((text, None));
    };
    let spec = model.for_prompt(&text);
    if spec.is_some_and(|s| s.open_in_prompt) && !thinking {
        text.truncate(text.trim_end().len());
        text.push_str("\n\n");
        text.push_str(THINK_CLOSE);
        text.push_str("\n\n");
        return Ok((text, None));
    }
    Ok((text, spec.filter(|_| thinking)))
}

/// Fill-in-the-middle tokens (prefix, suffix, middle) of the code models' vocabularies:
/// Qwen2.5-Coder's, StarCoder's and CodeGemma's, and DeepSeek-Coder's (each model card's FIM
/// prompt format; laid out prefix-suffix-middle).
pub const FIM_TOKENS: [[&str; 3]; 3] = [
    ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
    ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
    [
        "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
        "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
        "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
    ],
];

/// The token ids of a predicted output (OpenAI's `prediction`), drafts for speculative
/// decoding: at most `limit` tokens (the model's context: more could never be used), encoded
/// without special tokens from the text's first `4 * limit` bytes (cut at a character
/// boundary; no token is shorter than a byte), so a long prediction costs no more to tokenize
/// than a prompt of the context's length.
///
/// # Errors
/// `Tokenize` when the tokenizer fails.
pub fn prediction_ids(
    tokenizer: &ModelTokenizer,
    text: &str,
    limit: usize,
) -> Result<Vec<u32>, EngineError> {
    let mut end = text.len().min(limit.saturating_mul(4));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut ids = tokenizer
        .encode(&text[..end])
        .map_err(|e| EngineError::Tokenize(e.to_string()))?;
    ids.truncate(limit);
    Ok(ids)
}

/// The first of `FIM_TOKENS` whose three tokens are all in `tokenizer`'s vocabulary.
pub fn fim_tokens(tokenizer: &ModelTokenizer) -> Option<[&'static str; 3]> {
    FIM_TOKENS.into_iter().find(|set| {
        set.iter()
            .all(|t| tokenizer.tokenizer.token_to_id(t).is_some())
    })
}

/// A GGUF file's tokenizer and chat template, read from its metadata (no weights).
pub struct PromptFormat {
    /// The file's tokenizer, as the engine builds it.
    pub tokenizer: ModelTokenizer,
    /// The file's chat template, or the built-in one that stands in for it.
    pub template: ChatTemplate,
}

impl PromptFormat {
    /// The tokenizer and template of an open GGUF file: the file's template, else the built-in
    /// `builtin` names (the catalogue's `chat_template`), else the architecture's default.
    ///
    /// # Errors
    /// Missing or unsupported tokenizer metadata, a template that does not compile.
    pub fn of_gguf(file: &GgufFile, builtin: Option<&str>) -> anyhow::Result<Self> {
        let tokenizer = ModelTokenizer::from_gguf(file)?;
        let arch = file.architecture()?;
        let own = file.string("tokenizer.chat_template").ok();
        let template = ChatTemplate::new(own, builtin.unwrap_or(&arch))?;
        Ok(Self {
            tokenizer,
            template,
        })
    }

    /// [`PromptFormat::of_gguf`] of the GGUF file at `path` (only its metadata is read).
    ///
    /// # Errors
    /// As `of_gguf`; an unreadable file.
    pub fn open(path: &Path, builtin: Option<&str>) -> anyhow::Result<Self> {
        Self::of_gguf(&GgufFile::open(path, &Device::Cpu)?, builtin)
    }

    /// The prompt ids of `input` for model `id`, as the engine builds them, if at most
    /// `limit`.
    ///
    /// # Errors
    /// As [`prompt_ids`].
    pub fn ids(&self, id: &str, input: &ChatInput, limit: usize) -> Result<Vec<u32>, EngineError> {
        prompt_ids(id, &self.tokenizer, &self.template, input, limit)
    }
}
