//! Tokenizer conformance with llama.cpp: its vocabulary-only GGUF fixtures
//! (`models/ggml-vocab-*.gguf` in the llama-cpp-python 0.3.36 sdist) come with test inputs
//! (`.inp`, texts separated by `\n__ggml_vocab_test__\n`) and the ids llama.cpp's
//! `test-tokenizer-0` expects for each (`.out`, one line per text; tokenized without adding
//! special tokens). `scripts/fetch-weights vocab-fixtures` puts them under
//! `weights/llama-vocab/`. Every fixture of a vocabulary kind and pre-tokenizer the engine
//! serves is checked here: one per pre-tokenizer family in the catalogue (Llama 3 / Falcon 3,
//! Command R / SmolLM2 / StarCoder / Refact, GPT-2 / OLMo / MPT, Qwen2, SentencePiece Llama and
//! Phi-3) plus Falcon, DeepSeek and Qwen3.5. Not checked: `bert-bge` (WordPiece),
//! `nomic-bert-moe` (T5 Unigram), `gemma-4` (a vocabulary kind the engine does not load), and
//! the fixtures without expected ids (aquila, baichuan, gpt-neox).

use std::path::{Path, PathBuf};

use candle_core::Device;

use super::tokenizer::ModelTokenizer;
use crate::engine::weights::gguf::GgufFile;

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("weights/llama-vocab")
        .join(format!("ggml-vocab-{name}.gguf"))
}

/// (text, expected ids) pairs of one fixture, read as llama.cpp's test reads them.
fn cases(gguf: &Path) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let p = gguf.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run scripts/fetch-weights vocab-fixtures)",
                p.display()
            )
        })
    };
    let raw = read("inp");
    let mut texts: Vec<&str> = raw.split(SEPARATOR).collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let out = read("out");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{}", gguf.display());
    texts.into_iter().map(str::to_owned).zip(ids).collect()
}

/// Encode every fixture text; return the mismatches (text, want, got).
fn mismatches(name: &str) -> (usize, Vec<String>) {
    let path = fixture(name);
    assert!(
        path.exists(),
        "{} missing: run scripts/fetch-weights vocab-fixtures",
        path.display()
    );
    let file = GgufFile::open(&path, &Device::Cpu).unwrap();
    let tok = ModelTokenizer::from_gguf(&file).unwrap();
    let cases = cases(&path);
    let mut bad = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text).unwrap();
        if &got != want {
            bad.push(format!("{text:?}: want {want:?}, got {got:?}"));
        }
    }
    (cases.len(), bad)
}

fn check(name: &str) {
    let (n, bad) = mismatches(name);
    assert!(n >= 30, "{name}: only {n} cases");
    assert!(
        bad.is_empty(),
        "{name}: {} of {n} texts tokenize differently from llama.cpp:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

macro_rules! conformance {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            check($name);
        }
    )*};
}

conformance! {
    llama_bpe_matches_llama_cpp => "llama-bpe",
    command_r_matches_llama_cpp => "command-r",
    starcoder_matches_llama_cpp => "starcoder",
    refact_matches_llama_cpp => "refact",
    gpt_2_matches_llama_cpp => "gpt-2",
    mpt_matches_llama_cpp => "mpt",
    qwen2_matches_llama_cpp => "qwen2",
    qwen35_matches_llama_cpp => "qwen35",
    falcon_matches_llama_cpp => "falcon",
    deepseek_coder_matches_llama_cpp => "deepseek-coder",
    deepseek_llm_matches_llama_cpp => "deepseek-llm",
    llama_spm_matches_llama_cpp => "llama-spm",
    phi_3_matches_llama_cpp => "phi-3",
}

/// Chat prompts, special tokens included: the ids llama.cpp gives with special tokens parsed
/// and none added (`scripts/fixtures/llama-tokenize.c` on libllama from the same llama.cpp). They cover
/// what the fixtures above cannot (those are tokenized with special tokens as plain text):
/// SentencePiece's space prefix after a special token, Phi-3's special tokens swallowing the
/// whitespace after them, and byte-level vocabularies around special tokens.
#[test]
fn chat_prompts_with_special_tokens_match_llama_cpp() {
    let cases: [(&str, &str, &[u32]); 7] = [
        (
            "phi-3",
            "<|user|>\nSYS\nHI<|end|>\n<|assistant|>\n",
            &[32010, 317, 21554, 13, 17628, 32007, 32001],
        ),
        (
            "llama-spm",
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]",
            &[
                1, 518, 25580, 29962, 3532, 14816, 29903, 6778, 13, 3629, 11473, 29889, 13, 29966,
                829, 14816, 29903, 6778, 13, 13, 18567, 518, 29914, 25580, 29962, 15043, 29991,
                29871, 2, 1, 518, 25580, 29962, 2648, 29872, 518, 29914, 25580, 29962,
            ],
        ),
        ("llama-spm", " Hello", &[29871, 15043]),
        (
            "llama-spm",
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n",
            &[
                529, 29989, 5205, 29989, 29958, 13, 3629, 11473, 29889, 2, 29871, 13, 29966,
                29989, 1792, 29989, 29958, 13, 18567, 2, 29871, 13, 29966, 29989, 465, 22137,
                29989, 29958, 13,
            ],
        ),
        (
            "llama-bpe",
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            &[
                128006, 882, 128007, 271, 13347, 1070, 128009, 128006, 78191, 128007, 271,
            ],
        ),
        (
            "qwen2",
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 123<|im_end|>\n<|im_start|>assistant\n",
            &[
                151644, 8948, 198, 3430, 9814, 13, 151645, 198, 151644, 872, 198, 13048, 220, 16,
                17, 18, 151645, 198, 151644, 77091, 198,
            ],
        ),
        (
            "command-r",
            "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi 2024!<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            &[
                5, 255000, 255006, 37535, 228, 25, 23, 25, 27, 8, 255001, 255000, 255007,
            ],
        ),
    ];
    for (name, text, want) in cases {
        let path = fixture(name);
        let file = GgufFile::open(&path, &Device::Cpu).unwrap();
        let tok = ModelTokenizer::from_gguf(&file).unwrap();
        assert_eq!(tok.encode(text).unwrap(), want, "{name}: {text:?}");
    }
}

/// Grammar fragments continue text: no SentencePiece prefix is added to them, while a prompt
/// gets one (as llama.cpp gives it, above).
#[test]
fn fragments_get_no_space_prefix() {
    let file = GgufFile::open(&fixture("llama-spm"), &Device::Cpu).unwrap();
    let tok = ModelTokenizer::from_gguf(&file).unwrap();
    assert_eq!(tok.encode(" Hello").unwrap(), [29871, 15043]);
    assert_eq!(tok.encode_fragment(" Hello").unwrap(), [15043]);
    let word = tok.encode_fragment("Hello").unwrap();
    assert_ne!(word, tok.encode("Hello").unwrap());
    assert_eq!(tok.tokenizer.decode(&word, false).unwrap(), "Hello");
    // Byte-level vocabularies add no prefix at all: fragments are the same.
    let file = GgufFile::open(&fixture("qwen2"), &Device::Cpu).unwrap();
    let tok = ModelTokenizer::from_gguf(&file).unwrap();
    assert!(tok.fragment_normalizer.is_none());
}
