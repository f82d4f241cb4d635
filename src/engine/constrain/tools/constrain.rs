//! The grammar of a tool call (Lark, llguidance's dialect): the call's layout is fixed, name
//! first (one of the offered tools), then `arguments` constrained to that tool's `parameters`
//! schema, with the bounded-whitespace JSON options of `engine::grammar`. `required` and a named
//! function: constrained from the first token; `auto`: the grammar starts after the trigger
//! (`<tool_call>`), or when the message opens with a bare JSON call (`lead`); `auto` with a JSON
//! answer schema: from the first token, a call or the answer; `none`: no grammar.
//!
//! Owns: `ToolFormat::grammar`. May use: `format`, `lead`, `schema`, `engine::grammar`.

use super::lead;
use super::schema::call_schema;
use crate::engine::constrain::grammar::{with_json_options, GrammarSpec, LeadSpec, Start};
use crate::engine::text::chat::{ToolChoice, ToolSpec};
use crate::engine::text::tool_format::ToolFormat;
use serde_json::Value;

impl ToolFormat {
    /// The Lark grammar of the calls `choice` allows, and when it starts: from the first token,
    /// or for `auto` lazily, after the format's trigger (the grammar then covers only what
    /// follows it) or when the message opens with a bare JSON call (`lead`). `None` for
    /// `ToolChoice::None`. `parallel` allows more than one call, except for a named function,
    /// which is called exactly once, and in `Llama3`, whose calls are one bare JSON object.
    ///
    /// `answer`: under `auto`, the JSON Schema a message that is not a call must follow (a JSON
    /// `response_format` with tools); the grammar then starts at the first token and allows
    /// the answer, the tagged calls, or a bare call. Ignored for the other choices, which
    /// always call.
    pub fn grammar(
        self,
        tools: &[ToolSpec],
        choice: &ToolChoice,
        parallel: bool,
        answer: Option<&Value>,
    ) -> Option<(GrammarSpec, Start)> {
        let offered: Vec<&ToolSpec> = match choice {
            ToolChoice::None => return None,
            ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).collect(),
            ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        };
        let auto = matches!(choice, ToolChoice::Auto);
        if let (true, Some(schema)) = (auto, answer) {
            return Some((self.answer_or_calls(&offered, parallel, schema), Start::Now));
        }
        // `auto`: after the trigger, or when the message opens with a bare JSON call.
        let lazy = || Start::Lazy {
            trigger: self.trigger().to_owned(),
            lead: Some(LeadSpec {
                spec: lead::grammar(&offered),
                check: lead::check,
            }),
        };
        if self == Self::Llama3 {
            let start = if auto { lazy() } else { Start::Now };
            return Some((lead::grammar(&offered), start));
        }
        // A named function is called once, as OpenAI answers `tool_choice: {function}`.
        let parallel = parallel && !matches!(choice, ToolChoice::Function(_));
        let mut lark = String::from("%llguidance {}\n");
        let start = if auto {
            lark.push_str("start: tagged\n");
            lazy()
        } else {
            lark.push_str(&format!("start: {} tagged\n", lit(self.trigger())));
            Start::Now
        };
        lark.push_str(&self.tagged_rules(&offered, parallel));
        Some((GrammarSpec::Lark(lark), start))
    }

    /// `start: answer | <trigger> tagged | lead`: a JSON answer in `schema`, the format's
    /// tagged calls, or one bare call, neither fenced nor doubled (for `Llama3`: the answer or its bare call,
    /// after an optional `<|python_tag|>`).
    fn answer_or_calls(self, offered: &[&ToolSpec], parallel: bool, schema: &Value) -> GrammarSpec {
        let mut lark = String::from("%llguidance {}\n");
        let trigger = lit(self.trigger());
        if self == Self::Llama3 {
            lark.push_str(&format!(
                "start: answer | {trigger}? {}\n",
                lead::START_PLAIN
            ));
        } else {
            lark.push_str(&format!(
                "start: answer | {trigger} tagged | {}\n",
                lead::START_PLAIN
            ));
            lark.push_str(&self.tagged_rules(offered, parallel));
        }
        lark.push_str(&format!(
            "answer: %json {}\n",
            serde_json::to_string(&with_json_options(schema)).unwrap_or_default()
        ));
        lark.push_str(&lead::rules(offered));
        GrammarSpec::Lark(lark)
    }

    /// The rules `tagged` (what follows the trigger: the calls and the closing tag), `call`
    /// and `call_<i>` of the Hermes and SmolLM2 formats.
    fn tagged_rules(self, offered: &[&ToolSpec], parallel: bool) -> String {
        let more = if parallel {
            format!("({} call)*", lit(self.between()))
        } else {
            String::new()
        };
        let mut lark = format!(
            "tagged: {} call {more} {}\n",
            lit(self.open_rest()),
            lit(self.close())
        );
        let alts: Vec<String> = (0..offered.len()).map(|i| format!("call_{i}")).collect();
        lark.push_str(&format!("call: {}\n", alts.join(" | ")));
        for (i, t) in offered.iter().enumerate() {
            lark.push_str(&format!(
                "call_{i}: %json {}\n",
                serde_json::to_string(&with_json_options(&call_schema(t, self.args_key())))
                    .unwrap_or_default()
            ));
        }
        lark
    }
}

/// `s` as a Lark string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::constrain::grammar;
    use crate::engine::text::tool_format::tests::weather;

    #[test]
    fn grammars_compile_for_every_choice_and_format() {
        for f in [ToolFormat::Hermes, ToolFormat::SmolLm, ToolFormat::Llama3] {
            for choice in [
                ToolChoice::Auto,
                ToolChoice::Required,
                ToolChoice::Function("get_weather".into()),
            ] {
                for parallel in [true, false] {
                    let (g, start) = f.grammar(&[weather()], &choice, parallel, None).unwrap();
                    grammar::check(&g).unwrap_or_else(|e| panic!("{f:?} {choice:?}: {e}"));
                    match start {
                        Start::Now => assert_ne!(choice, ToolChoice::Auto),
                        Start::Lazy { lead, .. } => {
                            assert_eq!(choice, ToolChoice::Auto);
                            let lead = lead.expect("auto has a lead grammar");
                            grammar::check(&lead.spec).unwrap_or_else(|e| panic!("lead: {e}"));
                        }
                    }
                }
            }
            assert!(f
                .grammar(&[weather()], &ToolChoice::None, true, None)
                .is_none());
            let answer = serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
            let (g, start) = f
                .grammar(&[weather()], &ToolChoice::Auto, true, Some(&answer))
                .unwrap();
            assert!(matches!(start, Start::Now));
            grammar::check(&g).unwrap_or_else(|e| panic!("{f:?} answer or calls: {e}"));
        }
    }
}
