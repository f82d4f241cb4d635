//! Pre-tokenizers of byte-level BPE vocabularies, chosen by GGUF's `tokenizer.ggml.pre`.
//!
//! Owns: the table from a `pre` value to its split regexes and BPE options. Each regex comes
//! from the model's published `tokenizer.json` as llama.cpp applies it (`src/llama-vocab.cpp`,
//! `llm_tokenizer_bpe`, in the llama.cpp vendored by llama-cpp-python 0.3.36). The regexes run
//! in sequence, each splitting the pieces of the one before and keeping both its matches and
//! the text between them (the `tokenizers` `Split` pre-tokenizer with `Isolated` behaviour),
//! then bytes map to the byte-level alphabet. Conformance is tested against llama.cpp's
//! vocabulary fixtures (`tokenizer_conformance.rs`).
//! May use: `serde_json` values in the `tokenizers` JSON format. Never: I/O, candle.

use serde_json::{json, Value};

/// GPT-2's split (also the second pass of several families below).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3 (also Falcon 3, DBRX/OLMo 2, Smaug): digits in runs of up to three.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 (also Qwen3, DeepSeek-R1-Distill-Qwen, StableLM 2): one digit per piece.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5: Qwen2's split with combining marks kept inside words.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// OpenAI's o200k split as published in Phi-4-mini's `tokenizer.json` (llama.cpp's `gpt-4o`):
/// words split before an upper-case run, contractions attached, `/` kept with punctuation.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek LLM's letter class: cased letters of the scripts its tokenizer lists (escaped, so
/// no editor or tool can normalize the ranges' ends).
const DEEPSEEK_LLM_LETTERS: &str = "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+";
/// CJK ideographs and Hangul as DeepSeek's tokenizers group them.
const DEEPSEEK_CJK: &str = "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+";

/// How a byte-level BPE vocabulary splits text before merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTokenizer {
    /// Split regexes, applied in order (Oniguruma syntax, as `tokenizers` compiles them).
    pub regexes: &'static [&'static str],
    /// A piece that is itself in the vocabulary is one token, whatever the merges say
    /// (Llama 3's `ignore_merges`).
    pub ignore_merges: bool,
    /// Unicode NFC before splitting (Qwen's `tokenizer.json` normalizer).
    pub nfc: bool,
}

impl PreTokenizer {
    const fn new(regexes: &'static [&'static str]) -> Self {
        Self {
            regexes,
            ignore_merges: false,
            nfc: false,
        }
    }

    /// The pre-tokenizer for a `tokenizer.ggml.pre` value; `None` for one we do not know (the
    /// caller refuses the file rather than guess). A missing value is `default`, as in
    /// llama.cpp.
    pub fn for_pre(pre: &str) -> Option<Self> {
        Some(match pre {
            "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" | "jais" | "trillion" => Self::new(&[GPT2]),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "lfm2"
            | "dbrx" | "smaug-bpe" => Self {
                ignore_merges: matches!(
                    pre,
                    "llama3"
                        | "llama-v3"
                        | "llama-bpe"
                        | "falcon3"
                        | "falcon-h1"
                        | "pixtral"
                        | "lfm2"
                ),
                ..Self::new(&[LLAMA3])
            },
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" => Self {
                nfc: pre != "stablelm2",
                ..Self::new(&[QWEN2])
            },
            // llama.cpp leaves Qwen3.5's text unnormalized (its fixture keeps `e` + U+0301
            // as two pieces).
            "qwen35" => Self::new(&[QWEN35]),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => Self::new(&[r"\p{N}", GPT2]),
            "falcon" => Self::new(&[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"]),
            "gpt-4o" | "llama4" => Self::new(&[GPT4O]),
            "deepseek-coder" => Self::new(&[
                r"[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                DEEPSEEK_CJK,
                r"\p{N}",
            ]),
            "deepseek-llm" => Self::new(&[
                r"[\r\n]",
                DEEPSEEK_LLM_LETTERS,
                "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+",
                r"\s+$",
                DEEPSEEK_CJK,
                r"\p{N}+",
            ]),
            "default" => Self::new(&[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"]),
            _ => return None,
        })
    }

    /// The `pre_tokenizer` object of a `tokenizer.json`: the splits, then byte-level mapping.
    pub fn to_json(self) -> Value {
        let mut steps: Vec<Value> = self
            .regexes
            .iter()
            .map(|re| {
                json!({"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated",
                       "invert": false})
            })
            .collect();
        steps.push(json!({"type": "ByteLevel", "add_prefix_space": false,
                          "trim_offsets": true, "use_regex": false}));
        json!({"type": "Sequence", "pretokenizers": steps})
    }

    /// The `normalizer` object of a `tokenizer.json` (`null` for none).
    pub fn normalizer(self) -> Value {
        if self.nfc {
            json!({"type": "NFC"})
        } else {
            Value::Null
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_pre_value_is_known_and_unknown_ones_are_refused() {
        for pre in [
            "falcon3",
            "command-r",
            "gpt-4o",
            "olmo",
            "dbrx",
            "llama-bpe",
            "qwen2",
            "smollm",
            "refact",
            "deepseek-r1-qwen",
            "default",
        ] {
            assert!(PreTokenizer::for_pre(pre).is_some(), "{pre}");
        }
        assert_eq!(PreTokenizer::for_pre("no-such-pre"), None);
        assert!(PreTokenizer::for_pre("falcon3").unwrap().ignore_merges);
        assert!(!PreTokenizer::for_pre("dbrx").unwrap().ignore_merges);
    }

    /// The pieces `pre`'s splits make of `text` (without the byte-level step).
    fn pieces(pre: &str, text: &str) -> Vec<String> {
        use tokenizers::pre_tokenizers::PreTokenizerWrapper;
        use tokenizers::PreTokenizer as _;
        let mut json = PreTokenizer::for_pre(pre).unwrap().to_json();
        json["pretokenizers"].as_array_mut().unwrap().pop();
        let split: PreTokenizerWrapper = serde_json::from_value(json).unwrap();
        let mut s = tokenizers::PreTokenizedString::from(text);
        split.pre_tokenize(&mut s).unwrap();
        s.get_splits(
            tokenizers::OffsetReferential::Original,
            tokenizers::OffsetType::Char,
        )
        .into_iter()
        .map(|(p, _, _)| p.to_owned())
        .collect()
    }

    /// Phi-4-mini's `gpt-4o` split has no llama.cpp fixture; the expected pieces are Python's
    /// `regex` module (an independent engine) running the same published pattern:
    /// `regex.findall(pattern, text)`.
    #[test]
    fn gpt_4o_splits_as_the_published_pattern_does_in_python_regex() {
        let cases: [(&str, &[&str]); 3] = [
            (
                "HelloWorld isn't JSONParser's 12345 km/h\n\n  end",
                &["Hello", "World", " isn't", " JSONParser's", " ", "123", "45", " km", "/h",
                  "\n\n", " ", " end"],
            ),
            (
                "\u{dc}n\u{ef}c\u{f6}d\u{e9} \u{c4}PFEL stra\u{df}e \u{65e5}\u{672c}\u{8a9e}\u{30c6}\u{30ad}\u{30b9}\u{30c8}",
                &["\u{dc}n\u{ef}c\u{f6}d\u{e9}", " \u{c4}PFEL", " stra\u{df}e",
                  " \u{65e5}\u{672c}\u{8a9e}\u{30c6}\u{30ad}\u{30b9}\u{30c8}"],
            ),
            ("a//b  \tc\r\n", &["a", "//", "b", "  ", "\tc", "\r\n"]),
        ];
        for (text, want) in cases {
            assert_eq!(pieces("gpt-4o", text), want, "{text:?}");
        }
    }
}
