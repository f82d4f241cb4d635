//! Wire shapes of `POST /v1/completions` (OpenAI's legacy `text_completion` object and its
//! stream chunks), built from metering's `Charge` and the generated text. Typed; shared by the
//! handler and `sse`.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::api::shared::completion::{finish_reason, CompletionMeta};
use crate::api::shared::schema::{ServiceCost, Usage};
use crate::engine::{OutputSyntax, TokenLogprob};
use crate::metering::{Charge, Generated, StoredResponse};

/// A `text_completion`: the whole response, or one stream chunk (one choice, no usage).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextCompletion {
    /// `cmpl-` + 24 alphanumerics, the same in every chunk.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub choices: Vec<TextChoice>,
    /// Whole responses, and the last chunk with `stream_options.include_usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The cost: whole responses, and each choice's last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceCost>,
}

/// One choice: its text (after the prompt, with `echo`), log-probabilities and end.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextChoice {
    pub text: String,
    pub index: usize,
    pub logprobs: Option<TextLogprobs>,
    /// `stop` or `length`; `null` in chunks before the last.
    pub finish_reason: Option<&'static str>,
}

/// The legacy log-probability object: per generated token its text, log-probability, the most
/// likely tokens at its step (token to log-probability, `logprobs` of them), and its character
/// offset in `text`.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    #[schema(value_type = Vec<Object>)]
    pub top_logprobs: Vec<Map<String, Value>>,
    pub text_offset: Vec<usize>,
}

impl TextLogprobs {
    /// The entries of `tokens`, whose text starts at character `offset` of the choice's text.
    pub fn of(tokens: &[TokenLogprob], mut offset: usize) -> Self {
        let mut out = Self::default();
        for t in tokens {
            out.tokens.push(t.token.text.clone());
            out.token_logprobs.push(t.logprob);
            out.top_logprobs.push(
                t.top
                    .iter()
                    .map(|(tok, lp)| (tok.text.clone(), Value::from(*lp)))
                    .collect(),
            );
            out.text_offset.push(offset);
            offset += t.token.text.chars().count();
        }
        out
    }
}

/// What every part of one completion shares: its chat counterpart's identity (for `usage` and
/// `service`), the echoed prompt and whether log-probabilities were asked for.
#[derive(Debug, Clone)]
pub struct TextMeta {
    pub meta: CompletionMeta,
    /// The prompt, when `echo` puts it before each choice's text.
    pub echo: Option<String>,
    pub logprobs: bool,
}

impl TextMeta {
    /// A completion of `model` for request `request_id` (id `cmpl-...`).
    pub fn new(model: &str, request_id: &str, echo: Option<String>, logprobs: bool) -> Self {
        let mut meta = CompletionMeta::new(model, request_id, OutputSyntax::default());
        meta.id = format!("cmpl-{}", crate::api::shared::state::random_id(24));
        Self {
            meta,
            echo,
            logprobs,
        }
    }

    /// An object with `choices` and nothing else.
    pub fn object(&self, choices: Vec<TextChoice>) -> TextCompletion {
        TextCompletion {
            id: self.meta.id.clone(),
            object: "text_completion",
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: None,
            choices,
            usage: None,
            service: None,
        }
    }

    /// The whole response: each choice's text (after the echoed prompt) and log-probabilities.
    pub fn completion(&self, c: &Charge, generated: Vec<Generated>) -> StoredResponse {
        let echo = self.echo.as_deref().unwrap_or("");
        let choices = generated
            .into_iter()
            .enumerate()
            .map(|(index, g)| TextChoice {
                logprobs: self
                    .logprobs
                    .then(|| TextLogprobs::of(&g.logprobs, echo.chars().count())),
                text: format!("{echo}{}", g.text),
                index,
                finish_reason: Some(finish_reason(
                    c.finishes.get(index).unwrap_or(&c.finish),
                    false,
                )),
            })
            .collect();
        let (usage, service) = self.meta.usage(c);
        let mut body = self.object(choices);
        body.usage = Some(usage);
        body.service = Some(service);
        StoredResponse {
            status: 200,
            body: serde_json::to_string(&body).unwrap_or_default(),
        }
    }
}
