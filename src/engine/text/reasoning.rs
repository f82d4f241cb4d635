//! Thinking models' reasoning: whether a prompt leaves the model to think (`Reasoning`, from
//! the vocabulary, the chat template and the rendered prompt), how many generated tokens were
//! thinking (`ReasoningCounter`, on token ids, in the scheduler), and the split of the generated
//! text into reasoning and answer (`ReasoningSplitter`, on text, in the API layer).
//!
//! The markers are `<think>` and `</think>`, one token each in the vocabularies of the models
//! that use them (Qwen3's `tokenizer.json` ids 151667 and 151668; DeepSeek-R1 and its
//! distills). Qwen3 opens its thinking with `<think>` as its first generated token; the
//! DeepSeek-R1 distills' templates end the generation prompt with `<think>\n`, so the model
//! starts inside its thinking. Both templates have a switch, `enable_thinking`: Qwen3's writes
//! an empty `<think>\n\n</think>\n\n` when it is false, the R1 template in llama.cpp's
//! `models/templates/` closes the tag. The API's `reasoning_effort` sets it (`ChatInput`).
//!
//! Owns: those three things. May use: the tokenizer. Never: HTTP, the scheduler loop.

use super::tokenizer::ModelTokenizer;

/// The tag that opens the thinking.
pub const THINK_OPEN: &str = "<think>";
/// The tag that closes it.
pub const THINK_CLOSE: &str = "</think>";

/// How a prompt's generation reasons: the tags' token ids and whether the prompt already
/// opened the thinking. `None` in a `Prompt` when the model does not reason or was told not to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    /// `<think>`'s token id.
    pub open_id: u32,
    /// `</think>`'s token id.
    pub close_id: u32,
    /// The rendered prompt ends with `<think>` (and whitespace): generation starts thinking.
    pub open_in_prompt: bool,
}

impl Reasoning {
    /// Whether a model with `tokenizer` and chat template source `template` reasons: both tags
    /// are single tokens of its vocabulary and its template names `</think>` (Qwen3-Coder has
    /// the tokens but a template that never thinks). Returns the spec for a prompt that does
    /// not open the thinking itself.
    pub fn of_model(tokenizer: &ModelTokenizer, template: &str) -> Option<Self> {
        if !template.contains(THINK_CLOSE) {
            return None;
        }
        let id = |t: &str| match tokenizer.encode(t).ok()?.as_slice() {
            [id] => Some(*id),
            _ => None,
        };
        Some(Self {
            open_id: id(THINK_OPEN)?,
            close_id: id(THINK_CLOSE)?,
            open_in_prompt: false,
        })
    }

    /// The spec for `rendered`, the prompt text of a model that reasons: `None` when the
    /// prompt already closed the thinking (thinking switched off), else open or not as the
    /// prompt ends.
    pub fn for_prompt(self, rendered: &str) -> Option<Self> {
        let end = rendered.trim_end();
        if end.ends_with(THINK_CLOSE) {
            return None;
        }
        Some(Self {
            open_in_prompt: end.ends_with(THINK_OPEN),
            ..self
        })
    }
}

/// Counts the thinking tokens of one generation, token by token: from `<think>` (the first
/// generated token, or the prompt's end) through `</think>`, both tags included. A stop token
/// is never counted (the scheduler does not pass it).
#[derive(Debug, Clone, Default)]
pub struct ReasoningCounter {
    spec: Option<Reasoning>,
    thinking: bool,
    /// Tokens seen so far.
    seen: usize,
    /// Thinking tokens so far (OpenAI's `completion_tokens_details.reasoning_tokens`).
    pub tokens: usize,
}

impl ReasoningCounter {
    /// A counter for a generation of a prompt with `spec` (`None`: counts nothing).
    pub fn new(spec: Option<Reasoning>) -> Self {
        Self {
            spec,
            thinking: spec.is_some_and(|s| s.open_in_prompt),
            seen: 0,
            tokens: 0,
        }
    }

    /// Take the next generated token.
    pub fn step(&mut self, tok: u32) {
        let Some(spec) = self.spec else { return };
        if self.seen == 0 && tok == spec.open_id {
            self.thinking = true;
        }
        self.seen += 1;
        if self.thinking {
            self.tokens += 1;
            if tok == spec.close_id {
                self.thinking = false;
            }
        }
    }
}

/// One piece of split text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Thinking text (`reasoning_content`).
    Reasoning(String),
    /// Answer text (`content`).
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first text: it may open with `<think>`.
    Start,
    /// Inside the thinking.
    Thinking,
    /// Right after `</think>`: whitespace before the answer is dropped.
    Closed,
    /// In the answer.
    Answer,
}

/// Splits one generation's text into reasoning and answer as it streams. Text that could be
/// the start of a tag is held back; the newlines that pad the thinking (`<think>\n`,
/// `\n</think>\n\n`) are dropped; text after a second `<think>` is answer text.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    state: State,
    pending: String,
    /// Reasoning text was given out: later whitespace-only text is not leading padding.
    started: bool,
}

impl ReasoningSplitter {
    /// A splitter for a generation of a prompt with `spec`.
    pub fn new(spec: &Reasoning) -> Self {
        Self {
            state: if spec.open_in_prompt {
                State::Thinking
            } else {
                State::Start
            },
            pending: String::new(),
            started: false,
        }
    }

    /// Take a piece of generated text; the pieces ready now.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            let before = (self.state, self.pending.len());
            self.advance(&mut out);
            if (self.state, self.pending.len()) == before {
                return out;
            }
        }
    }

    /// The end of the text: what was held back (unfinished thinking stays reasoning).
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Thinking => {
                let t = rest.trim_end();
                let t = if self.started { t } else { t.trim_start() };
                nonempty(Piece::Reasoning, t)
            }
            State::Start | State::Answer => nonempty(Piece::Content, &rest),
            State::Closed => Vec::new(),
        }
    }

    fn advance(&mut self, out: &mut Vec<Piece>) {
        match self.state {
            State::Start => {
                let body = self.pending.trim_start();
                if let Some(rest) = body.strip_prefix(THINK_OPEN) {
                    self.pending = rest.to_owned();
                    self.state = State::Thinking;
                } else if !(body.is_empty() || THINK_OPEN.starts_with(body)) {
                    self.state = State::Answer;
                }
            }
            State::Thinking => self.think(out),
            State::Closed => {
                let body = self.pending.trim_start();
                if !body.is_empty() {
                    self.pending = body.to_owned();
                    self.state = State::Answer;
                } else {
                    self.pending.clear();
                }
            }
            State::Answer => {
                out.extend(nonempty(Piece::Content, &std::mem::take(&mut self.pending)));
            }
        }
    }

    /// Inside the thinking: give out text up to `</think>` or up to what could begin it, less
    /// trailing whitespace (it may pad the closing tag).
    fn think(&mut self, out: &mut Vec<Piece>) {
        if !self.started {
            let body = self.pending.trim_start_matches(['\n', '\r']);
            self.pending = body.to_owned();
        }
        if let Some(at) = self.pending.find(THINK_CLOSE) {
            let text = self.pending[..at].trim_end().to_owned();
            self.pending.drain(..at + THINK_CLOSE.len());
            out.extend(nonempty(Piece::Reasoning, &text));
            self.state = State::Closed;
            return;
        }
        let hold = (1..THINK_CLOSE.len())
            .rev()
            .find(|&k| self.pending.ends_with(&THINK_CLOSE[..k]))
            .unwrap_or(0);
        let upto = self.pending.len() - hold;
        let ready = self.pending[..upto].trim_end().len();
        if ready > 0 {
            let text: String = self.pending.drain(..ready).collect();
            self.started = true;
            out.push(Piece::Reasoning(text));
        }
    }
}

fn nonempty(f: fn(String) -> Piece, t: &str) -> Vec<Piece> {
    if t.is_empty() {
        Vec::new()
    } else {
        vec![f(t.to_owned())]
    }
}

/// A whole generation's text split: the reasoning (`None` when there was none) and the answer.
pub fn split_all(spec: &Reasoning, text: &str) -> (Option<String>, String) {
    let mut s = ReasoningSplitter::new(spec);
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let (mut reasoning, mut content) = (String::new(), String::new());
    for p in pieces {
        match p {
            Piece::Reasoning(t) => reasoning.push_str(&t),
            Piece::Content(t) => content.push_str(&t),
        }
    }
    ((!reasoning.is_empty()).then_some(reasoning), content)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Reasoning = Reasoning {
        open_id: 1,
        close_id: 2,
        open_in_prompt: false,
    };
    const IN_PROMPT: Reasoning = Reasoning {
        open_in_prompt: true,
        ..OPEN
    };

    /// Every way of cutting `text` into two pieces splits as the whole does.
    fn splits_alike(spec: &Reasoning, text: &str) -> (Option<String>, String) {
        let whole = split_all(spec, text);
        for (cut, _) in text.char_indices() {
            let mut s = ReasoningSplitter::new(spec);
            let mut pieces = s.push(&text[..cut]);
            pieces.extend(s.push(&text[cut..]));
            pieces.extend(s.finish());
            let (mut r, mut c) = (String::new(), String::new());
            for p in pieces {
                match p {
                    Piece::Reasoning(t) => r.push_str(&t),
                    Piece::Content(t) => c.push_str(&t),
                }
            }
            assert_eq!(
                ((!r.is_empty()).then_some(r), c),
                whole,
                "cut at {cut} of {text:?}"
            );
        }
        whole
    }

    #[test]
    fn qwen3_thinking_then_answer() {
        let got = splits_alike(
            &OPEN,
            "<think>\nThe capital is Paris.\n\nSo: Paris.\n</think>\n\nParis.",
        );
        assert_eq!(
            got,
            (
                Some("The capital is Paris.\n\nSo: Paris.".into()),
                "Paris.".into()
            )
        );
    }

    #[test]
    fn r1_thinking_opened_by_the_prompt() {
        let got = splits_alike(&IN_PROMPT, "Okay, 2+2.\n</think>\n\n**4**");
        assert_eq!(got, (Some("Okay, 2+2.".into()), "**4**".into()));
    }

    #[test]
    fn no_thinking_is_all_answer_and_a_late_tag_is_text() {
        assert_eq!(
            splits_alike(&OPEN, "Paris, not <think>."),
            (None, "Paris, not <think>.".into())
        );
        assert_eq!(splits_alike(&OPEN, "<thin"), (None, "<thin".into()));
        assert_eq!(
            splits_alike(&OPEN, "<think>\n\n</think>\n\nHi"),
            (None, "Hi".into())
        );
    }

    #[test]
    fn thinking_cut_short_stays_reasoning() {
        assert_eq!(
            splits_alike(&OPEN, "<think>\nLet me see </thi"),
            (Some("Let me see </thi".into()), String::new())
        );
    }

    #[test]
    fn counter_counts_from_the_open_tag_through_the_close_tag() {
        let mut c = ReasoningCounter::new(Some(OPEN));
        for t in [1, 7, 8, 2, 9, 9] {
            c.step(t);
        }
        assert_eq!(c.tokens, 4);
        let mut c = ReasoningCounter::new(Some(IN_PROMPT));
        for t in [7, 2, 9] {
            c.step(t);
        }
        assert_eq!(c.tokens, 2);
        let mut c = ReasoningCounter::new(Some(OPEN));
        for t in [9, 1, 7, 2] {
            c.step(t);
        }
        assert_eq!(c.tokens, 0, "a tag after the first token is not thinking");
        let mut c = ReasoningCounter::new(None);
        c.step(1);
        assert_eq!(c.tokens, 0);
    }

    #[test]
    fn prompt_end_decides_the_state() {
        assert_eq!(OPEN.for_prompt("<|im_start|>assistant\n"), Some(OPEN));
        assert_eq!(OPEN.for_prompt("<｜Assistant｜><think>\n"), Some(IN_PROMPT));
        assert_eq!(
            OPEN.for_prompt("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            None
        );
    }
}
