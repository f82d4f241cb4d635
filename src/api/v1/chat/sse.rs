//! Server-sent events for streamed chat completions, framed as OpenAI sends them: a role chunk
//! per choice, content chunks (`reasoning_content` pieces first for a thinking model; each naming its choice's `index`, the `n` choices interleaved
//! as their tokens arrive), a finish chunk per choice (with `service`), an optional usage chunk
//! (`choices: []`, with `service`), then `data: [DONE]`. Every payload is a typed struct
//! (`schema.rs`).
//!
//! Dropping the body (client gone) drops the engine's event receiver, which cancels the
//! sequence before its next step; metering's settlement still charges the tokens produced.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use futures::stream::{self, Stream};

use crate::api::shared::completion::{choice_logprobs, new_call_id, CompletionMeta};
use crate::api::shared::error::ApiError;
use crate::api::shared::schema::{ChatCompletionChunk, ChunkDelta, FunctionDelta, ToolCallDelta};
use crate::api::shared::sse::{self, data};
use crate::engine::{
    ChoiceEvents, GenerationEvent, Piece, ReasoningSplitter, TokenLogprob, ToolCallParser,
    ToolEvent,
};
use crate::metering::Settlement;

enum Phase {
    Role,
    Events,
    Done,
}

struct StreamState {
    meta: CompletionMeta,
    events: ChoiceEvents,
    settlement: Option<Settlement>,
    include_usage: bool,
    phase: Phase,
    queue: VecDeque<Event>,
    /// Per choice, in choice order.
    choices: Vec<ChoiceState>,
}

/// What the stream keeps of one choice between its events.
struct ChoiceState {
    /// Splits the thinking off, for a thinking model.
    splitter: Option<ReasoningSplitter>,
    /// Splits the answer into content and tool calls when tools are on.
    parser: Option<ToolCallParser>,
    /// Logprobs of tokens whose text has not been sent yet.
    logprobs: Vec<TokenLogprob>,
}

impl StreamState {
    /// Queue the chunks of one piece of choice `i`'s generated text (thinking, content, or
    /// tool-call pieces).
    fn push_text(&mut self, i: usize, text: String) {
        let pieces = match self.choices[i].splitter.as_mut() {
            Some(s) => s.push(&text),
            None => vec![Piece::Content(text)],
        };
        self.push_pieces(i, pieces);
    }

    fn push_pieces(&mut self, i: usize, pieces: Vec<Piece>) {
        for piece in pieces {
            match piece {
                Piece::Reasoning(t) => {
                    let delta = ChunkDelta {
                        reasoning_content: Some(t),
                        ..ChunkDelta::default()
                    };
                    let c = self.meta.chunk(i, delta, None, self.include_usage);
                    self.queue.push_back(data(&c));
                }
                Piece::Content(t) => {
                    let events = match self.choices[i].parser.as_mut() {
                        Some(p) => p.push(&t),
                        None => vec![ToolEvent::Content(t)],
                    };
                    self.push_events(i, events);
                }
            }
        }
    }

    fn push_events(&mut self, i: usize, events: Vec<ToolEvent>) {
        for e in events {
            let delta = match e {
                ToolEvent::Content(t) => ChunkDelta {
                    content: Some(t),
                    ..ChunkDelta::default()
                },
                ToolEvent::CallStart { index, name } => self.call_delta(
                    index,
                    true,
                    FunctionDelta {
                        name: Some(name),
                        arguments: Some(String::new()),
                    },
                ),
                ToolEvent::CallArgs { index, fragment } => self.call_delta(
                    index,
                    false,
                    FunctionDelta {
                        name: None,
                        arguments: Some(fragment),
                    },
                ),
            };
            let content = delta.content.is_some();
            let mut c = self.meta.chunk(i, delta, None, self.include_usage);
            if content {
                self.attach_logprobs(i, &mut c);
            }
            self.queue.push_back(data(&c));
        }
    }

    /// The delta of a piece of call `index` (`start`: its first): a `tool_calls` entry, or
    /// `function_call` for a request that offered the deprecated `functions` (its first call
    /// only: such a request allows one).
    fn call_delta(&self, index: usize, start: bool, function: FunctionDelta) -> ChunkDelta {
        if self.meta.legacy_functions {
            return ChunkDelta {
                function_call: (index == 0).then_some(function),
                ..ChunkDelta::default()
            };
        }
        ChunkDelta {
            tool_calls: Some(vec![ToolCallDelta {
                index,
                id: start.then(new_call_id),
                kind: start.then_some("function"),
                function,
            }]),
            ..ChunkDelta::default()
        }
    }

    /// Put choice `i`'s pending logprobs on chunk `c` (with `logprobs: true`).
    fn attach_logprobs(&mut self, i: usize, c: &mut ChatCompletionChunk) {
        if let (true, Some(choice)) = (self.meta.logprobs, c.choices.first_mut()) {
            choice.logprobs = Some(choice_logprobs(&std::mem::take(
                &mut self.choices[i].logprobs,
            )));
        }
    }
}

/// The SSE response of a streamed completion: `events` as chunks, then the settlement's
/// charge (or its error, as an `ErrorBody` with `request_id`).
pub fn stream_response(
    meta: CompletionMeta,
    include_usage: bool,
    events: ChoiceEvents,
    settlement: Settlement,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let choices = (0..events.len())
        .map(|_| ChoiceState {
            splitter: meta.syntax.reasoning.as_ref().map(ReasoningSplitter::new),
            parser: meta.syntax.tools.as_ref().map(ToolCallParser::new),
            logprobs: Vec::new(),
        })
        .collect();
    let st = StreamState {
        choices,
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
                    for i in 0..st.choices.len() {
                        let delta = ChunkDelta {
                            role: Some("assistant"),
                            content: Some(String::new()),
                            ..ChunkDelta::default()
                        };
                        let c = st.meta.chunk(i, delta, None, st.include_usage);
                        st.queue.push_back(data(&c));
                    }
                }
                Phase::Events => match st.events.recv().await {
                    Some((i, GenerationEvent::Delta(d))) => st.push_text(i, d),
                    Some((i, GenerationEvent::Logprob(l))) => st.choices[i].logprobs.push(l),
                    Some((_, GenerationEvent::Started)) => {}
                    None => {
                        st.phase = Phase::Done;
                        finish_stream(&mut st).await;
                    }
                },
            }
        }
    });
    sse::respond(s)
}

async fn finish_stream(st: &mut StreamState) {
    let Some(settlement) = st.settlement.take() else {
        return;
    };
    let mut calls = Vec::with_capacity(st.choices.len());
    for i in 0..st.choices.len() {
        if let Some(rest) = st.choices[i]
            .splitter
            .as_mut()
            .map(ReasoningSplitter::finish)
        {
            st.push_pieces(i, rest);
        }
        let parser = st.choices[i].parser.as_mut();
        calls.push(parser.as_ref().map_or(0, |p| p.calls()));
        if let Some(rest) = parser.map(ToolCallParser::finish) {
            st.push_events(i, rest);
        }
        if !st.choices[i].logprobs.is_empty() && st.meta.logprobs {
            // Tokens whose text went into tool calls, or was held back and dropped.
            let mut c = st
                .meta
                .chunk(i, ChunkDelta::default(), None, st.include_usage);
            st.attach_logprobs(i, &mut c);
            st.queue.push_back(data(&c));
        }
    }
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
    for (i, called) in calls.into_iter().enumerate() {
        let end = charge.finishes.get(i).unwrap_or(&charge.finish);
        let finish = st.meta.finish_reason(end, called > 0);
        let mut c = st
            .meta
            .chunk(i, ChunkDelta::default(), Some(finish), st.include_usage);
        c.service = Some(service.clone());
        st.queue.push_back(data(&c));
    }
    if st.include_usage {
        let mut u = st.meta.empty_chunk(Some(Some(usage)));
        u.service = Some(service);
        st.queue.push_back(data(&u));
    }
    st.queue.push_back(Event::default().data("[DONE]"));
}
