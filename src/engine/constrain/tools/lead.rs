//! Calls written as bare JSON at the start of a message: `{"name": ..., "arguments": ...}`,
//! optionally inside a Markdown fence (```` ```json ```` ... ```` ``` ````).
//!
//! Models trained weakly on their tool format answer this way: under `tool_choice: "auto"`,
//! Qwen2.5-Coder-1.5B-Instruct answers the weather question with a fenced JSON call instead of
//! its `<tool_call>` tag (measured 2026-11-23; peers report the same of the Coder family, and
//! llama.cpp's lazy grammar triggers on the same shape). So under `auto` this is the second way
//! a call opens, beside the format's trigger tag: one call, and only at the start of the message.
//! It is also Llama 3.x's own format (`{"name": ..., "parameters": ...}`), so for `ToolFormat::Llama3`
//! this grammar is the whole call grammar. Either key, `arguments` or `parameters`, is accepted.
//!
//! The grammar (`grammar()`, started by `grammar::Start::Lazy` with this lead) follows the
//! message unconstrained while every token fits it, and takes over once `check` sees the call's
//! header through `"arguments":`; by then the matcher has accepted the function name, so it is
//! one of the offered tools. The parser (`parse`) reads the same prefix with `opening` and the
//! same header reader, and refuses names that were not offered, so text that the grammar gave up
//! on is content there too. Whitespace is bounded by the grammar (`grammar::MAX_PRETTY_GAP` per
//! gap; at most `MAX_LEAD_WS` before the call), not by the parser: a model that writes more
//! whitespace than that inside the header before the grammar takes over yields a call read
//! without the grammar's guarantee (not seen in practice).
//!
//! The call may also come in doubled braces, `{{"name": ..., "arguments": {...}}}`: the chat
//! template in Qwen2.5-Coder's GGUF files shows the call format as `{{"name": <function-name>,
//! ...}}` (a Python format string printed unformatted), and the model copies it (3 of 10 first
//! turns at default temperature, measured on the weather prompt). The outer pair is read as
//! part of the opening and the closing, like a fence.

use super::header::{read_header, Header};
use super::schema::call_schema;
use crate::engine::constrain::grammar::{
    pretty_json_options, with_options, GrammarSpec, LeadCheck,
};
use crate::engine::text::chat::ToolSpec;

/// Whitespace allowed before the call or its fence, in bytes.
pub const MAX_LEAD_WS: usize = 4;

/// The fence lines that may open the call, longest first.
const FENCES: [&str; 2] = ["```json\n", "```\n"];

/// Where a message stands with respect to opening with a bare JSON call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Not a bare call.
    No,
    /// A prefix of one: more text is needed.
    Maybe,
    /// The call's `{` starts at byte `used` (after whitespace, the fence if `fenced`, and the
    /// outer `{` of the doubled form if `doubled`).
    Open {
        fenced: bool,
        doubled: bool,
        used: usize,
    },
}

/// Read the start of a message: `[ws]{0,4}` then an optional fence line, then `{` or `{{`.
pub fn opening(text: &str) -> Opening {
    let body = text.trim_start_matches([' ', '\n']);
    let ws = text.len() - body.len();
    if ws > MAX_LEAD_WS {
        return Opening::No;
    }
    if body.is_empty() {
        return Opening::Maybe;
    }
    let (fenced, rest) = match FENCES.iter().find_map(|f| body.strip_prefix(f)) {
        Some(r) => (true, r),
        None if FENCES.iter().any(|f| f.starts_with(body)) => return Opening::Maybe,
        None => (false, body),
    };
    if rest.is_empty() {
        return Opening::Maybe;
    }
    if rest == "{" {
        // `{` or the first of `{{`: the next character decides.
        return Opening::Maybe;
    }
    if !rest.starts_with('{') {
        return Opening::No;
    }
    let doubled = rest.starts_with("{{");
    Opening::Open {
        fenced,
        doubled,
        used: text.len() - rest.len() + usize::from(doubled),
    }
}

/// The lead check of `grammar::LeadSpec`: commit once the header (`{"name": "...",
/// "arguments":` and the first character of the arguments) has been read.
pub fn check(text: &str) -> LeadCheck {
    match opening(text) {
        Opening::No => LeadCheck::Abandon,
        Opening::Maybe => LeadCheck::Undecided,
        Opening::Open { used, .. } => match read_header(&text[used..], &["{"]) {
            Header::Incomplete => LeadCheck::Undecided,
            Header::Bad => LeadCheck::Abandon,
            Header::Call { .. } => LeadCheck::Commit,
        },
    }
}

/// The lead grammar of `offered`: optional leading whitespace, then one call object (name one
/// of `offered`, then `arguments`, or Llama's `parameters`, in that tool's schema), bare or
/// fenced, in doubled braces or not, in bounded pretty-printed JSON.
pub fn grammar(offered: &[&ToolSpec]) -> GrammarSpec {
    GrammarSpec::Lark(format!(
        "%llguidance {{}}\nstart: {START}\n{}",
        rules(offered)
    ))
}

/// The right-hand side of a rule that is the lead call (for grammars that offer it beside
/// other alternatives, with `rules`).
pub const START: &str = "LEAD_WS? lead_body";

/// `START` without the Markdown fence and the doubled braces: beside a JSON answer, which has
/// neither, they would steer every message that opens with them into a call (Qwen2.5-Coder
/// opens with `{{` when its first choice, plain text, is masked).
pub const START_PLAIN: &str = "LEAD_WS? lead_call";

/// The rules of the lead grammar without its `start`; every name begins with `lead_` or is
/// one of the terminals `LEAD_WS`, `FENCE` and `FENCE_END`.
pub fn rules(offered: &[&ToolSpec]) -> String {
    let mut lark = String::new();
    lark.push_str("lead_body: lead_inner | FENCE lead_inner FENCE_END\n");
    lark.push_str("lead_inner: lead_call | \"{\" lead_call \"}\"\n");
    lark.push_str(&format!("LEAD_WS: /[ \\n]{{1,{MAX_LEAD_WS}}}/\n"));
    lark.push_str("FENCE: /```(json)?\\n/\n");
    lark.push_str("FENCE_END: /\\n?```/\n");
    let mut alts = Vec::new();
    for (i, t) in offered.iter().enumerate() {
        for key in ["arguments", "parameters"] {
            let rule = format!("lead_call_{i}_{}", &key[..1]);
            let schema = with_options(&call_schema(t, key), pretty_json_options());
            lark.push_str(&format!(
                "{rule}: %json {}\n",
                serde_json::to_string(&schema).unwrap_or_default()
            ));
            alts.push(rule);
        }
    }
    lark.push_str(&format!("lead_call: {}\n", alts.join(" | ")));
    lark
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_reads_bare_and_fenced_calls() {
        assert_eq!(opening(""), Opening::Maybe);
        assert_eq!(opening("\n``"), Opening::Maybe);
        assert_eq!(opening("```js"), Opening::Maybe);
        assert_eq!(opening("```json\n"), Opening::Maybe);
        assert_eq!(opening("```json\n{"), Opening::Maybe);
        assert_eq!(
            opening("```json\n{\n"),
            Opening::Open {
                fenced: true,
                doubled: false,
                used: 8
            }
        );
        assert_eq!(
            opening(" {\"name\""),
            Opening::Open {
                fenced: false,
                doubled: false,
                used: 1
            }
        );
        assert_eq!(
            opening("{{\"name\""),
            Opening::Open {
                fenced: false,
                doubled: true,
                used: 1
            }
        );
        assert_eq!(opening("```python\n"), Opening::No);
        assert_eq!(opening("Sure"), Opening::No);
        assert_eq!(opening("      {"), Opening::No);
    }

    #[test]
    fn check_commits_after_the_header_and_abandons_other_json() {
        let pretty = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {";
        assert_eq!(check(&pretty[..20]), LeadCheck::Undecided);
        assert_eq!(check(pretty), LeadCheck::Commit);
        assert_eq!(check("{\"title\": \"x\"}"), LeadCheck::Abandon);
        assert_eq!(
            check("{{\"name\": \"get_weather\", \"arguments\": {"),
            LeadCheck::Commit
        );
        assert_eq!(check("{{ x }}"), LeadCheck::Abandon);
        assert_eq!(check("Paris is sunny."), LeadCheck::Abandon);
    }
}
