//! Server-sent events for streamed chat completions, framed as OpenAI sends them.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::chat::{finish_str, Meta, Settled};
use super::error::ApiError;
use super::request::ChatRequest;
use crate::engine::GenerationEvent;

enum Phase {
    Role,
    Events,
    Done,
}

struct StreamState {
    meta: Meta,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    settled: Option<oneshot::Receiver<Result<Settled, ApiError>>>,
    include_usage: bool,
    phase: Phase,
    queue: std::collections::VecDeque<Event>,
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// SSE as OpenAI sends it: a role chunk, content chunks, a finish chunk (with `service`), an
/// optional usage chunk (`choices: []`, with `service`), then `data: [DONE]`. Dropping the body
/// (client gone) drops the engine receiver, which cancels the sequence before its next step;
/// the detached settlement still charges the tokens produced.
pub(super) fn stream_response(
    meta: Meta,
    req: &ChatRequest,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    settled: oneshot::Receiver<Result<Settled, ApiError>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let st = StreamState {
        meta,
        events,
        settled: Some(settled),
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
                Phase::Events => match st.events.recv().await {
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
    let Some(settled) = st.settled.take() else {
        return;
    };
    let s = match settled.await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let mut body = e.body();
            body["error"]["request_id"] = json!(st.meta.request_id);
            st.queue.push_back(data(&body));
            return;
        }
        Err(_) => {
            let mut body =
                ApiError::Internal("settlement task ended without a result".into()).body();
            body["error"]["request_id"] = json!(st.meta.request_id);
            st.queue.push_back(data(&body));
            return;
        }
    };
    let (usage, service) = st.meta.usage(&s);
    let mut c = st.meta.chunk(
        json!({}),
        Some(finish_str(&s.outcome.finish)),
        st.include_usage,
    );
    c["service"] = json!(service);
    st.queue.push_back(data(&c));
    if st.include_usage {
        let m = &st.meta;
        st.queue.push_back(data(&json!({"id": m.id, "object": "chat.completion.chunk", "created": m.created,
            "model": m.model, "system_fingerprint": null, "choices": [], "usage": usage, "service": service})));
    }
    st.queue.push_back(Event::default().data("[DONE]"));
}
