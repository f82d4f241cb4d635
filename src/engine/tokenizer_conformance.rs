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

use super::gguf::GgufFile;
use super::tokenizer::ModelTokenizer;

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
