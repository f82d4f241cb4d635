//! `POST /v1/chat/completions`, streamed (SSE, OpenAI chunk format) and not.
//!
//! Lifecycle: parse (request.rs) -> model lookup (404/403/502) -> image check (400) ->
//! template + tokenize on the blocking pool -> context check (400) -> submit (429 when the
//! queue is full) -> collect or stream. The engine's `Outcome` gives exact token counts.

use std::convert::Infallible;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::stream::{self, Stream};
use serde_json::{json, Value};

use super::error::ApiError;
use super::request::{self, ChatRequest};
use super::{AppState, RequestId};
use crate::billing;
use crate::engine::{
    EngineError, FinishReason, GenerateRequest, Generation, GenerationEvent, Outcome, Prompt,
};

/// Identity of one completion, shared by all its chunks.
struct Meta {
    id: String,
    created: u64,
    model: String,
    request_id: String,
    pricing: crate::catalog::Pricing,
}

impl Meta {
    fn usage(&self, o: &Outcome) -> (Value, Value) {
        let cost = billing::cost_micros(
            &self.pricing,
            o.prompt_tokens as u64,
            o.completion_tokens as u64,
        );
        (
            json!({"prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens,
                   "total_tokens": o.prompt_tokens + o.completion_tokens}),
            json!({"cost_micros": cost, "cost_usd": billing::micros_to_usd(cost), "request_id": self.request_id}),
        )
    }

    fn chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Value {
        let mut c = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    }
}

fn finish_str(f: &FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// The handler. The body is read as bytes so every rejection uses our envelope.
pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|_| ApiError::TooLarge)?;
    if let Some(ct) = headers.get(axum::http::header::CONTENT_TYPE) {
        if !ct
            .to_str()
            .unwrap_or("")
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("application/json")
        {
            return Err(ApiError::BadRequest {
                param: None,
                code: "unsupported_content_type",
                message: "Content-Type must be application/json.".into(),
            });
        }
    }
    let req = request::parse(&body)?;
    if req.stream && headers.contains_key("idempotency-key") {
        return Err(ApiError::BadRequest {
            param: Some("stream".into()),
            code: "idempotency_key_with_stream",
            message: "The Idempotency-Key header cannot be combined with `stream: true`.".into(),
        });
    }
    let entry = state
        .catalog
        .get(&req.model)
        .ok_or_else(|| ApiError::ModelNotFound(req.model.clone()))?
        .clone();
    if !entry.commercial_use {
        return Err(ApiError::NotLicensed(req.model.clone()));
    }
    if req.n != 1 {
        return Err(ApiError::BadRequest {
            param: Some("n".into()),
            code: "unsupported_value",
            message: "Only `n: 1` is supported.".into(),
        });
    }
    if let (Some(img), false) = (req.images.first(), entry.reads_images()) {
        return Err(ApiError::BadRequest {
            param: Some(format!("messages[{}].content[{}]", img.message, img.part)),
            code: "image_not_supported",
            message: format!("The model `{}` does not read images.", req.model),
        });
    }
    let engine = state.engine.clone();
    let (model, messages) = (req.model.clone(), req.messages.clone());
    let prompt = tokio::task::spawn_blocking(move || engine.prepare(&model, &messages))
        .await
        .map_err(|e| ApiError::Internal(format!("prepare task: {e}")))?
        .map_err(|e| match e {
            EngineError::ModelNotLoaded(m) => ApiError::ModelUnavailable(format!(
                "The model `{m}` is in the catalogue but not loaded on this server."
            )),
            EngineError::Template(t) => ApiError::BadRequest {
                param: Some("messages".into()),
                code: "invalid_messages",
                message: format!(
                    "The messages cannot be rendered with the model's chat template: {t}"
                ),
            },
            other => ApiError::Internal(other.to_string()),
        })?;
    let max_new = context_check(&prompt, req.max_tokens)?;
    let gen_req = GenerateRequest {
        request_id: rid.0.clone(),
        prompt,
        sampling: req.sampling.clone(),
        max_new_tokens: max_new,
        stop: req.stop.clone(),
    };
    let prompt_tokens = gen_req.prompt.token_ids.len();
    let generation = state.engine.submit(gen_req).map_err(|e| match e {
        EngineError::Overloaded => ApiError::Overloaded(req.model.clone()),
        other => ApiError::EngineFailed(other.to_string()),
    })?;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let meta = Meta {
        id: format!("chatcmpl-{}", super::random_id(24)),
        created,
        model: req.model.clone(),
        request_id: rid.0.clone(),
        pricing: entry.pricing,
    };
    tracing::debug!(request_id = %rid.0, model = %req.model, prompt_tokens, max_new, stream = req.stream, "generation submitted");
    if req.stream {
        Ok(stream_response(meta, req, generation).into_response())
    } else {
        complete(meta, generation).await
    }
}

/// Tokens the request may generate: its limit, else the rest of the context.
fn context_check(
    prompt: &Prompt,
    max_tokens: Option<(usize, &'static str)>,
) -> Result<usize, ApiError> {
    let (n, ctx) = (prompt.token_ids.len(), prompt.context_length);
    let exceeded = |param: &str, asked: usize| {
        ApiError::BadRequest {
        param: Some(param.into()),
        code: "context_length_exceeded",
        message: format!("This model's maximum context length is {ctx} tokens. However, you requested {} tokens ({n} in the messages, {asked} in the completion). Please reduce the length of the messages or completion.", n + asked),
    }
    };
    match max_tokens {
        Some((m, param)) if n + m > ctx => Err(exceeded(param, m)),
        Some((m, _)) => Ok(m),
        None if n >= ctx => Err(exceeded("messages", 1)),
        None => Ok(ctx - n),
    }
}

async fn complete(meta: Meta, mut g: Generation) -> Result<Response, ApiError> {
    let started = Instant::now();
    let mut text = String::new();
    while let Some(ev) = g.events.recv().await {
        if let GenerationEvent::Delta(d) = ev {
            text.push_str(&d);
        }
    }
    let outcome = g
        .outcome
        .await
        .map_err(|_| ApiError::EngineFailed("engine dropped the request".into()))?;
    if let FinishReason::Failed(msg) = &outcome.finish {
        return Err(ApiError::EngineFailed(msg.clone()));
    }
    let (usage, service) = meta.usage(&outcome);
    tracing::info!(request_id = %meta.request_id, model = %meta.model, prompt_tokens = outcome.prompt_tokens,
        completion_tokens = outcome.completion_tokens, ms = started.elapsed().as_millis() as u64, "chat completion");
    Ok(Json(json!({
        "id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
        "system_fingerprint": null,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                     "logprobs": null, "finish_reason": finish_str(&outcome.finish)}],
        "usage": usage, "service": service,
    }))
    .into_response())
}

enum Phase {
    Role,
    Events,
    Done,
}

struct StreamState {
    meta: Meta,
    g: Generation,
    include_usage: bool,
    phase: Phase,
    queue: std::collections::VecDeque<Event>,
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// SSE as OpenAI sends it: a role chunk, content chunks, a finish chunk, an optional usage
/// chunk (`choices: []`), then `data: [DONE]`. Dropping the body (client gone) drops the
/// engine receiver, which cancels the sequence before its next step.
fn stream_response(
    meta: Meta,
    req: ChatRequest,
    g: Generation,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let st = StreamState {
        meta,
        g,
        include_usage: req.include_usage,
        phase: Phase::Role,
        queue: Default::default(),
    };
    let s = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), st));
            }
            match st.phase {
                Phase::Done => return None,
                Phase::Role => {
                    st.phase = Phase::Events;
                    let c = st.meta.chunk(
                        json!({"role": "assistant", "content": ""}),
                        None,
                        st.include_usage,
                    );
                    st.queue.push_back(data(&c));
                }
                Phase::Events => match st.g.events.recv().await {
                    Some(GenerationEvent::Delta(d)) => {
                        let c = st.meta.chunk(json!({"content": d}), None, st.include_usage);
                        st.queue.push_back(data(&c));
                    }
                    Some(GenerationEvent::Started) => {}
                    None => {
                        st.phase = Phase::Done;
                        finish_stream(&mut st).await;
                    }
                },
            }
        }
    });
    Sse::new(s).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(3))
            .text("ping"),
    )
}

async fn finish_stream(st: &mut StreamState) {
    let outcome = match (&mut st.g.outcome).await {
        Ok(o) => o,
        Err(_) => Outcome {
            prompt_tokens: 0,
            completion_tokens: 0,
            finish: FinishReason::Failed("engine dropped the request".into()),
        },
    };
    if let FinishReason::Failed(msg) = &outcome.finish {
        let e = ApiError::EngineFailed(msg.clone());
        tracing::error!(request_id = %st.meta.request_id, "stream failed: {msg}");
        let mut body = e.body();
        body["error"]["request_id"] = json!(st.meta.request_id);
        st.queue.push_back(data(&body));
        return;
    }
    let c = st.meta.chunk(
        json!({}),
        Some(finish_str(&outcome.finish)),
        st.include_usage,
    );
    st.queue.push_back(data(&c));
    if st.include_usage {
        let (usage, service) = st.meta.usage(&outcome);
        let m = &st.meta;
        st.queue.push_back(data(&json!({"id": m.id, "object": "chat.completion.chunk", "created": m.created,
            "model": m.model, "system_fingerprint": null, "choices": [], "usage": usage, "service": service})));
    }
    tracing::info!(request_id = %st.meta.request_id, model = %st.meta.model, prompt_tokens = outcome.prompt_tokens,
        completion_tokens = outcome.completion_tokens, "chat completion (stream)");
    st.queue.push_back(Event::default().data("[DONE]"));
}
