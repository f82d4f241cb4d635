//! Grammar-constrained decoding: JSON Schema and Lark grammars compiled by `llguidance` into a
//! per-sequence `Matcher` that says which tokens may come next.
//!
//! Protocol per decode step of a constrained sequence (see `sequence::sample_and_emit`): the
//! sampler picks a token from the unmasked logits; if the matcher accepts it (the cheap path,
//! most steps) nothing else is computed; otherwise the full token mask is computed, applied
//! (`-inf` for every forbidden token) and the sampler picks again. The accepted token is then
//! consumed. A lazy grammar (tool calls under `tool_choice: "auto"`) stays off until the
//! generated text contains its trigger, from then on it constrains what follows; or until the
//! message opens the way its lead grammar describes (`Start`, `LeadSpec`).
//!
//! JSON output has bounded whitespace: separators are exactly `", "` and `": "` and no other
//! whitespace is allowed between tokens (llguidance's `whitespace_flexible: false`), so a model
//! cannot loop on newlines until `max_tokens`.
//!
//! Owns: the token trie of a vocabulary (`GrammarEnv`), grammar compilation and matcher state.
//! May use: `llguidance`, `toktrie`, the engine's tokenizer. Never: HTTP or the ledger.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::engine::text::tokenizer::ModelTokenizer;

/// What a grammar is written in.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// A JSON Schema (draft 2020-12 subset that llguidance supports).
    JsonSchema(Value),
    /// A Lark grammar (llguidance's dialect; `%json {...}` embeds a schema).
    Lark(String),
}

/// JSON output options applied to every schema: bounded whitespace (see the module doc).
pub fn json_options() -> Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// Whitespace allowed in one gap between JSON tokens by `pretty_json_options`, in bytes.
pub const MAX_PRETTY_GAP: usize = 24;

/// JSON options that also admit pretty-printed JSON (newlines and indentation), still bounded:
/// at most one run of `MAX_PRETTY_GAP` whitespace bytes between two tokens. For calls written
/// as bare JSON (`tools::lead`), where models indent as they were trained to.
pub fn pretty_json_options() -> Value {
    serde_json::json!({
        "whitespace_pattern": format!("[\\x20\\x0A\\x0D\\x09]{{1,{MAX_PRETTY_GAP}}}"),
        "item_separator": ",",
        "key_separator": ":",
    })
}

/// Integers with no bound get the interoperable range of RFC 8259 section 6 (plus or minus
/// 2^53 - 1), so a model cannot write digits until `max_tokens`.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

fn bound_integers(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            let is_int = match o.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if is_int {
                if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
                    o.insert("minimum".into(), Value::from(-MAX_SAFE_INTEGER));
                }
                if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
                    o.insert("maximum".into(), Value::from(MAX_SAFE_INTEGER));
                }
            }
            for v in o.values_mut() {
                bound_integers(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// `schema` with tollgate's JSON output options (`x-guidance`) added and unbounded integers
/// bounded (see `MAX_SAFE_INTEGER`), for embedding in Lark.
pub fn with_json_options(schema: &Value) -> Value {
    with_options(schema, json_options())
}

/// `schema` with the JSON output `options` (`x-guidance`) and unbounded integers bounded.
pub fn with_options(schema: &Value, options: Value) -> Value {
    let mut s = schema.clone();
    bound_integers(&mut s);
    if let Value::Object(o) = &mut s {
        o.insert("x-guidance".into(), options);
    } else if let Value::Bool(true) = s {
        s = serde_json::json!({ "x-guidance": options });
    }
    s
}

/// OpenAI's `strict: true`: every object schema that declares `properties` and says nothing of
/// extra properties gets `additionalProperties: false` (recursively), so the output holds the
/// declared keys only.
pub fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            if o.contains_key("properties") {
                o.entry("additionalProperties")
                    .or_insert(Value::Bool(false));
            }
            for v in o.values_mut() {
                close_objects(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(close_objects),
        _ => {}
    }
}

fn top_level(spec: GrammarSpec) -> TopLevelGrammar {
    match spec {
        GrammarSpec::JsonSchema(schema) => {
            TopLevelGrammar::from_json_schema(with_json_options(&schema))
        }
        GrammarSpec::Lark(lark) => TopLevelGrammar::from_lark(lark),
    }
}

/// Check that `spec` compiles, without any model's vocabulary (a byte-level stand-in), so a
/// request with an invalid schema is refused before it is billed or queued.
///
/// # Errors
/// llguidance's message: the invalid or unsupported schema feature.
pub fn check(spec: &GrammarSpec) -> Result<(), String> {
    static FACTORY: std::sync::OnceLock<Result<ParserFactory, String>> = std::sync::OnceLock::new();
    let factory = FACTORY
        .get_or_init(|| {
            let env = llguidance::toktrie::ApproximateTokEnv::single_byte_env();
            let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
            f.quiet();
            Ok(f)
        })
        .as_ref()
        .map_err(Clone::clone)?;
    let grammar = top_level(spec.clone());
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        factory.create_parser(grammar).map(|_| ())
    }))
    .map_err(|_| "the grammar compiler failed on this schema".to_owned())?
    .map_err(|e| e.to_string())
}

/// A model vocabulary as llguidance sees it (one per loaded model, built on first use).
pub struct GrammarEnv {
    factory: ParserFactory,
}

/// `TokenizerEnv` over the engine's tokenizer: the trie of token bytes (special tokens marked
/// with `TokTrie::SPECIAL_TOKEN_MARKER`) and the tokenizer for forced text.
struct VocabEnv {
    trie: TokTrie,
    tokenizer: Arc<ModelTokenizer>,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.tokenizer
            .encode_fragment(&String::from_utf8_lossy(s))
            .unwrap_or_default()
    }
}

impl GrammarEnv {
    /// Build the token trie of `tokenizer` (every stop id counts as end of sequence).
    ///
    /// # Errors
    /// A vocabulary whose token bytes cannot be recovered (neither byte-level nor byte
    /// fallback), or no stop token.
    pub fn new(tokenizer: Arc<ModelTokenizer>) -> Result<Self, String> {
        let json: Value = serde_json::from_str(
            &tokenizer
                .tokenizer
                .to_string(false)
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        let words = std::panic::catch_unwind(|| {
            llguidance::token_bytes_from_tokenizer_json(&json).map_err(|e| e.to_string())
        })
        .map_err(|_| "the vocabulary's token bytes cannot be recovered".to_owned())??;
        let eos = *tokenizer
            .stop_ids
            .first()
            .ok_or("the model has no end-of-sequence token")?;
        let n = u32::try_from(words.len()).map_err(|e| e.to_string())?;
        let info = TokRxInfo::new(n, eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&tokenizer.stop_ids);
        let env: TokEnv = Arc::new(VocabEnv { trie, tokenizer });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Self { factory })
    }

    /// Compile `spec` into a fresh matcher that constrains from `start` on.
    ///
    /// # Errors
    /// The grammar (or the lead grammar) does not compile (llguidance's message).
    pub fn compile(&self, spec: GrammarSpec, start: Start) -> Result<Grammar, String> {
        let matcher = self.matcher(spec)?;
        let (trigger, lead) = match start {
            Start::Now => (None, None),
            Start::Lazy { trigger, lead } => {
                let lead = lead
                    .map(|l| -> Result<_, String> {
                        Ok(LeadState {
                            matcher: self.matcher(l.spec)?,
                            check: l.check,
                            text: String::new(),
                        })
                    })
                    .transpose()?;
                (Some(trigger), lead)
            }
        };
        Ok(Grammar {
            matcher,
            active: trigger.is_none(),
            trigger,
            seen: String::new(),
            lead,
        })
    }

    fn matcher(&self, spec: GrammarSpec) -> Result<Matcher, String> {
        let grammar = top_level(spec);
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }))
        .map_err(|_| "the grammar compiler failed on this grammar".to_owned())?
        .map_err(|e| e.to_string())?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(e),
            None => Ok(matcher),
        }
    }
}

/// When a compiled grammar starts to constrain.
#[derive(Debug, Clone)]
pub enum Start {
    /// From the first token.
    Now,
    /// Once the generated text contains `trigger` (the grammar covers what follows it), or,
    /// with `lead`, once the message opens the way the lead grammar describes.
    Lazy {
        trigger: String,
        lead: Option<LeadSpec>,
    },
}

/// A second way for a lazy grammar to start: a grammar for the whole message from its first
/// token, followed (unconstrained) while every token fits it, and switched on when `check`
/// says the text so far commits to it (tool calls written as bare JSON, `tools::lead`).
#[derive(Debug, Clone)]
pub struct LeadSpec {
    pub spec: GrammarSpec,
    pub check: fn(&str) -> LeadCheck,
}

/// What the text of a message so far says about its lead grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadCheck {
    /// Could still go either way.
    Undecided,
    /// The message is in the lead's form: constrain from here on.
    Commit,
    /// The message is not in the lead's form.
    Abandon,
}

/// A lead grammar being followed: its matcher has consumed every token of the message.
struct LeadState {
    matcher: Matcher,
    check: fn(&str) -> LeadCheck,
    text: String,
}

/// The constraint state of one sequence.
pub struct Grammar {
    matcher: Matcher,
    /// Text that switches the grammar on; `None`: on from the first token.
    trigger: Option<String>,
    active: bool,
    /// Text generated while off (only the tail that could still hold the trigger).
    seen: String,
    /// The lead grammar while the message may still be in its form.
    lead: Option<LeadState>,
}

impl Clone for Grammar {
    fn clone(&self) -> Self {
        Self {
            matcher: self.matcher.deep_clone(),
            trigger: self.trigger.clone(),
            active: self.active,
            seen: self.seen.clone(),
            lead: self.lead.as_ref().map(|l| LeadState {
                matcher: l.matcher.deep_clone(),
                check: l.check,
                text: l.text.clone(),
            }),
        }
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar")
            .field("trigger", &self.trigger)
            .field("active", &self.active)
            .field("lead", &self.lead.is_some())
            .finish_non_exhaustive()
    }
}

impl Grammar {
    /// Whether the grammar constrains the next token.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The cheap path: does the grammar accept `tok` next? Stop ids are accepted only where
    /// the grammar may end.
    pub fn allows(&mut self, tok: u32, stop_ids: &[u32]) -> bool {
        if stop_ids.contains(&tok) {
            return self.matcher.is_accepting().unwrap_or(false);
        }
        self.matcher.validate_tokens(&[tok]).unwrap_or(0) == 1
    }

    /// Set every token the grammar forbids to `-inf` in `logits` (`[vocab]`). Tokens past the
    /// vocabulary the trie knows are forbidden too. A matcher in error forbids all but EOS.
    pub fn mask(&mut self, logits: &mut [f32]) {
        let mask = self.matcher.compute_mask_or_eos().ok();
        for (i, l) in logits.iter_mut().enumerate() {
            let allowed = mask.as_ref().is_some_and(|m| {
                u32::try_from(i).is_ok_and(|t| (t as usize) < m.len() && m.is_allowed(t))
            });
            if !allowed {
                *l = f32::NEG_INFINITY;
            }
        }
    }

    /// Record an accepted (non-stop) token. Returns `false` when the matcher rejects it.
    pub fn consume(&mut self, tok: u32) -> bool {
        self.matcher.consume_token(tok).is_ok()
    }

    /// The grammar is complete and allows nothing more (the sequence should end).
    pub fn is_finished(&self) -> bool {
        self.active && self.matcher.is_stopped()
    }

    /// While off, watch the generated token `tok` and its text (`None` while it ends inside a
    /// UTF-8 character): the lead grammar, if any, follows every token and takes over when its
    /// check commits; otherwise the grammar switches on when the trigger appears, and text
    /// after the trigger within the same delta is fed to the matcher as tokens.
    pub fn observe(&mut self, tok: u32, text: Option<&str>, tokenizer: &ModelTokenizer) {
        if self.active {
            return;
        }
        if self.follow_lead(tok, text) {
            return;
        }
        let (Some(trigger), Some(text)) = (self.trigger.as_deref(), text) else {
            return;
        };
        self.seen.push_str(text);
        if let Some(at) = self.seen.find(trigger) {
            let rest = self.seen[at + trigger.len()..].to_owned();
            self.active = true;
            self.lead = None;
            self.seen.clear();
            if !rest.is_empty() {
                if let Ok(ids) = tokenizer.encode_fragment(&rest) {
                    let _ = self.matcher.consume_tokens(&ids);
                }
            }
        } else {
            let keep = self.seen.len().saturating_sub(trigger.len());
            let cut = (keep..=self.seen.len())
                .find(|&i| self.seen.is_char_boundary(i))
                .unwrap_or(self.seen.len());
            self.seen.drain(..cut);
        }
    }

    /// Feed `tok` to the lead grammar; `true` when the lead took over as the active grammar.
    fn follow_lead(&mut self, tok: u32, text: Option<&str>) -> bool {
        let Some(lead) = self.lead.as_mut() else {
            return false;
        };
        if lead.matcher.consume_token(tok).is_err() {
            self.lead = None;
            return false;
        }
        lead.text.push_str(text.unwrap_or_default());
        match (lead.check)(&lead.text) {
            LeadCheck::Undecided => false,
            LeadCheck::Abandon => {
                self.lead = None;
                false
            }
            LeadCheck::Commit => {
                if let Some(l) = self.lead.take() {
                    self.matcher = l.matcher;
                    self.active = true;
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_accepts_schemas_and_names_the_bad_feature() {
        let ok = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "required": ["a"]});
        assert!(check(&GrammarSpec::JsonSchema(ok)).is_ok());
        let bad = serde_json::json!({"type": "object", "properties": {"a": {"type": "strng"}}});
        let e = check(&GrammarSpec::JsonSchema(bad)).unwrap_err();
        assert!(e.contains("strng"), "{e}");
    }
}
