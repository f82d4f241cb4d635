//! Splitting generated text into content and tool calls, incrementally.
//!
//! The grammar fixes a call's layout (`{"name": "...", "arguments": ...}` inside the format's
//! tags), so the parser needs no partial-JSON parser: it finds the trigger, reads the name, and
//! passes the `arguments` text through byte for byte while tracking only bracket depth and
//! string state to see where the arguments end. Tag text never reaches `Content`. Text the parser
//! cannot read as a call (an unconstrained model that wrote a malformed tag, or a name that was
//! not offered) is given back as content. A message that opens with a bare JSON call, fenced or
//! not, is read as that call (`lead`).

use super::header::{read_header, Header};
use super::lead::{self, Opening};
use crate::engine::text::tool_format::ToolSyntax;

/// What the parser found in the text so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Assistant text outside any call.
    Content(String),
    /// A call opened: its position among the calls (`index`) and the function name.
    CallStart { index: usize, name: String },
    /// More of the `arguments` JSON text of call `index`.
    CallArgs { index: usize, fragment: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Plain text, watching for the trigger.
    Content,
    /// After the trigger or a separator: reading `{"name": "...", "arguments": `.
    Header,
    /// Inside the arguments value.
    Args { depth: u32, in_str: bool, esc: bool },
    /// After the arguments: the `}` of the call, then a separator or the close tag.
    AfterArgs,
}

/// How a bare JSON call was opened (`lead::Opening::Open`), so its closing is read alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bare {
    fenced: bool,
    doubled: bool,
}

/// Incremental parser for one generation.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    syntax: ToolSyntax,
    state: State,
    buf: String,
    calls: usize,
    /// Content already emitted (leading whitespace is held back until real text arrives).
    emitted_content: bool,
    /// The text that opened the current block (the trigger, or a bare call's lead), given back
    /// as content when the block turns out not to be a call.
    opener: String,
    /// The current call is a bare JSON call, not a tagged one.
    bare: Option<Bare>,
}

impl ToolCallParser {
    /// A parser for text in `syntax`.
    pub fn new(syntax: &ToolSyntax) -> Self {
        Self {
            syntax: syntax.clone(),
            state: State::Content,
            buf: String::new(),
            calls: 0,
            emitted_content: false,
            opener: String::new(),
            bare: None,
        }
    }

    /// Calls opened so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Feed generated text; returns the events it completes.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The end of the generation: held-back text becomes content (outside a call). A call
    /// header cut short (by `max_tokens` or a stop sequence) is dropped, not given back: it is
    /// call syntax, and a header that cannot be a call was given back as soon as it was read.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut out = Vec::new();
        if self.state == State::Content && !self.buf.trim().is_empty() {
            out.push(ToolEvent::Content(std::mem::take(&mut self.buf)));
        }
        self.buf.clear();
        out
    }

    /// One transition; `false` when more text is needed.
    fn step(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        match self.state {
            State::Content => self.content(out),
            State::Header => self.header(out),
            State::Args { .. } => self.args(out),
            State::AfterArgs => self.after_args(),
        }
    }

    fn emit_content(&mut self, text: String, out: &mut Vec<ToolEvent>) {
        if text.is_empty() || (!self.emitted_content && text.trim().is_empty()) {
            return;
        }
        self.emitted_content = true;
        out.push(ToolEvent::Content(text));
    }

    fn content(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        if self.calls == 0 && !self.emitted_content {
            match lead::opening(&self.buf) {
                Opening::Maybe => return false,
                Opening::Open {
                    fenced,
                    doubled,
                    used,
                } => {
                    self.opener = self.buf.drain(..used).collect();
                    self.bare = Some(Bare { fenced, doubled });
                    self.state = State::Header;
                    return true;
                }
                Opening::No => {}
            }
        }
        let trigger = self.syntax.format.trigger();
        if let Some(at) = self.buf.find(trigger) {
            let before = self.buf[..at].to_owned();
            self.buf.drain(..at + trigger.len());
            self.opener = trigger.to_owned();
            self.bare = None;
            if self.calls == 0 && before.trim().is_empty() {
                // Whitespace before the first call is not content.
            } else {
                self.emit_content(before, out);
            }
            self.state = State::Header;
            return true;
        }
        // Keep the longest tail that could still begin the trigger, and leading whitespace.
        let keep = (1..trigger.len())
            .rev()
            .find(|&n| {
                self.buf.len() >= n
                    && self.buf.is_char_boundary(self.buf.len() - n)
                    && trigger.starts_with(&self.buf[self.buf.len() - n..])
            })
            .unwrap_or(0);
        let cut = self.buf.len() - keep;
        if !self.emitted_content && self.buf[..cut].trim().is_empty() {
            return false;
        }
        let text: String = self.buf.drain(..cut).collect();
        self.emit_content(text, out);
        false
    }

    fn header(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        match read_header(&self.buf, self.syntax.format.header_open()) {
            Header::Incomplete => false,
            Header::Call { name, .. } if !self.syntax.names.contains(&name) => self.bad_header(out),
            Header::Bad => self.bad_header(out),
            Header::Call { name, used } => {
                self.buf.drain(..used);
                out.push(ToolEvent::CallStart {
                    index: self.calls,
                    name,
                });
                self.calls += 1;
                self.state = State::Args {
                    depth: 0,
                    in_str: false,
                    esc: false,
                };
                true
            }
        }
    }

    /// Not a call after all: the opener and the text so far are content.
    fn bad_header(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        let text = format!("{}{}", self.opener, std::mem::take(&mut self.buf));
        self.emit_content(text, out);
        self.state = State::Content;
        false
    }

    fn args(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        let State::Args {
            mut depth,
            mut in_str,
            mut esc,
        } = self.state
        else {
            return false;
        };
        let mut end = None;
        for (i, c) in self.buf.char_indices() {
            if in_str {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
            } else {
                match c {
                    '"' => in_str = true,
                    '{' | '[' => depth += 1,
                    '}' | ']' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                if depth == 0 && !c.is_whitespace() && !in_str && matches!(c, '}' | ']') {
                    end = Some(i + c.len_utf8());
                    break;
                }
            }
        }
        let index = self.calls - 1;
        let take = end.unwrap_or(self.buf.len());
        let fragment: String = self.buf.drain(..take).collect();
        if !fragment.is_empty() {
            out.push(ToolEvent::CallArgs { index, fragment });
        }
        if end.is_some() {
            self.state = State::AfterArgs;
            true
        } else {
            self.state = State::Args { depth, in_str, esc };
            false
        }
    }

    fn after_args(&mut self) -> bool {
        let rest = self.buf.trim_start();
        if rest.is_empty() {
            return false;
        }
        let Some(rest) = rest.strip_prefix('}') else {
            return self.bad_after();
        };
        let r = rest.trim_start_matches([' ', '\n']);
        if let Some(Bare { fenced, doubled }) = self.bare {
            // A bare call ends at its `}` (and the outer `}` if doubled); a fenced one also
            // takes the closing fence.
            let (r, rest) = if doubled {
                match r.strip_prefix('}') {
                    Some(after) => (after.trim_start_matches([' ', '\n']), after),
                    None if r.is_empty() => return false,
                    None => (r, rest),
                }
            } else {
                (r, rest)
            };
            let used = match r.strip_prefix("```") {
                Some(after) if fenced => self.buf.len() - after.len(),
                None if fenced && "```".starts_with(r) => return false,
                _ => self.buf.len() - rest.len(),
            };
            self.buf.drain(..used);
            self.state = State::Content;
            return true;
        }
        let between = self.syntax.format.between();
        let close = self.syntax.format.close();
        for (sep, next) in [
            (between.trim(), State::Header),
            (close.trim(), State::Content),
        ] {
            if let Some(after) = r.strip_prefix(sep) {
                let used = self.buf.len() - after.len();
                self.buf.drain(..used);
                self.state = next;
                return true;
            }
            if sep.starts_with(r) {
                return false;
            }
        }
        self.bad_after()
    }

    fn bad_after(&mut self) -> bool {
        // Unexpected text after a call: drop the rest of the tag area and go back to content.
        self.state = State::Content;
        true
    }
}

/// Parse a whole text: (content, calls as (name, arguments text)).
pub fn parse_all(syntax: &ToolSyntax, text: &str) -> (String, Vec<(String, String)>) {
    let mut p = ToolCallParser::new(syntax);
    let mut events = p.push(text);
    events.extend(p.finish());
    fold(events)
}

/// Events folded into (content, calls as (name, arguments text)).
pub fn fold(events: Vec<ToolEvent>) -> (String, Vec<(String, String)>) {
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for e in events {
        match e {
            ToolEvent::Content(t) => content.push_str(&t),
            ToolEvent::CallStart { name, .. } => calls.push((name, String::new())),
            ToolEvent::CallArgs { index, fragment } => {
                if let Some(c) = calls.get_mut(index) {
                    c.1.push_str(&fragment);
                }
            }
        }
    }
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::text::tool_format::ToolFormat;

    fn syntax(format: ToolFormat) -> ToolSyntax {
        ToolSyntax {
            format,
            names: ["get_weather", "t2", "a", "b"].map(String::from).to_vec(),
        }
    }

    fn whole(format: ToolFormat, text: &str) -> (String, Vec<(String, String)>) {
        parse_all(&syntax(format), text)
    }

    fn by_chars(format: ToolFormat, text: &str) -> (String, Vec<(String, String)>) {
        let mut p = ToolCallParser::new(&syntax(format));
        let mut events = Vec::new();
        for c in text.chars() {
            events.extend(p.push(&c.to_string()));
        }
        events.extend(p.finish());
        fold(events)
    }

    #[test]
    fn hermes_calls_parse_whole_and_char_by_char() {
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris {x}\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t2\", \"arguments\": {}}\n</tool_call>";
        let want = (
            String::new(),
            vec![
                (
                    "get_weather".to_owned(),
                    "{\"location\": \"Paris {x}\"}".to_owned(),
                ),
                ("t2".to_owned(), "{}".to_owned()),
            ],
        );
        assert_eq!(whole(ToolFormat::Hermes, text), want);
        assert_eq!(by_chars(ToolFormat::Hermes, text), want);
    }

    #[test]
    fn smollm_list_with_text_before() {
        let text = "Let me check. <tool_call>[{\"name\": \"a\", \"arguments\": {\"q\": [1, 2]}}, {\"name\": \"b\", \"arguments\": {\"s\": \"]\\\"\"}}]</tool_call>";
        let want = (
            "Let me check. ".to_owned(),
            vec![
                ("a".to_owned(), "{\"q\": [1, 2]}".to_owned()),
                ("b".to_owned(), "{\"s\": \"]\\\"\"}".to_owned()),
            ],
        );
        assert_eq!(whole(ToolFormat::SmolLm, text), want);
        assert_eq!(by_chars(ToolFormat::SmolLm, text), want);
    }

    #[test]
    fn plain_text_and_a_lone_angle_bracket_stay_content() {
        let text = "a < b and <tool is not a call";
        assert_eq!(
            by_chars(ToolFormat::Hermes, text),
            (text.to_owned(), vec![])
        );
        let bad = "<tool_call>oops";
        assert_eq!(whole(ToolFormat::Hermes, bad).0, bad);
    }

    #[test]
    fn a_message_opening_with_json_is_a_call_fenced_or_bare() {
        let want = |args: &str| {
            (
                String::new(),
                vec![("get_weather".to_owned(), args.to_owned())],
            )
        };
        let fenced = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"location\": \"Paris\"\n  }\n}\n```";
        let args = "{\n    \"location\": \"Paris\"\n  }";
        for f in [ToolFormat::Hermes, ToolFormat::SmolLm] {
            assert_eq!(whole(f, fenced), want(args));
            assert_eq!(by_chars(f, fenced), want(args));
            let bare = " {\"name\": \"get_weather\", \"arguments\": {}}";
            assert_eq!(by_chars(f, bare), want("{}"));
        }
    }

    #[test]
    fn doubled_braces_are_a_call_and_a_cut_header_is_not_content() {
        let want = (
            String::new(),
            vec![(
                "get_weather".to_owned(),
                "{\"location\": \"Paris\"}".to_owned(),
            )],
        );
        for text in [
            "{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}}",
            "```json\n{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}}\n```",
        ] {
            assert_eq!(whole(ToolFormat::Hermes, text), want, "{text}");
            assert_eq!(by_chars(ToolFormat::Hermes, text), want, "{text}");
        }
        let after = "{{\"name\": \"get_weather\", \"arguments\": {}}} Done.";
        assert_eq!(whole(ToolFormat::Hermes, after).0, " Done.");
        for (f, cut) in [
            (ToolFormat::SmolLm, "<tool_call>[{\"name"),
            (ToolFormat::Hermes, "<tool_call>\n{\"name\": \"get_wea"),
            (ToolFormat::Hermes, "{{\"name\": \"get_weather\", \"argu"),
        ] {
            assert_eq!(whole(f, cut), (String::new(), vec![]), "{f:?} {cut}");
            assert_eq!(by_chars(f, cut), (String::new(), vec![]), "{f:?} {cut}");
        }
    }

    #[test]
    fn json_that_is_not_an_offered_call_stays_content() {
        for text in [
            "```json\n{\"name\": \"Alice\", \"arguments\": {}}\n```",
            "```json\n{\"title\": \"x\"}\n```",
            "```python\nprint(1)\n```",
            "{x} is a placeholder",
            "Here: {\"name\": \"get_weather\", \"arguments\": {}}",
        ] {
            assert_eq!(whole(ToolFormat::Hermes, text), (text.to_owned(), vec![]));
            assert_eq!(
                by_chars(ToolFormat::Hermes, text),
                (text.to_owned(), vec![])
            );
        }
    }

    #[test]
    fn llama3_calls_are_bare_json_with_parameters_after_an_optional_python_tag() {
        let want = (
            String::new(),
            vec![(
                "get_weather".to_owned(),
                "{\"location\": \"Paris\"}".to_owned(),
            )],
        );
        for text in [
            "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
        ] {
            assert_eq!(whole(ToolFormat::Llama3, text), want, "{text}");
            assert_eq!(by_chars(ToolFormat::Llama3, text), want, "{text}");
        }
    }
}
