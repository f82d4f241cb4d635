//! Builds a `tokenizers::Tokenizer` from GGUF metadata (`tokenizer.ggml.*`), so no separate
//! `tokenizer.json` is needed, and decodes generated tokens incrementally as UTF-8-safe deltas.
//!
//! Two vocabulary kinds (GGUF spec, "Tokenizer" section):
//! - `gpt2`: byte-level BPE with the file's merges; the split regex is chosen by
//!   `tokenizer.ggml.pre` (`pretokenize`; an unknown value is refused rather than guessed).
//! - `llama` / `gemma` (SentencePiece): BPE with byte fallback, merges derived from the
//!   vocabulary (every split of a piece into two pieces that both exist), ranked by the merged
//!   piece's position in the file, as the `transformers` GGUF converter does.
//!
//! Control (type 3) and user-defined (type 4) tokens become added tokens, matched before the model.

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::pretokenize::PreTokenizer;
use crate::engine::weights::gguf::{f32_array, int_array, string_array, GgufFile};
use crate::engine::weights::store::TensorStore;

/// A token's text and raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenText {
    pub text: String,
    pub bytes: Vec<u8>,
}

/// A tokenizer plus the special ids generation needs.
pub struct ModelTokenizer {
    pub tokenizer: Tokenizer,
    /// Beginning-of-sequence id, if the vocabulary has one.
    pub bos_id: Option<u32>,
    /// Whether the model expects BOS at the start of a prompt (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Token ids that end generation: EOS plus end-of-turn tokens found in the vocabulary.
    pub stop_ids: Vec<u32>,
    /// Text of BOS and EOS, for chat templates.
    pub bos_text: String,
    pub eos_text: String,
    /// The normalizer without SentencePiece's space prefix (`tokenizers` JSON), when
    /// `tokenizer` adds one; `None` otherwise.
    pub fragment_normalizer: Option<Value>,
    /// `tokenizer` with `fragment_normalizer`, for text that continues other text (grammar
    /// fragments): built on first use, so models never constrained never pay for it.
    pub fragments: std::sync::OnceLock<Option<Tokenizer>>,
    /// Every token's bytes, built on first use (`token_text`): `None` when the vocabulary's
    /// bytes cannot be recovered.
    pub token_bytes: std::sync::OnceLock<Option<Vec<Vec<u8>>>>,
}

/// Bytes of text `ModelTokenizer::encode_within` tokenizes at a time while counting.
pub const COUNT_PIECE_BYTES: usize = 16 * 1024;

/// Why `ModelTokenizer::encode_within` gave no ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// More than `limit` tokens; `counted` of them were counted before the pass stopped.
    #[error("more than {limit} tokens (at least {counted})")]
    TooLong { limit: usize, counted: usize },
    #[error("{0}")]
    Failed(String),
}

/// `text` in consecutive pieces of about `size` bytes, each cut just before a whitespace
/// character within 1 KiB after `size` (else at the next character boundary), so a cut
/// rarely splits a word. The pieces join back to `text`.
fn pieces_before_whitespace(text: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= size {
            return Some(std::mem::take(&mut rest));
        }
        let mut cut = size;
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        if let Some((i, _)) = rest[cut..]
            .char_indices()
            .take_while(|(i, _)| *i < 1024)
            .find(|(_, c)| c.is_whitespace())
        {
            cut += i;
        }
        let (piece, tail) = rest.split_at(cut.max(1));
        rest = tail;
        Some(piece)
    })
}

/// End-of-turn markers of common chat formats; those present in a vocabulary stop generation.
pub(crate) const END_OF_TURN: [&str; 6] = [
    "<|im_end|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|end|>",
    "<|endoftext|>",
    "</s>",
];

impl ModelTokenizer {
    /// Build from the metadata of an open GGUF file.
    ///
    /// # Errors
    /// Missing or inconsistent `tokenizer.ggml.*` keys, ids out of range, an unsupported model or
    /// `pre` value.
    pub fn from_gguf(file: &GgufFile) -> anyhow::Result<Self> {
        let kind = file.string("tokenizer.ggml.model")?.to_owned();
        let tokens = file
            .get("tokenizer.ggml.tokens")
            .and_then(string_array)
            .ok_or_else(|| anyhow::anyhow!("GGUF has no `tokenizer.ggml.tokens` string array"))?;
        let n = tokens.len();
        let types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
            Some(v) => {
                int_array(v).ok_or_else(|| anyhow::anyhow!("bad `tokenizer.ggml.token_type`"))?
            }
            None => vec![1; n],
        };
        anyhow::ensure!(
            types.len() == n,
            "token_type has {} entries for {n} tokens",
            types.len()
        );
        let id = |key: &str| -> anyhow::Result<Option<u32>> {
            match file.get(key) {
                None => Ok(None),
                Some(_) => {
                    let v = file.usize(key)?;
                    anyhow::ensure!(v < n, "`{key}` = {v} is outside the vocabulary of {n}");
                    Ok(Some(u32::try_from(v)?))
                }
            }
        };
        let bos_id = id("tokenizer.ggml.bos_token_id")?;
        let eos_id = id("tokenizer.ggml.eos_token_id")?;
        let unk_id = id("tokenizer.ggml.unknown_token_id")?;
        let mut json = match kind.as_str() {
            "gpt2" => {
                let merges = file
                    .get("tokenizer.ggml.merges")
                    .and_then(string_array)
                    .ok_or_else(|| {
                        anyhow::anyhow!("gpt2 tokenizer without `tokenizer.ggml.merges`")
                    })?;
                let pre = file
                    .string("tokenizer.ggml.pre")
                    .unwrap_or("default")
                    .to_owned();
                gpt2_json(&tokens, &types, &merges, &pre)?
            }
            "llama" | "gemma" => {
                let add_space_prefix =
                    file.bool_or("tokenizer.ggml.add_space_prefix", kind != "gemma");
                let scores = if file.architecture()?.starts_with("gemma") {
                    None
                } else {
                    file.get("tokenizer.ggml.scores")
                        .and_then(f32_array)
                        .filter(|s| s.len() == n)
                };
                spm_json(&tokens, &types, scores.as_deref(), unk_id, add_space_prefix)
            }
            other => anyhow::bail!(
                "unsupported tokenizer model `{other}` (supported: gpt2, llama, gemma)"
            ),
        };
        if file.string("general.name").is_ok_and(|n| {
            ["phi-3", "phi3"]
                .iter()
                .any(|p| n.to_lowercase().contains(p))
        }) {
            strip_after_special_tokens(&mut json);
        }
        let tokenizer = Tokenizer::from_bytes(serde_json::to_vec(&json)?)
            .map_err(|e| anyhow::anyhow!("failed to build tokenizer: {e}"))?;
        // SentencePiece's prefix is the first step of a `Sequence` normalizer (`spm_json`).
        let fragment_normalizer = match json["normalizer"]["normalizers"].as_array() {
            Some(steps) if steps.first().is_some_and(|n| n["type"] == "Prepend") => {
                steps.get(1).cloned()
            }
            _ => None,
        };
        let add_bos = file.bool_or("tokenizer.ggml.add_bos_token", kind != "gpt2");
        let mut stop_ids: Vec<u32> = eos_id.into_iter().collect();
        for marker in END_OF_TURN {
            if let Some(i) = tokens.iter().position(|t| t == marker) {
                let i = u32::try_from(i)?;
                if types[i as usize] == 3 && !stop_ids.contains(&i) {
                    stop_ids.push(i);
                }
            }
        }
        let text = |i: Option<u32>| i.map(|i| tokens[i as usize].clone()).unwrap_or_default();
        Ok(Self {
            tokenizer,
            fragment_normalizer,
            fragments: std::sync::OnceLock::new(),
            bos_id,
            add_bos,
            stop_ids,
            bos_text: text(bos_id),
            eos_text: text(eos_id),
            token_bytes: std::sync::OnceLock::new(),
        })
    }

    /// Encode text without adding special tokens (the chat template places them).
    ///
    /// # Errors
    /// Tokenizer failures (rare: invalid regex state).
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Encode `text` as `encode` does, but only if it has at most `limit` tokens: a longer
    /// text is counted a piece at a time and refused as soon as its count is clearly over, so
    /// an over-long prompt costs the tokenization of what fits (about `limit` tokens), not of
    /// everything that was sent, and never holds the whole text's encoding (which `tokenizers`
    /// keeps with offsets and alignments, tens of bytes a character).
    ///
    /// The counting pass cuts the text before whitespace into pieces of about
    /// `COUNT_PIECE_BYTES`; a cut can change the count near it (a merge across it is lost, a
    /// SentencePiece prefix added), so the pass refuses only above `limit` plus a margin
    /// (1/8 of `limit` and 2 per piece) and otherwise the whole text is encoded exactly.
    ///
    /// # Errors
    /// `TooLong` (with the count so far, less the margin: a lower bound in practice);
    /// `Failed` as `encode`.
    pub fn encode_within(&self, text: &str, limit: usize) -> Result<Vec<u32>, EncodeError> {
        let count = |piece: &str| {
            self.tokenizer
                .encode(piece, false)
                .map(|e| e.len())
                .map_err(|e| EncodeError::Failed(e.to_string()))
        };
        let margin = |pieces: usize| limit / 8 + 2 * pieces;
        if text.len() > COUNT_PIECE_BYTES {
            let (mut counted, mut pieces) = (0usize, 0usize);
            for piece in pieces_before_whitespace(text, COUNT_PIECE_BYTES) {
                counted += count(piece)?;
                pieces += 1;
                if counted > limit.saturating_add(margin(pieces)) {
                    return Err(EncodeError::TooLong {
                        limit,
                        counted: counted - margin(pieces),
                    });
                }
            }
        }
        let ids = self
            .encode(text)
            .map_err(|e| EncodeError::Failed(e.to_string()))?;
        if ids.len() > limit {
            return Err(EncodeError::TooLong {
                limit,
                counted: ids.len(),
            });
        }
        Ok(ids)
    }

    /// Encode text that continues other text (no SentencePiece space prefix, no special
    /// tokens added): what a grammar matcher needs for a fragment of output.
    ///
    /// # Errors
    /// As `encode`.
    pub fn encode_fragment(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let fragments = self.fragments.get_or_init(|| {
            let normalizer = serde_json::from_value::<tokenizers::NormalizerWrapper>(
                self.fragment_normalizer.clone()?,
            )
            .ok()?;
            let mut t = self.tokenizer.clone();
            t.with_normalizer(Some(normalizer)).ok()?;
            Some(t)
        });
        let t = fragments.as_ref().unwrap_or(&self.tokenizer);
        let enc = t.encode(text, false).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decode ids, skipping special tokens.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids, true).unwrap_or_default()
    }

    /// Token `id`'s raw bytes and its text (lossy), for logprobs. The byte table is llguidance's
    /// reading of `tokenizer.json` (byte-level and byte-fallback vocabularies), built once per
    /// model on first use; special tokens are their names. Falls back to decoding the one id.
    pub fn token_text(&self, id: u32) -> TokenText {
        let table = self.token_bytes.get_or_init(|| {
            let json = self.tokenizer.to_string(false).ok()?;
            let json: Value = serde_json::from_str(&json).ok()?;
            std::panic::catch_unwind(|| llguidance::token_bytes_from_tokenizer_json(&json).ok())
                .ok()
                .flatten()
        });
        let bytes = match table.as_ref().and_then(|t| t.get(id as usize)) {
            // llguidance marks special tokens with a 0xFF lead byte.
            Some(b) => b.strip_prefix(&[0xFF]).unwrap_or(b).to_vec(),
            None => self
                .tokenizer
                .decode(&[id], false)
                .unwrap_or_default()
                .into_bytes(),
        };
        TokenText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
        }
    }
}

/// Phi-3's special tokens swallow the whitespace after them (`rstrip` in its
/// `tokenizer.json`), except `<unk>`, `<s>` and `<|endoftext|>`: `<|user|>\nHi` is `<|user|>`
/// then `Hi`. GGUF has no field for this; llama.cpp applies it to files whose `general.name`
/// says Phi-3 (`llama_vocab::impl::load`, token attributes by model name), and so do we.
fn strip_after_special_tokens(json: &mut Value) {
    if let Some(added) = json["added_tokens"].as_array_mut() {
        for t in added {
            let keep = matches!(
                t["content"].as_str(),
                Some("<unk>" | "<s>" | "<|endoftext|>")
            );
            t["rstrip"] = Value::Bool(!keep);
        }
    }
}

fn added_tokens(tokens: &[String], types: &[i64]) -> Vec<Value> {
    tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, t))| **t == 3 || **t == 4)
        .map(|(i, (content, t))| {
            json!({"id": i, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": *t == 3})
        })
        .collect()
}

fn vocab_map(tokens: &[String]) -> serde_json::Map<String, Value> {
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab.entry(t.clone()).or_insert(json!(i));
    }
    vocab
}

fn gpt2_json(
    tokens: &[String],
    types: &[i64],
    merges: &[String],
    pre: &str,
) -> anyhow::Result<Value> {
    let pre = PreTokenizer::for_pre(pre)
        .ok_or_else(|| anyhow::anyhow!("unsupported gpt2 pre-tokenizer `{pre}`"))?;
    let (pre_tokenizer, normalizer, ignore_merges) =
        (pre.to_json(), pre.normalizer(), pre.ignore_merges);
    Ok(json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added_tokens(tokens, types),
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": ignore_merges, "vocab": vocab_map(tokens), "merges": merges}
    }))
}

/// SentencePiece vocabularies as BPE with byte fallback. Merges are derived from the vocabulary:
/// every split of a normal piece into two pieces that both exist is a merge. Ranks follow the
/// `transformers` GGUF converter: by the merged piece's position in the file for Gemma (its
/// scores do not follow merge order), else by score (highest first); ties prefer the longer left
/// half.
fn spm_json(
    tokens: &[String],
    types: &[i64],
    scores: Option<&[f32]>,
    unk_id: Option<u32>,
    add_space_prefix: bool,
) -> Value {
    // Gemma stores runs of spaces as real spaces; SentencePiece spells them with U+2581.
    let pieces: Vec<String> = tokens
        .iter()
        .map(|t| {
            if !t.is_empty() && t.chars().all(|c| c == ' ') {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.clone()
            }
        })
        .collect();
    let index: std::collections::HashMap<&str, usize> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .rev()
        .collect();
    // (rank of the merged piece, -left length in chars, left id, right id)
    let mut merges: Vec<(i64, i64, usize, usize)> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        if types[i] == 3 || types[i] == 6 {
            continue;
        }
        let rank = match scores {
            // Higher score merges first; scores are finite log-probabilities in practice.
            Some(sc) => -(f64::from(sc[i]) * 1e6) as i64,
            None => i as i64,
        };
        for (n, (cut, _)) in piece.char_indices().enumerate().skip(1) {
            let (a, b) = piece.split_at(cut);
            if let (Some(&ia), Some(&ib)) = (index.get(a), index.get(b)) {
                merges.push((rank, -(n as i64), ia, ib));
            }
        }
    }
    merges.sort_unstable();
    let merges: Vec<Value> = merges
        .iter()
        .map(|&(_, _, a, b)| json!([pieces[a], pieces[b]]))
        .collect();
    // SentencePiece's space prefix goes before every stretch of text that follows a special
    // token (llama.cpp's `add_space_prefix` after `is_prev_special`), even one that already
    // starts with a space: the normalizer runs once per stretch between added tokens.
    let replace = json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"});
    let normalizer = if add_space_prefix {
        json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u{2581}"}, replace]})
    } else {
        replace
    };
    let pre_tokenizer = Value::Null;
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if add_space_prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added_tokens(&pieces, types),
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": null,
                  "unk_token": unk_id.map(|u| pieces[u as usize].clone()),
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab_map(&pieces), "merges": merges}
    })
}

/// Incremental detokenizer: emits only complete UTF-8 text, keeping SentencePiece leading spaces
/// right by decoding a small window that starts one token before the unread part (the
/// prefix/read offset method of text-generation-inference).
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl StreamDecoder {
    /// Add a token; returns the new text, if a whole character is ready.
    pub fn step(&mut self, tok: &ModelTokenizer, id: u32) -> Option<String> {
        self.ids.push(id);
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset]);
        let full = tok.decode(&self.ids[self.prefix_offset..]);
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') {
            let delta = full.get(prefix.len()..).map(str::to_owned);
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            delta
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use std::path::Path;

    fn weights(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("weights")
            .join(name)
    }

    fn load(name: &str) -> ModelTokenizer {
        let path = weights(name);
        assert!(
            path.exists(),
            "{} missing: run scripts/fetch-weights",
            path.display()
        );
        ModelTokenizer::from_gguf(&GgufFile::open(&path, &Device::Cpu).unwrap()).unwrap()
    }

    /// Token ids from an independent implementation (`transformers`' GGUF tokenizer conversion,
    /// see scripts/fixtures/tokenizer-reference.py), committed as test data.
    fn reference(model: &str) -> Vec<(String, Vec<u32>)> {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer_ids.json"),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v[model]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["text"].as_str().unwrap().to_owned(),
                    serde_json::from_value(c["ids"].clone()).unwrap(),
                )
            })
            .collect()
    }

    fn check(file: &str, model: &str) {
        let tok = load(file);
        let cases = reference(model);
        assert!(cases.len() >= 8);
        for (text, want) in cases {
            assert_eq!(tok.encode(&text).unwrap(), want, "encoding {text:?}");
            let back = tok.tokenizer.decode(&want, false).unwrap();
            assert_eq!(back, text, "round trip of {text:?}");
        }
    }

    #[test]
    fn smollm2_ids_match_the_reference_tokenizer() {
        check("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2");
    }

    #[test]
    fn gemma3_ids_match_the_reference_tokenizer() {
        check("gemma-3-270m-q4_k_m.gguf", "gemma3");
    }

    #[test]
    fn encode_within_is_exact_at_the_limit_and_stops_early_past_it() {
        for file in [
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "gemma-3-270m-q4_k_m.gguf",
        ] {
            let tok = load(file);
            let words = [
                "ledger",
                "hold",
                " settle",
                "micros",
                "日本語",
                "prefill,",
                "KV\n",
            ];
            let text: String = (0..12_000)
                .map(|i| words[i % 7])
                .collect::<Vec<_>>()
                .join(" ");
            assert!(text.len() > 4 * COUNT_PIECE_BYTES, "the counting pass runs");
            let exact = tok.encode(&text).unwrap();
            let n = exact.len();
            assert_eq!(tok.encode_within(&text, n).unwrap(), exact, "{file}");
            assert_eq!(tok.encode_within(&text, n * 2).unwrap(), exact, "{file}");
            assert!(
                matches!(tok.encode_within(&text, n - 1), Err(EncodeError::TooLong { limit, .. }) if limit == n - 1),
                "{file}"
            );
            // Far over: refused after about the limit's worth of pieces, with a count that
            // does not overstate the text.
            let Err(EncodeError::TooLong { counted, .. }) = tok.encode_within(&text, 100) else {
                panic!("{file}: not refused")
            };
            assert!((100..n).contains(&counted), "{file}: {counted} of {n}");
        }
    }

    #[test]
    fn pieces_cut_before_whitespace_and_join_back() {
        let text = format!("{} {}", "ab ".repeat(10_000), "中".repeat(20_000));
        let pieces: Vec<&str> = pieces_before_whitespace(&text, 1000).collect();
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| p.len() <= 1000 + 1024 + 3));
        // Where the text has spaces, every later piece starts with one.
        assert!(pieces[1..20].iter().all(|p| p.starts_with(' ')));
    }

    #[test]
    fn stream_decoder_never_splits_a_character() {
        let tok = load("SmolLM2-135M-Instruct.Q4_1.gguf");
        let text = "héllo 日本語 🙂 done";
        let ids = tok.encode(text).unwrap();
        let mut d = StreamDecoder::default();
        let mut out = String::new();
        for id in ids {
            if let Some(delta) = d.step(&tok, id) {
                assert!(!delta.contains('\u{FFFD}'), "broken delta {delta:?}");
                out.push_str(&delta);
            }
        }
        assert_eq!(out, text);
    }
}
