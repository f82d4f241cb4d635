//! The output of one Responses API request: `Outputs` turns generated text into output items
//! (`reasoning`, `message`, `function_call`), and into the stream events that announce them as it goes,
//! with the same tool-call parser chat completions use, so a streamed and a whole response
//! read the same items. `output_as_chat` turns the items back into a chat message for the
//! stored conversation (`previous_response_id`). Shared by the Responses handler and
//! `response_sse`.

use serde_json::{Map, Value};

use super::object::{OutputItem, OutputText, ReasoningText, StreamEvent};
use crate::api::shared::completion::{choice_logprobs, new_call_id};
use crate::api::shared::schema::LogprobEntry;
use crate::engine::{
    OutputSyntax, Piece, ReasoningSplitter, TokenLogprob, ToolCallParser, ToolEvent,
};

/// The item being written.
enum Open {
    Reasoning { index: usize, text: String },
    Message { index: usize, text: String },
    Call { index: usize, args: String },
}

/// Builds output items from generated text, with the stream events that announce them.
pub struct Outputs {
    /// The response's id without `resp_`: item ids carry it (`item_id_for`).
    response: String,
    /// Splits the thinking off, for a thinking model.
    splitter: Option<ReasoningSplitter>,
    parser: Option<ToolCallParser>,
    items: Vec<OutputItem>,
    open: Option<Open>,
    /// Whitespace-only text not yet placed: it opens no message (dropped if a call follows).
    pending: String,
    /// Log-probabilities of tokens whose text is not placed yet.
    logprobs: Vec<TokenLogprob>,
    /// Those of the open message's text so far.
    message_logprobs: Vec<LogprobEntry>,
}

impl Outputs {
    /// Empty output of response `response_id`; `syntax` says whether thinking and tool calls
    /// are read out of the text.
    pub fn new(response_id: &str, syntax: &OutputSyntax) -> Self {
        Self {
            response: response_id.trim_start_matches("resp_").to_owned(),
            splitter: syntax.reasoning.as_ref().map(ReasoningSplitter::new),
            parser: syntax.tools.as_ref().map(ToolCallParser::new),
            items: Vec::new(),
            open: None,
            pending: String::new(),
            logprobs: Vec::new(),
            message_logprobs: Vec::new(),
        }
    }

    /// Take the log-probabilities of tokens whose text comes next (`push`).
    pub fn push_logprobs(&mut self, l: impl IntoIterator<Item = TokenLogprob>) {
        self.logprobs.extend(l);
    }

    /// Take one piece of generated text; the events it completes.
    pub fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        let pieces = match self.splitter.as_mut() {
            Some(s) => s.push(text),
            None => vec![Piece::Content(text.to_owned())],
        };
        self.place(pieces)
    }

    /// Place split pieces: thinking in the reasoning item, the answer through the tool-call
    /// parser.
    fn place(&mut self, pieces: Vec<Piece>) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Reasoning(t) => out.extend(self.reasoning(t)),
                Piece::Content(t) => {
                    let events = match self.parser.as_mut() {
                        Some(p) => p.push(&t),
                        None => vec![ToolEvent::Content(t)],
                    };
                    out.extend(self.apply(events));
                }
            }
        }
        out
    }

    /// Thinking text: opens the reasoning item (always the first) on its first piece.
    fn reasoning(&mut self, t: String) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            out.extend(self.close(false));
            let index = self.items.len();
            let item = OutputItem::Reasoning {
                id: item_id_for("rs", &self.response, index),
                summary: Vec::new(),
                content: Vec::new(),
                status: "in_progress",
            };
            self.items.push(item.clone());
            self.open = Some(Open::Reasoning {
                index,
                text: String::new(),
            });
            out.push(StreamEvent::ItemAdded {
                output_index: index,
                item,
            });
        }
        if let Some(Open::Reasoning { index, text }) = &mut self.open {
            text.push_str(&t);
            out.push(StreamEvent::ReasoningDelta {
                item_id: item_id(&self.items[*index]),
                output_index: *index,
                content_index: 0,
                delta: t,
            });
        }
        out
    }

    /// The end of the text: the last events, and the items with the status each ends with
    /// (`incomplete` for the last one when `cut` by the token limit).
    pub fn finish(&mut self, cut: bool) -> (Vec<StreamEvent>, Vec<OutputItem>) {
        let split = self
            .splitter
            .as_mut()
            .map(ReasoningSplitter::finish)
            .unwrap_or_default();
        let mut events = self.place(split);
        let rest = self
            .parser
            .as_mut()
            .map(ToolCallParser::finish)
            .unwrap_or_default();
        events.extend(self.apply(rest));
        if self.items.is_empty() && self.open.is_none() {
            let text = std::mem::take(&mut self.pending);
            events.extend(self.open_message());
            events.extend(self.text(text));
        }
        events.extend(self.close(cut));
        (events, self.items.clone())
    }

    fn apply(&mut self, events: Vec<ToolEvent>) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for e in events {
            match e {
                ToolEvent::Content(t) => {
                    if !matches!(self.open, Some(Open::Message { .. })) {
                        if t.trim().is_empty() {
                            self.pending.push_str(&t);
                            continue;
                        }
                        out.extend(self.close(false));
                        out.extend(self.open_message());
                    }
                    let t = std::mem::take(&mut self.pending) + &t;
                    out.extend(self.text(t));
                }
                ToolEvent::CallStart { name, .. } => {
                    out.extend(self.close(false));
                    self.pending.clear();
                    let index = self.items.len();
                    let item = OutputItem::FunctionCall {
                        id: item_id_for("fc", &self.response, index),
                        call_id: new_call_id(),
                        name,
                        arguments: String::new(),
                        status: "in_progress",
                    };
                    self.items.push(item.clone());
                    self.open = Some(Open::Call {
                        index,
                        args: String::new(),
                    });
                    out.push(StreamEvent::ItemAdded {
                        output_index: index,
                        item,
                    });
                }
                ToolEvent::CallArgs { fragment, .. } => {
                    if let Some(Open::Call { index, args }) = &mut self.open {
                        args.push_str(&fragment);
                        out.push(StreamEvent::ArgumentsDelta {
                            item_id: item_id(&self.items[*index]),
                            output_index: *index,
                            delta: fragment,
                        });
                    }
                }
            }
        }
        out
    }

    fn open_message(&mut self) -> Vec<StreamEvent> {
        let index = self.items.len();
        let id = item_id_for("msg", &self.response, index);
        let item = OutputItem::Message {
            id: id.clone(),
            status: "in_progress",
            role: "assistant",
            content: Vec::new(),
        };
        self.items.push(item.clone());
        self.open = Some(Open::Message {
            index,
            text: String::new(),
        });
        vec![
            StreamEvent::ItemAdded {
                output_index: index,
                item,
            },
            StreamEvent::PartAdded {
                item_id: id,
                output_index: index,
                content_index: 0,
                part: OutputText::new(String::new()),
            },
        ]
    }

    fn text(&mut self, t: String) -> Vec<StreamEvent> {
        let Some(Open::Message { index, text }) = &mut self.open else {
            return Vec::new();
        };
        if t.is_empty() {
            return Vec::new();
        }
        text.push_str(&t);
        let logprobs = choice_logprobs(&std::mem::take(&mut self.logprobs)).content;
        self.message_logprobs.extend(logprobs.iter().cloned());
        vec![StreamEvent::TextDelta {
            item_id: item_id(&self.items[*index]),
            output_index: *index,
            content_index: 0,
            delta: t,
            logprobs,
        }]
    }

    /// Close the open item: its final form and the events that say so.
    fn close(&mut self, cut: bool) -> Vec<StreamEvent> {
        let status = if cut { "incomplete" } else { "completed" };
        match self.open.take() {
            None => Vec::new(),
            Some(Open::Reasoning { index, text }) => {
                let id = item_id(&self.items[index]);
                self.items[index] = OutputItem::Reasoning {
                    id: id.clone(),
                    summary: Vec::new(),
                    content: vec![ReasoningText {
                        kind: "reasoning_text",
                        text: text.clone(),
                    }],
                    status,
                };
                vec![
                    StreamEvent::ReasoningDone {
                        item_id: id,
                        output_index: index,
                        content_index: 0,
                        text,
                    },
                    StreamEvent::ItemDone {
                        output_index: index,
                        item: self.items[index].clone(),
                    },
                ]
            }
            Some(Open::Message { index, text }) => {
                let id = item_id(&self.items[index]);
                let logprobs = std::mem::take(&mut self.message_logprobs);
                let mut part = OutputText::new(text.clone());
                part.logprobs.clone_from(&logprobs);
                self.items[index] = OutputItem::Message {
                    id: id.clone(),
                    status,
                    role: "assistant",
                    content: vec![part.clone()],
                };
                vec![
                    StreamEvent::TextDone {
                        item_id: id.clone(),
                        output_index: index,
                        content_index: 0,
                        text,
                        logprobs,
                    },
                    StreamEvent::PartDone {
                        item_id: id,
                        output_index: index,
                        content_index: 0,
                        part,
                    },
                    StreamEvent::ItemDone {
                        output_index: index,
                        item: self.items[index].clone(),
                    },
                ]
            }
            Some(Open::Call { index, args }) => {
                if let OutputItem::FunctionCall {
                    arguments,
                    status: s,
                    ..
                } = &mut self.items[index]
                {
                    arguments.clone_from(&args);
                    *s = status;
                }
                let name = match &self.items[index] {
                    OutputItem::FunctionCall { name, .. } => name.clone(),
                    OutputItem::Message { .. } | OutputItem::Reasoning { .. } => String::new(),
                };
                vec![
                    StreamEvent::ArgumentsDone {
                        item_id: item_id(&self.items[index]),
                        output_index: index,
                        name,
                        arguments: args,
                    },
                    StreamEvent::ItemDone {
                        output_index: index,
                        item: self.items[index].clone(),
                    },
                ]
            }
        }
    }
}

/// The id of output item `index` of response `resp_<response>`: `<prefix>_<response><index>`,
/// the index as two hex digits, so an `item_reference` names where the item is stored
/// (`item_source`). A response has far fewer than 256 output items.
fn item_id_for(prefix: &str, response: &str, index: usize) -> String {
    format!("{prefix}_{response}{:02x}", index.min(0xff))
}

/// The response id and output index an output item id names (`item_id_for`), if it is one.
pub fn item_source(item_id: &str) -> Option<(String, usize)> {
    let (prefix, rest) = item_id.split_once('_')?;
    if !matches!(prefix, "msg" | "fc" | "rs") || rest.len() < 3 || !rest.is_ascii() {
        return None;
    }
    let (response, index) = rest.split_at(rest.len() - 2);
    let index = usize::from_str_radix(index, 16).ok()?;
    Some((format!("resp_{response}"), index))
}

fn item_id(item: &OutputItem) -> String {
    match item {
        OutputItem::Message { id, .. }
        | OutputItem::FunctionCall { id, .. }
        | OutputItem::Reasoning { id, .. } => id.clone(),
    }
}

/// The output items of a response object (JSON) as chat messages (one assistant message: its
/// text, its tool calls and its thinking), to store with the conversation for
/// `previous_response_id`.
pub fn output_as_chat(items: &[Value]) -> Vec<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut thinking = String::new();
    for item in items {
        match item["type"].as_str() {
            Some("reasoning") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    thinking.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    text.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => {
                let function = Map::from_iter([
                    ("name".to_owned(), item["name"].clone()),
                    ("arguments".to_owned(), item["arguments"].clone()),
                ]);
                calls.push(Value::Object(Map::from_iter([
                    ("id".to_owned(), item["call_id"].clone()),
                    ("type".to_owned(), Value::from("function")),
                    ("function".to_owned(), Value::Object(function)),
                ])));
            }
            _ => {}
        }
    }
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::from(text)
    };
    let mut m = Map::from_iter([
        ("role".to_owned(), Value::from("assistant")),
        ("content".to_owned(), content),
    ]);
    if !calls.is_empty() {
        m.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    if !thinking.is_empty() {
        m.insert("reasoning_content".to_owned(), Value::from(thinking));
    }
    vec![Value::Object(m)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_one_message_with_its_events_in_order() {
        let mut o = Outputs::new("resp_test", &OutputSyntax::default());
        let mut events = o.push("Hello");
        events.extend(o.push(" world"));
        let (rest, items) = o.finish(false);
        events.extend(rest);
        let names: Vec<_> = events.iter().map(StreamEvent::name).collect();
        assert_eq!(
            names,
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done"
            ]
        );
        let OutputItem::Message {
            content, status, ..
        } = &items[0]
        else {
            panic!()
        };
        assert_eq!(
            (content[0].text.as_str(), *status),
            ("Hello world", "completed")
        );
        let items: Vec<Value> = items
            .iter()
            .map(|i| serde_json::to_value(i).unwrap())
            .collect();
        assert_eq!(output_as_chat(&items)[0]["content"], "Hello world");
    }

    #[test]
    fn no_text_is_one_empty_message() {
        let (events, items) = Outputs::new("resp_test", &OutputSyntax::default()).finish(true);
        assert_eq!(events.len(), 5);
        let OutputItem::Message {
            content, status, ..
        } = &items[0]
        else {
            panic!()
        };
        assert_eq!((content[0].text.as_str(), *status), ("", "incomplete"));
    }

    #[test]
    fn item_ids_name_their_response_and_index() {
        let mut o = Outputs::new("resp_abc", &OutputSyntax::default());
        let _ = o.push("Hi");
        let (_, items) = o.finish(false);
        let id = item_id(&items[0]);
        assert_eq!(id, "msg_abc00");
        assert_eq!(item_source(&id), Some(("resp_abc".to_owned(), 0)));
        assert_eq!(item_source("fc_xyz1a"), Some(("resp_xyz".to_owned(), 26)));
        assert_eq!(item_source("rs_abc00"), Some(("resp_abc".to_owned(), 0)));
        assert_eq!(item_source("ws_abc00"), None);
        assert_eq!(item_source("msg_zz"), None);
    }
}
