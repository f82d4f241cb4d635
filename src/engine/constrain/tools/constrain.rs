//! The grammar of a tool call (Lark, llguidance's dialect): the call's layout is fixed, name
//! first (one of the offered tools), then `arguments` constrained to that tool's `parameters`
//! schema, with the bounded-whitespace JSON options of `engine::grammar`. `required` and a named
//! function: constrained from the first token; `auto`: the grammar starts after the trigger
//! (`<tool_call>`), or when the message opens with a bare JSON call (`lead`); `none`: no grammar.
//!
//! Owns: `ToolFormat::grammar`. May use: `format`, `lead`, `schema`, `engine::grammar`.

use super::format::ToolFormat;
use super::lead;
use super::schema::call_schema;
use crate::engine::constrain::grammar::{with_json_options, GrammarSpec, LeadSpec, Start};
use crate::engine::text::chat::{ToolChoice, ToolSpec};

impl ToolFormat {
    /// The Lark grammar of the calls `choice` allows, and when it starts: from the first token,
    /// or for `auto` lazily, after the format's trigger (the grammar then covers only what
    /// follows it) or when the message opens with a bare JSON call (`lead`). `None` for
    /// `ToolChoice::None`. `parallel` allows more than one call, except for a named function,
    /// which is called exactly once, and in `Llama3`, whose calls are one bare JSON object.
    pub fn grammar(
        self,
        tools: &[ToolSpec],
        choice: &ToolChoice,
        parallel: bool,
    ) -> Option<(GrammarSpec, Start)> {
        let offered: Vec<&ToolSpec> = match choice {
            ToolChoice::None => return None,
            ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).collect(),
            ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        };
        let auto = matches!(choice, ToolChoice::Auto);
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
        let lit = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let mut lark = String::from("%llguidance {}\n");
        // A named function is called once, as OpenAI answers `tool_choice: {function}`.
        let parallel = parallel && !matches!(choice, ToolChoice::Function(_));
        let more = if parallel {
            format!("({} call)*", lit(self.between()))
        } else {
            String::new()
        };
        let body = format!(
            "{} call {more} {}",
            lit(self.open_rest()),
            lit(self.close())
        );
        let start = if auto {
            lark.push_str(&format!("start: {body}\n"));
            lazy()
        } else {
            lark.push_str(&format!("start: {} {body}\n", lit(self.trigger())));
            Start::Now
        };
        let alts: Vec<String> = (0..offered.len()).map(|i| format!("call_{i}")).collect();
        lark.push_str(&format!("call: {}\n", alts.join(" | ")));
        for (i, t) in offered.iter().enumerate() {
            lark.push_str(&format!(
                "call_{i}: %json {}\n",
                serde_json::to_string(&with_json_options(&call_schema(t, self.args_key())))
                    .unwrap_or_default()
            ));
        }
        Some((GrammarSpec::Lark(lark), start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::constrain::grammar;
    use crate::engine::constrain::tools::format::tests::weather;

    #[test]
    fn grammars_compile_for_every_choice_and_format() {
        for f in [ToolFormat::Hermes, ToolFormat::SmolLm, ToolFormat::Llama3] {
            for choice in [
                ToolChoice::Auto,
                ToolChoice::Required,
                ToolChoice::Function("get_weather".into()),
            ] {
                for parallel in [true, false] {
                    let (g, start) = f.grammar(&[weather()], &choice, parallel).unwrap();
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
            assert!(f.grammar(&[weather()], &ToolChoice::None, true).is_none());
        }
    }
}
