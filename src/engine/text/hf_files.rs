//! The text-side files of a Hugging Face checkpoint directory: `tokenizer.json` (loaded by the
//! `tokenizers` crate as is), `tokenizer_config.json` (BOS/EOS tokens, `add_bos_token`, the chat
//! template), `chat_template.jinja` (newer repositories keep the template there) and
//! `generation_config.json` (`eos_token_id`, one id or a list).
//!
//! Uses `tokenizers` and `serde_json` only.

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::tokenizer::{ModelTokenizer, END_OF_TURN};

fn read_json(path: &Path) -> anyhow::Result<Option<Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = std::fs::read(path)?;
    Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!("`{}` is not JSON: {e}", path.display())
    })?))
}

/// A special token in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// The chat template of a directory: `chat_template.jinja`, else `tokenizer_config.json`'s
/// `chat_template` (a string, or a list of `{name, template}` where `default` is taken).
///
/// # Errors
/// Unreadable files.
pub fn chat_template(dir: &Path) -> anyhow::Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.exists() {
        return Ok(Some(std::fs::read_to_string(jinja)?));
    }
    let Some(cfg) = read_json(&dir.join("tokenizer_config.json"))? else {
        return Ok(None);
    };
    Ok(match cfg.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    })
}

impl ModelTokenizer {
    /// Build from `tokenizer.json` plus the optional config files of `dir`.
    ///
    /// BOS is prepended when `add_bos_token` says so, or (when absent) when the tokenizer's own
    /// post-processor adds it. Stop ids: `generation_config.json`'s `eos_token_id`, the EOS
    /// token, and end-of-turn markers that are special tokens of this vocabulary.
    ///
    /// # Errors
    /// Missing or malformed `tokenizer.json`, malformed config files.
    pub fn from_hf_dir(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&path)
            .map_err(|e| anyhow::anyhow!("cannot load `{}`: {e}", path.display()))?;
        let cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let generation = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
        let bos_text = token_text(cfg.get("bos_token")).unwrap_or_default();
        let eos_text = token_text(cfg.get("eos_token")).unwrap_or_default();
        let bos_id = tokenizer.token_to_id(&bos_text);
        let add_bos = match cfg.get("add_bos_token").and_then(Value::as_bool) {
            Some(b) => b,
            None => bos_id.is_some_and(|bos| {
                tokenizer
                    .encode("", true)
                    .is_ok_and(|e| e.get_ids().first() == Some(&bos))
            }),
        };
        let mut stop_ids: Vec<u32> = match generation.get("eos_token_id") {
            Some(Value::Array(ids)) => ids
                .iter()
                .filter_map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect(),
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .into_iter()
                .collect(),
            None => Vec::new(),
        };
        let specials: Vec<String> = tokenizer
            .get_added_tokens_decoder()
            .values()
            .filter(|t| t.special)
            .map(|t| t.content.clone())
            .collect();
        let markers = std::iter::once(eos_text.as_str())
            .chain(END_OF_TURN)
            .filter(|m| !m.is_empty() && specials.iter().any(|s| s == m));
        for m in markers {
            if let Some(id) = tokenizer.token_to_id(m) {
                if !stop_ids.contains(&id) {
                    stop_ids.push(id);
                }
            }
        }
        anyhow::ensure!(
            !stop_ids.is_empty(),
            "`{}` names no EOS or end-of-turn token",
            dir.display()
        );
        Ok(Self {
            tokenizer,
            bos_id,
            add_bos,
            stop_ids,
            bos_text,
            eos_text,
            fragment_normalizer: None,
            fragments: std::sync::OnceLock::new(),
            token_bytes: std::sync::OnceLock::new(),
        })
    }
}
