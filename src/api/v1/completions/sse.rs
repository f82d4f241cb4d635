//! Server-sent events for streamed text completions, as OpenAI frames them: with `echo`, a
//! chunk of the prompt per choice first; a chunk per piece of text (each naming its choice's
//! `index`), a last chunk per choice with its `finish_reason` (and `service`), an optional usage
//! chunk (`choices: []`), then `data: [DONE]`.
//!
//! Dropping the body (client gone) drops the engine's event receiver, which cancels the
//! sequence before its next step; metering's settlement still charges the tokens produced.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use futures::stream::{self, Stream};

use super::wire::{TextChoice, TextLogprobs, TextMeta};
use crate::api::shared::completion::finish_reason;
use crate::api::shared::error::ApiError;
use crate::api::shared::sse::{self, data};
use crate::engine::{ChoiceEvents, GenerationEvent, TokenLogprob};
use crate::metering::Settlement;

struct StreamState {
    meta: TextMeta,
    events: ChoiceEvents,
    settlement: Option<Settlement>,
    include_usage: bool,
    queue: VecDeque<Event>,
    /// Per choice: logprobs of tokens whose text has not been sent, and characters sent.
    choices: Vec<(Vec<TokenLogprob>, usize)>,
    done: bool,
}

impl StreamState {
    fn chunk(&mut self, index: usize, text: String) {
        let (pending, sent) = &mut self.choices[index];
        let logprobs = self
            .meta
            .logprobs
            .then(|| TextLogprobs::of(&std::mem::take(pending), *sent));
        *sent += text.chars().count();
        let c = self.meta.object(vec![TextChoice {
            text,
            index,
            logprobs,
            finish_reason: None,
        }]);
        self.queue.push_back(data(&c));
    }
}

/// The SSE response of a streamed completion: `events` as chunks, then the settlement's
/// charge (or its error, as an `ErrorBody` with `request_id`).
pub fn stream_response(
    meta: TextMeta,
    include_usage: bool,
    events: ChoiceEvents,
    settlement: Settlement,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut st = StreamState {
        choices: vec![(Vec::new(), 0); events.len()],
        meta,
        events,
        settlement: Some(settlement),
        include_usage,
        queue: VecDeque::new(),
        done: false,
    };
    if let Some(prompt) = st.meta.echo.clone() {
        for i in 0..st.choices.len() {
            st.chunk(i, prompt.clone());
        }
    }
    let s = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            match st.events.recv().await {
                Some((i, GenerationEvent::Delta(d))) => st.chunk(i, d),
                Some((i, GenerationEvent::Logprob(l))) => st.choices[i].0.push(l),
                Some((_, GenerationEvent::Started)) => {}
                None => {
                    st.done = true;
                    finish_stream(&mut st).await;
                }
            }
        }
    });
    sse::respond(s)
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
            let body = e.envelope(Some(st.meta.meta.request_id.clone()));
            st.queue.push_back(data(&body));
            return;
        }
    };
    let (usage, service) = st.meta.meta.usage(&charge);
    for i in 0..st.choices.len() {
        let end = charge.finishes.get(i).unwrap_or(&charge.finish);
        let mut c = st.meta.object(vec![TextChoice {
            text: String::new(),
            index: i,
            logprobs: None,
            finish_reason: Some(finish_reason(end, false)),
        }]);
        c.service = Some(service.clone());
        st.queue.push_back(data(&c));
    }
    if st.include_usage {
        let mut u = st.meta.object(Vec::new());
        u.usage = Some(usage);
        u.service = Some(service);
        st.queue.push_back(data(&u));
    }
    st.queue.push_back(Event::default().data("[DONE]"));
}
