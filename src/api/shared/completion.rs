//! Wire shapes of one chat completion: its identity (`CompletionMeta`), the whole
//! `chat.completion` body and the `chat.completion.chunk`s of a stream, built from metering's
//! `Charge`. Typed structs from `schema.rs` only; shared by the chat handler and `sse`.

use std::time::{SystemTime, UNIX_EPOCH};

use super::schema::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice,
    ChunkDelta, CompletionTokensDetails, FunctionCallOut, LogprobEntry, PromptTokensDetails,
    ServiceCost, ToolCallOut, TopLogprob, Usage,
};
use crate::engine::{
    parse_tool_calls as parse_all, split_reasoning as split_all, FinishReason, OutputSyntax,
    TokenLogprob,
};
use crate::metering::{Charge, Generated, StoredResponse};

/// Identity of one completion, shared by all its chunks.
#[derive(Debug, Clone)]
pub struct CompletionMeta {
    /// `chatcmpl-` + 24 alphanumerics.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// The request's `req_` id (`service.request_id`).
    pub request_id: String,
    /// How to read tool calls and thinking out of the text.
    pub syntax: OutputSyntax,
    /// The request asked for `logprobs`.
    pub logprobs: bool,
    /// The request offered the deprecated `functions`: a call is `message.function_call`.
    pub legacy_functions: bool,
}

impl CompletionMeta {
    /// A new completion of `model` for request `request_id`, created now.
    pub fn new(model: &str, request_id: &str, syntax: OutputSyntax) -> Self {
        Self {
            id: format!("chatcmpl-{}", super::state::random_id(24)),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: model.to_owned(),
            request_id: request_id.to_owned(),
            syntax,
            logprobs: false,
            legacy_functions: false,
        }
    }

    /// `usage` and `service` of a settled charge.
    pub fn usage(&self, c: &Charge) -> (Usage, ServiceCost) {
        (
            Usage {
                prompt_tokens: c.prompt_tokens,
                completion_tokens: c.completion_tokens,
                total_tokens: c.prompt_tokens + c.completion_tokens,
                prompt_tokens_details: PromptTokensDetails {
                    cached_tokens: c.cached_tokens,
                    audio_tokens: 0,
                },
                completion_tokens_details: CompletionTokensDetails {
                    reasoning_tokens: c.reasoning_tokens,
                    accepted_prediction_tokens: c.accepted_prediction_tokens,
                    rejected_prediction_tokens: c.rejected_prediction_tokens,
                    ..CompletionTokensDetails::default()
                },
            },
            ServiceCost {
                cost_micros: c.cost_micros,
                cost_usd: c.cost_micros.usd(),
                request_id: self.request_id.clone(),
            },
        )
    }

    /// The whole `chat.completion` with each choice's generated text (split into reasoning,
    /// content and tool calls) and its logprobs, as the 200 response to store and send.
    pub fn completion(&self, c: &Charge, generated: Vec<Generated>) -> StoredResponse {
        let (usage, service) = self.usage(c);
        let choices = generated
            .into_iter()
            .enumerate()
            .map(|(index, g)| {
                let finish = c.finishes.get(index).unwrap_or(&c.finish);
                self.choice(index, g, finish)
            })
            .collect();
        let body = ChatCompletion {
            id: self.id.clone(),
            object: "chat.completion",
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: None,
            choices,
            usage,
            service,
        };
        StoredResponse {
            status: 200,
            body: serde_json::to_string(&body).unwrap_or_default(),
        }
    }

    /// Choice `index` of a whole completion: its message and `finish_reason`.
    fn choice(&self, index: usize, generated: Generated, finish: &FinishReason) -> Choice {
        let (reasoning, answer) = match &self.syntax.reasoning {
            Some(r) => split_all(r, &generated.text),
            None => (None, generated.text),
        };
        let (content, calls) = match &self.syntax.tools {
            Some(s) => parse_all(s, &answer),
            None => (answer, Vec::new()),
        };
        let called = !calls.is_empty();
        let mut function_call = None;
        let mut tool_calls: Vec<ToolCallOut> = Vec::new();
        for (name, arguments) in calls {
            let function = FunctionCallOut { name, arguments };
            if self.legacy_functions {
                function_call.get_or_insert(function);
            } else {
                tool_calls.push(ToolCallOut {
                    id: new_call_id(),
                    kind: "function",
                    function,
                });
            }
        }
        Choice {
            index,
            finish_reason: self.finish_reason(finish, called),
            message: AssistantMessage {
                role: "assistant",
                content: (!called || !content.is_empty()).then_some(content),
                refusal: None,
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                function_call,
                reasoning_content: reasoning,
            },
            logprobs: self.logprobs.then(|| choice_logprobs(&generated.logprobs)),
        }
    }

    /// OpenAI's `finish_reason` (`finish_reason`), `function_call` in place of `tool_calls`
    /// for a request that offered the deprecated `functions`.
    pub fn finish_reason(&self, f: &FinishReason, called: bool) -> &'static str {
        match finish_reason(f, called) {
            "tool_calls" if self.legacy_functions => "function_call",
            other => other,
        }
    }

    /// A chunk with one choice, choice `index`; `usage: null` when the client asked for usage.
    pub fn chunk(
        &self,
        index: usize,
        delta: ChunkDelta,
        finish: Option<&'static str>,
        include_usage: bool,
    ) -> ChatCompletionChunk {
        let mut c = self.empty_chunk(include_usage.then_some(None));
        c.choices.push(ChunkChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: finish,
        });
        c
    }

    /// A chunk with no choice (the usage chunk) carrying `usage`.
    pub fn empty_chunk(&self, usage: Option<Option<Usage>>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: None,
            choices: Vec::new(),
            usage,
            service: None,
        }
    }
}

/// OpenAI's `logprobs` object of the tokens `l`.
pub fn choice_logprobs(l: &[TokenLogprob]) -> ChoiceLogprobs {
    ChoiceLogprobs {
        content: l
            .iter()
            .map(|t| LogprobEntry {
                token: t.token.text.clone(),
                logprob: t.logprob,
                bytes: t.token.bytes.clone(),
                top_logprobs: t
                    .top
                    .iter()
                    .map(|(tok, lp)| TopLogprob {
                        token: tok.text.clone(),
                        logprob: *lp,
                        bytes: tok.bytes.clone(),
                    })
                    .collect(),
            })
            .collect(),
        refusal: None,
    }
}

/// A tool call's id: `call_` + 24 alphanumerics.
pub fn new_call_id() -> String {
    format!("call_{}", super::state::random_id(24))
}

/// OpenAI's `finish_reason`: `length` when `max_tokens` or the context ended it, else
/// `tool_calls` when the completion `called` a tool, else `stop`.
pub fn finish_reason(f: &FinishReason, called: bool) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ if called => "tool_calls",
        _ => "stop",
    }
}
