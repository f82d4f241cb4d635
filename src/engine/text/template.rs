//! Chat templates: the model's own `tokenizer.chat_template` (Jinja, rendered with minijinja and
//! its Python-compatibility methods), or a built-in fallback per family when the file has none.
//!
//! Fallbacks: `gemma` (Gemma's turn format: `<start_of_turn>user ... <end_of_turn>`, system text
//! folded into the first user turn, as Google's Gemma template does), `chatml` (everything else),
//! and two a catalogue entry names for files made before GGUF stored templates: `llama-2`
//! (`[INST]`) and `zephyr` (TinyLlama Chat).

use minijinja::{context, Environment, Error, ErrorKind};

use super::chat::{ChatMessage, ToolSpec};
use super::tool_format::PyFormatter;

/// Gemma's turn format, after the template shipped with Gemma 2/3 instruction models.
const GEMMA_TEMPLATE: &str = "{{ bos_token }}\
{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}\
{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}\
{%- for message in loop_messages -%}\
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\
{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

/// Llama 2 Chat's format as Meta's reference code builds it (`llama/generation.py`,
/// `chat_completion`): each user turn `<s>[INST] text [/INST]`, each answer ` text </s>`, the
/// system prompt inside the first user turn between `<<SYS>>` and `<</SYS>>`. Other roles
/// (tool results) are user turns. For GGUF files made before chat templates were stored in
/// them (TheBloke's Llama-2-7B-Chat-GGUF).
const LLAMA2_TEMPLATE: &str = "\
{%- if messages and messages[0]['role'] == 'system' -%}\
{%- set system = messages[0]['content'] | trim -%}{%- set turns = messages[1:] -%}\
{%- else -%}{%- set system = '' -%}{%- set turns = messages -%}{%- endif -%}\
{%- for m in turns -%}\
{%- if m['role'] == 'assistant' -%}{{ ' ' + m['content'] | trim + ' ' + eos_token }}\
{%- else -%}\
{%- set text = m['content'] | trim -%}\
{%- if loop.first and system -%}{%- set text = '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + text -%}{%- endif -%}\
{{ bos_token + '[INST] ' + text + ' [/INST]' }}\
{%- endif -%}\
{%- endfor -%}";

/// Zephyr's turn format (`<|user|>` ... `</s>`), which TinyLlama-1.1B-Chat-v1.0 was tuned on
/// (its `tokenizer_config.json`): for GGUF files that do not carry it.
const ZEPHYR_TEMPLATE: &str = "{%- for m in messages -%}\
{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}";

/// ChatML, used by many instruction models (SmolLM2, Qwen).
const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Where the template came from: `model-files` or `builtin:<name>`.
    pub source: String,
    /// The template's Jinja source (to tell whether it renders tools itself).
    pub text: String,
}

impl ChatTemplate {
    /// Use the file's template if any, else the built-in one `builtin` names: a name of
    /// `catalog::BUILTIN_TEMPLATES` (the catalogue's `chat_template`) or an architecture (`gemma*` -> Gemma
    /// turns, anything else -> ChatML).
    ///
    /// # Errors
    /// A template that does not compile.
    pub fn new(from_file: Option<&str>, builtin: &str) -> anyhow::Result<Self> {
        let (source, text) = match from_file {
            Some(t) => ("model-files".to_owned(), t.to_owned()),
            None if builtin == "llama-2" => {
                ("builtin:llama-2".to_owned(), LLAMA2_TEMPLATE.to_owned())
            }
            None if builtin == "zephyr" => {
                ("builtin:zephyr".to_owned(), ZEPHYR_TEMPLATE.to_owned())
            }
            None if builtin.starts_with("gemma") => {
                ("builtin:gemma".to_owned(), GEMMA_TEMPLATE.to_owned())
            }
            None => ("builtin:chatml".to_owned(), CHATML_TEMPLATE.to_owned()),
        };
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| anyhow::anyhow!("template syntax: {e}"))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", text.clone())
            .map_err(|e| anyhow::anyhow!("chat template does not compile: {e}"))?;
        Ok(Self { env, source, text })
    }

    /// Render `messages` with `add_generation_prompt = true`; `tools` is the template's `tools`
    /// variable (`none` when empty, as `transformers` passes it). `strftime_now(fmt)` formats
    /// the local time now, as `transformers` does (Llama 3.2 writes today's date with it).
    /// `enable_thinking` is left undefined, as `transformers` leaves it (`render_thinking` sets
    /// it).
    ///
    /// # Errors
    /// Template runtime errors (including `raise_exception` calls), as text.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        bos: &str,
        eos: &str,
    ) -> Result<String, String> {
        self.render_thinking(messages, tools, bos, eos, None)
    }

    /// `render` with the template's `enable_thinking` switch set to `thinking` (Qwen3's and
    /// llama.cpp's DeepSeek-R1 templates read it); `None` leaves it undefined, which templates
    /// read differently (Qwen3's as on, llama.cpp's R1 and Command R7B's as off), so only
    /// thinking models get it set.
    ///
    /// # Errors
    /// As `render`.
    pub fn render_thinking(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        bos: &str,
        eos: &str,
        thinking: Option<bool>,
    ) -> Result<String, String> {
        let now = chrono::Local::now().naive_local();
        self.render_full(messages, tools, (bos, eos), thinking, now)
    }

    /// `render` with `strftime_now` reading `now` instead of the clock (for fixtures).
    ///
    /// # Errors
    /// As `render`.
    pub fn render_at(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        bos: &str,
        eos: &str,
        now: chrono::NaiveDateTime,
    ) -> Result<String, String> {
        self.render_full(messages, tools, (bos, eos), None, now)
    }

    fn render_full(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        (bos, eos): (&str, &str),
        thinking: Option<bool>,
        now: chrono::NaiveDateTime,
    ) -> Result<String, String> {
        let tmpl = self.env.get_template("chat").map_err(|e| e.to_string())?;
        let tools =
            (!tools.is_empty()).then(|| minijinja::Value::from(minijinja::value::Serde(tools)));
        let strftime_now = minijinja::Value::from_function(move |fmt: String| strftime(now, &fmt));
        tmpl.render(context! {
            messages => minijinja::Value::from(minijinja::value::Serde(messages)),
            tools => tools,
            add_generation_prompt => true,
            enable_thinking => thinking.map_or(minijinja::Value::UNDEFINED, minijinja::Value::from),
            bos_token => bos,
            eos_token => eos,
            strftime_now => strftime_now,
        })
        .map_err(|e| e.to_string())
    }
}

/// Python's `datetime.strftime(fmt)` of `now` (chrono's specifiers are Python's, plus some).
///
/// # Errors
/// A format chrono cannot read (an unknown `%` specifier).
fn strftime(now: chrono::NaiveDateTime, fmt: &str) -> Result<String, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", now.format(fmt)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {fmt:?}"),
        )
    })?;
    Ok(out)
}

/// `tojson` as `transformers` defines it for chat templates: Python's `json.dumps` with
/// `ensure_ascii=False` (separators `", "` and `": "`, no HTML escaping; minijinja's own filter
/// escapes `<`, `>`, `&` and `'`), `indent` as in Python.
fn tojson(
    value: &minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> Result<minijinja::Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let res = match indent {
        Some(n) => {
            let pad = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(value, &mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
            serde::Serialize::serialize(value, &mut ser)
        }
    };
    res.map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(minijinja::Value::from_safe_string(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::text::chat::Role;

    fn msgs() -> Vec<ChatMessage> {
        vec![
            ChatMessage::text(Role::System, "Be brief."),
            ChatMessage::text(Role::User, "Hi"),
        ]
    }

    #[test]
    fn chatml_fallback_renders_generation_prompt() {
        let t = ChatTemplate::new(None, "llama").unwrap();
        assert_eq!(t.source, "builtin:chatml");
        let s = t.render(&msgs(), &[], "", "").unwrap();
        assert_eq!(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn gemma_fallback_folds_system_into_first_user_turn() {
        let t = ChatTemplate::new(None, "gemma3").unwrap();
        let s = t.render(&msgs(), &[], "<bos>", "<eos>").unwrap();
        assert_eq!(
            s,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn llama_2_fallback_follows_meta_reference_format() {
        let t = ChatTemplate::new(None, "llama-2").unwrap();
        assert_eq!(t.source, "builtin:llama-2");
        let mut m = msgs();
        m.push(ChatMessage::text(Role::Assistant, " Hello! "));
        m.push(ChatMessage::text(Role::User, "Bye"));
        let s = t.render(&m, &[], "<s>", "</s>").unwrap();
        assert_eq!(
            s,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]"
        );
    }

    #[test]
    fn zephyr_fallback_renders_tinyllama_turns() {
        let t = ChatTemplate::new(None, "zephyr").unwrap();
        let s = t.render(&msgs(), &[], "<s>", "</s>").unwrap();
        assert_eq!(
            s,
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"
        );
    }

    #[test]
    fn strftime_now_formats_the_given_time_and_refuses_bad_formats() {
        let t = ChatTemplate::new(Some("{{ strftime_now('%d %b %Y') }}"), "llama").unwrap();
        let day = chrono::NaiveDate::from_ymd_opt(2024, 7, 26)
            .and_then(|d| d.and_hms_opt(12, 0, 0))
            .unwrap();
        assert_eq!(
            t.render_at(&msgs(), &[], "", "", day).unwrap(),
            "26 Jul 2024"
        );
        let bad = ChatTemplate::new(Some("{{ strftime_now('%Q') }}"), "llama").unwrap();
        assert!(bad.render(&msgs(), &[], "", "").is_err());
    }

    #[test]
    fn file_template_with_python_methods_and_raise_exception() {
        let src = "{% for m in messages %}{% if m.role not in ['system','user'] %}{{ raise_exception('bad role') }}{% endif %}{{ m.content.strip().upper() }}|{% endfor %}";
        let t = ChatTemplate::new(Some(src), "llama").unwrap();
        assert_eq!(t.render(&msgs(), &[], "", "").unwrap(), "BE BRIEF.|HI|");
        let bad = vec![ChatMessage::text(Role::Assistant, "x")];
        assert!(t
            .render(&bad, &[], "", "")
            .unwrap_err()
            .contains("bad role"));
    }
}
