//! A Whisper vocabulary: its Hugging Face tokenizer, special tokens and suppression lists.

use std::path::Path;

use serde::Deserialize;

use super::languages;
use crate::audio::error::AudioError;

/// Special tokens and suppression lists of a Whisper vocabulary.
#[derive(Debug, Clone)]
pub struct Vocab {
    tokenizer: tokenizers::Tokenizer,
    pub eot: u32,
    pub sot: u32,
    pub sot_prev: u32,
    pub transcribe: u32,
    pub translate: u32,
    pub no_speech: u32,
    pub no_timestamps: u32,
    /// `<|0.00|>`; timestamp `i` (of 0.02 s) is `timestamp_begin + i`.
    pub timestamp_begin: u32,
    /// Tokens never sampled (`config.json` `suppress_ids`).
    pub suppress: Vec<u32>,
    /// Tokens never sampled first (`suppress_ids_begin`: a blank, end of text).
    pub suppress_begin: Vec<u32>,
    /// (code, token) of every language the model knows.
    pub languages: Vec<(String, u32)>,
    /// Characters of the longest token (byte-level BPE: one character per byte), so a text
    /// of more than `n` x this many bytes surely has more than `n` tokens.
    longest_token: usize,
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    suppress_ids: Vec<u32>,
    #[serde(default)]
    suppress_ids_begin: Vec<u32>,
}

impl Vocab {
    /// Read `tokenizer.json` and `config.json` from `dir`.
    ///
    /// # Errors
    /// `Load` naming the file or the missing special token.
    pub fn load(dir: &Path) -> Result<Self, AudioError> {
        let load = |what: String| AudioError::Load(what);
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| load(format!("{}: {e}", dir.join("tokenizer.json").display())))?;
        let cfg_path = dir.join("config.json");
        let cfg: Config = std::fs::read(&cfg_path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| load(format!("{}: {e}", cfg_path.display())))?;
        let id = |t: &str| {
            tokenizer
                .token_to_id(t)
                .ok_or_else(|| load(format!("tokenizer.json has no {t}")))
        };
        let no_timestamps = id("<|notimestamps|>")?;
        let languages = languages::LANGUAGES
            .iter()
            .filter_map(|(c, _)| {
                tokenizer
                    .token_to_id(&format!("<|{c}|>"))
                    .map(|t| (c.to_string(), t))
            })
            .collect();
        let longest_token = tokenizer
            .get_vocab(true)
            .keys()
            .map(|t| t.chars().count())
            .max()
            .unwrap_or(1)
            .max(1);
        Ok(Self {
            longest_token,
            eot: id("<|endoftext|>")?,
            sot: id("<|startoftranscript|>")?,
            sot_prev: id("<|startofprev|>")?,
            transcribe: id("<|transcribe|>")?,
            translate: id("<|translate|>")?,
            no_speech: id("<|nospeech|>").or_else(|_| id("<|nocaptions|>"))?,
            no_timestamps,
            timestamp_begin: no_timestamps + 1,
            suppress: cfg.suppress_ids,
            suppress_begin: cfg.suppress_ids_begin,
            languages,
            tokenizer,
        })
    }

    /// Token of a language code, if the model knows it.
    pub fn language_token(&self, code: &str) -> Option<u32> {
        self.languages
            .iter()
            .find(|(c, _)| c == code)
            .map(|(_, t)| *t)
    }

    /// Text of `ids` (text tokens only; special tokens are skipped).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids, true).unwrap_or_default()
    }

    /// The ids of a `prompt` as the transcription reads it (after a space), if there are at
    /// most `limit` of them. A prompt too long to fit whatever its tokens is refused by its
    /// length alone, so a huge prompt costs no tokenization.
    ///
    /// # Errors
    /// `PromptTooLong`.
    pub fn prompt_ids(&self, prompt: &str, limit: usize) -> Result<Vec<u32>, AudioError> {
        let too_long = AudioError::PromptTooLong {
            limit_tokens: limit,
        };
        // The leading space is one more byte, and may make one more token.
        if prompt.len() > limit.saturating_mul(self.longest_token) {
            return Err(too_long);
        }
        let ids = self.encode(&format!(" {prompt}"));
        if ids.len() > limit {
            return Err(too_long);
        }
        Ok(ids)
    }

    /// Token ids of `text`, without special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default()
    }
}
