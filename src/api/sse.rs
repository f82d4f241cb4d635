//! Server-sent events for streamed chat completions, framed as OpenAI sends them: a role chunk,
//! content chunks, a finish chunk (with `service`), an optional usage chunk (`choices: []`,
//! with `service`), then `data: [DONE]`. Every payload is a typed struct (`schema.rs`).
//!
//! Dropping the body (client gone) drops the engine's event receiver, which cancels the
//! sequence before its next step; metering's settlement still charges the tokens produced.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::stream::{self, Stream};
use serde::Serialize;
use tokio::sync::mpsc;

use super::completion::{finish_reason, CompletionMeta};
use super::error::ApiError;
use super::schema::ChunkDelta;
use crate::engine::GenerationEvent;
use crate::metering::Settlement;

enum Phase {
    Role,
    Events,
    Done,
}

struct StreamState {
    meta: CompletionMeta,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    settlement: Option<Settlement>,
    include_usage: bool,
    phase: Phase,
    queue: VecDeque<Event>,
}

fn data(v: &impl Serialize) -> Event {
    Event::default().data(serde_json::to_string(v).unwrap_or_default())
}

/// The SSE response of a streamed completion: `events` as chunks, then the settlement's
/// charge (or its error, as an `ErrorBody` with `request_id`).
pub fn stream_response(
    meta: CompletionMeta,
    include_usage: bool,
    events: mpsc::UnboundedReceiver<GenerationEvent>,
    settlement: Settlement,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let st = StreamState {
        meta,
        events,
        settlement: Some(settlement),
        include_usage,
        phase: Phase::Role,
        queue: VecDeque::new(),
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
                    let delta = ChunkDelta {
                        role: Some("assistant"),
                        content: Some(String::new()),
                    };
                    let c = st.meta.chunk(delta, None, st.include_usage);
                    st.queue.push_back(data(&c));
                }
                Phase::Events => match st.events.recv().await {
                    Some(GenerationEvent::Delta(d)) => {
                        let c = st.meta.chunk(
                            ChunkDelta {
                                role: None,
                                content: Some(d),
                            },
                            None,
                            st.include_usage,
                        );
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
    let Some(settlement) = st.settlement.take() else {
        return;
    };
    let charge = match settlement.wait().await {
        Ok(c) => c,
        Err(e) => {
            let e = ApiError::from(e);
            e.log();
            st.queue
                .push_back(data(&e.envelope(Some(st.meta.request_id.clone()))));
            return;
        }
    };
    let (usage, service) = st.meta.usage(&charge);
    let mut c = st.meta.chunk(
        ChunkDelta {
            role: None,
            content: None,
        },
        Some(finish_reason(&charge.finish)),
        st.include_usage,
    );
    c.service = Some(service.clone());
    st.queue.push_back(data(&c));
    if st.include_usage {
        let mut u = st.meta.empty_chunk(Some(Some(usage)));
        u.service = Some(service);
        st.queue.push_back(data(&u));
    }
    st.queue.push_back(Event::default().data("[DONE]"));
}
