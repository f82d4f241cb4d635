//! Server-sent events of a streamed Responses API request: `response.created`,
//! `response.in_progress`, the output items' events as the text arrives (`Outputs`), then
//! `response.completed` (or `response.incomplete` when `max_output_tokens` cut it) carrying the
//! usage and `service` cost, or an `error` event if the generation failed (nothing charged).
//! Each SSE message names its event (`event: response.output_text.delta`) and its data carries
//! `type` and `sequence_number`, as OpenAI streams them.
//!
//! A stored response (`store: true`) is saved before `response.completed` is sent, so a client
//! that continues with `previous_response_id` the moment the stream ends finds it. Dropping the
//! body (client gone) cancels the generation; metering still charges the tokens produced.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use futures::future::BoxFuture;
use futures::stream::{self, Stream};

use super::object::{ResponseMeta, Sequenced, StreamEvent};
use super::output::Outputs;
use crate::api::shared::error::ApiError;
use crate::api::shared::sse;
use crate::engine::{ChoiceEvents, FinishReason, GenerationEvent};
use crate::metering::Settlement;

/// Saves a finished response (the response object's JSON); awaited before the last event.
pub type Save = Box<dyn FnOnce(String) -> BoxFuture<'static, ()> + Send>;

struct StreamState {
    meta: ResponseMeta,
    /// The one choice's events (a response has one output).
    events: ChoiceEvents,
    settlement: Option<Settlement>,
    outputs: Outputs,
    save: Option<Save>,
    started: bool,
    done: bool,
    queue: VecDeque<Event>,
    sequence: u64,
}

impl StreamState {
    fn send(&mut self, event: StreamEvent) {
        let name = event.name();
        let s = Sequenced {
            event,
            sequence_number: self.sequence,
        };
        self.sequence += 1;
        self.queue.push_back(
            Event::default()
                .event(name)
                .data(serde_json::to_string(&s).unwrap_or_default()),
        );
    }

    async fn finish(&mut self) {
        let Some(settlement) = self.settlement.take() else {
            return;
        };
        let charge = match settlement.wait().await {
            Ok(c) => c,
            Err(e) => {
                let e = ApiError::from(e);
                e.log();
                let (_, _, code, param) = e.parts();
                self.send(StreamEvent::Error {
                    code: code.as_str(),
                    message: e.to_string(),
                    param,
                });
                return;
            }
        };
        let (events, items) = self.outputs.finish(charge.finish == FinishReason::Length);
        events.into_iter().for_each(|e| self.send(e));
        let object = self.meta.object(items, Some(&charge));
        if let Some(save) = self.save.take() {
            save(serde_json::to_string(&object).unwrap_or_default()).await;
        }
        let response = Box::new(object);
        self.send(if charge.finish == FinishReason::Length {
            StreamEvent::Incomplete { response }
        } else {
            StreamEvent::Completed { response }
        });
    }
}

/// The SSE response of a streamed Responses request.
pub fn stream_response(
    meta: ResponseMeta,
    events: ChoiceEvents,
    settlement: Settlement,
    save: Option<Save>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let st = StreamState {
        outputs: Outputs::new(&meta.id, &meta.syntax),
        meta,
        events,
        settlement: Some(settlement),
        save,
        started: false,
        done: false,
        queue: VecDeque::new(),
        sequence: 0,
    };
    let s = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            if !st.started {
                st.started = true;
                let response = Box::new(st.meta.object(Vec::new(), None));
                st.send(StreamEvent::Created {
                    response: response.clone(),
                });
                st.send(StreamEvent::InProgress { response });
                continue;
            }
            match st.events.recv().await {
                Some((_, GenerationEvent::Delta(d))) => {
                    let events = st.outputs.push(&d);
                    events.into_iter().for_each(|e| st.send(e));
                }
                Some((_, GenerationEvent::Logprob(l))) => st.outputs.push_logprobs([l]),
                Some((_, GenerationEvent::Started)) => {}
                None => {
                    st.done = true;
                    st.finish().await;
                }
            }
        }
    });
    sse::respond(s)
}
