//! Perplexity of a GGUF model on a text file (`tollgate perplexity`), computed the way
//! llama.cpp's `llama-perplexity` computes it (`tools/perplexity/perplexity.cpp`,
//! `perplexity()`), so the two can be compared on the same file, context and text: a check
//! that our kernels' speed costs no accuracy.
//!
//! The rule: the whole text is tokenized once (BOS first when the model adds one); it is cut
//! into `n = len / ctx` chunks of `ctx` tokens (the rest is dropped); each chunk runs from an
//! empty KV cache (its first token replaced by BOS when the model adds one) as one prefill,
//! and each position `p` in `ctx/2 .. ctx - 1` scores the next token:
//! `nll += -log_softmax(logits[p])[token[p + 1]]` (`sampler::logprobs`, the normaliser summed
//! in f64). `PPL = exp(nll / count)`, `count = n * (ctx - ctx/2 - 1)`; the standard error is
//! llama.cpp's (`sqrt(var(nll) / (count - 1))`, times PPL).
//!
//! Owns: that loop, its report, and finding the `--model`'s GGUF file. Uses the model
//! (`model::Transformer`), its tokenizer, the GGUF reader, the catalogue and `resolve`; never
//! the scheduler, the ledger or HTTP.

use std::path::Path;
use std::time::Instant;

use candle_core::Device;

use super::model::attention::{KvType, SeqCache};
use super::model::{StepSeq, Transformer};
use super::runtime::sampler;
use super::text::tokenizer::ModelTokenizer;
use super::weights::gguf::GgufFile;

/// What `perplexity` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    /// `exp(mean nll)`.
    pub ppl: f64,
    /// Standard error of `ppl` (llama.cpp's estimate).
    pub std_err: f64,
    /// Tokens of the whole text.
    pub text_tokens: usize,
    /// Chunks of `ctx` tokens evaluated.
    pub chunks: usize,
    /// Tokens scored (`chunks * (ctx - ctx/2 - 1)`).
    pub scored: usize,
    /// Wall time of the forwards, in seconds.
    pub seconds: f64,
}

impl std::fmt::Display for Perplexity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PPL = {:.4} +/- {:.5} ({} chunks, {} tokens scored of {}, {:.1} s)",
            self.ppl, self.std_err, self.chunks, self.scored, self.text_tokens, self.seconds
        )
    }
}

/// Errors of `perplexity`.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    /// The text is shorter than two contexts (llama.cpp refuses it too).
    #[error("the text tokenizes to {tokens} tokens; a context of {ctx} needs at least {}", 2 * ctx)]
    TooShort { tokens: usize, ctx: usize },
    /// `ctx` below 4 or above the model's context length.
    #[error("--ctx {ctx} must be between 4 and the model's context length {max}")]
    BadContext { ctx: usize, max: usize },
    /// Reading the model or the text, tokenizing, or a forward failed.
    #[error("{0:#}")]
    Model(#[from] anyhow::Error),
}

/// The perplexity of the GGUF model at `model_path` on the UTF-8 text at `text_path`, over
/// chunks of `ctx` tokens (at most `max_chunks`; all when `None`). Runs on the CPU with the
/// process's rayon pool; `progress` is called after each chunk with (chunk, running PPL).
///
/// # Errors
/// See `PerplexityError`.
pub fn perplexity(
    model_path: &Path,
    text_path: &Path,
    ctx: usize,
    max_chunks: Option<usize>,
    kv: KvType,
    mut progress: impl FnMut(usize, f64),
) -> Result<Perplexity, PerplexityError> {
    let mut file = GgufFile::open(model_path, &Device::Cpu)?;
    let tokenizer = ModelTokenizer::from_gguf(&file)?;
    // LongRoPE models score with the factors llama.cpp uses for a context of `ctx`.
    let model = Transformer::load_for_context(&mut file, ctx)?;
    if ctx < 4 || ctx > model.config.context_length {
        return Err(PerplexityError::BadContext {
            ctx,
            max: model.config.context_length,
        });
    }
    let text = std::fs::read_to_string(text_path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", text_path.display()))?;
    let bos = tokenizer.bos_id.filter(|_| tokenizer.add_bos);
    let mut tokens: Vec<u32> = bos.into_iter().collect();
    tokens.extend(tokenizer.encode(&text)?);
    if tokens.len() < 2 * ctx {
        return Err(PerplexityError::TooShort {
            tokens: tokens.len(),
            ctx,
        });
    }
    let chunks = max_chunks.map_or(tokens.len() / ctx, |m| m.min(tokens.len() / ctx));
    let first = ctx / 2;
    let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
    let started = Instant::now();
    for c in 0..chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let mut cache = SeqCache::new(model.config.n_layers, kv);
        let logits = model
            .forward_from(
                StepSeq {
                    cache: &mut cache,
                    tokens: &chunk,
                    logits: 1,
                    inputs: &[],
                    grids: &[],
                },
                first,
            )
            .map_err(anyhow::Error::from)?;
        for (p, row) in (first..ctx - 1).zip(&logits) {
            let v = -f64::from(sampler::logprobs(row, chunk[p + 1], 0).0);
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        progress(c + 1, (nll / count as f64).exp());
    }
    let n = count as f64;
    let mean = nll / n;
    let var = (nll2 / n - mean * mean).max(0.0);
    let ppl = mean.exp();
    Ok(Perplexity {
        ppl,
        std_err: (var / (n - 1.0).max(1.0)).sqrt() * ppl,
        text_tokens: tokens.len(),
        chunks,
        scored: count,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The GGUF file of `model` (the CLI's `--model`): a path to a `.gguf` file, or a catalogue
/// id's weights as `resolve::resolve` finds them.
///
/// # Errors
/// No such file or model, no weights, or weights that are a Hugging Face checkpoint.
pub fn model_file(
    model: &str,
    models: &std::path::Path,
    weights: &std::path::Path,
) -> anyhow::Result<std::path::PathBuf> {
    let direct = std::path::PathBuf::from(model);
    if direct.extension().is_some_and(|e| e == "gguf") {
        anyhow::ensure!(direct.is_file(), "{} does not exist", direct.display());
        return Ok(direct);
    }
    let catalog = crate::catalog::Catalog::load(models).map_err(anyhow::Error::msg)?;
    let entry = catalog
        .get(model)
        .ok_or_else(|| anyhow::anyhow!("no model `{model}` in {}", models.display()))?;
    let path = crate::engine::weights::resolve::resolve(entry, weights)
        .map_err(|tried| anyhow::anyhow!("no weights for `{model}`: {}", tried.join("; ")))?;
    anyhow::ensure!(
        path.is_file(),
        "`{model}` is a Hugging Face checkpoint; perplexity takes GGUF files"
    );
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct on the English UDHR: a language model's perplexity on plain
    /// English prose is far below its vocabulary's uniform 49,152; a broken forward (wrong
    /// layout, wrong scale) lands in the thousands. Needs `scripts/fetch-weights`.
    #[test]
    fn smollm2_has_a_plausible_perplexity_on_english_prose() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let model = root.join("weights/SmolLM2-135M-Instruct.Q4_1.gguf");
        let text = root.join("data/udhr/eng.txt");
        assert!(model.exists(), "run scripts/fetch-weights");
        let mut seen = Vec::new();
        let r = perplexity(&model, &text, 128, Some(2), KvType::F32, |c, p| {
            seen.push((c, p))
        })
        .unwrap();
        assert_eq!((r.chunks, r.scored), (2, 2 * 63));
        assert_eq!(seen.len(), 2);
        assert!(r.ppl > 1.5 && r.ppl < 60.0, "{r}");
        // The f16 KV cache rounds each key and value once: about the same score (within 0.5%
        // on these 126 tokens; docs/benchmarks.md has the full-text figure for a 1.5B model).
        let half = perplexity(&model, &text, 128, Some(2), KvType::F16, |_, _| ()).unwrap();
        assert!(
            (half.ppl / r.ppl - 1.0).abs() < 5e-3,
            "f16 {half} against f32 {r}"
        );
        assert!(matches!(
            perplexity(&model, &text, 100_000, None, KvType::F16, |_, _| ()),
            Err(PerplexityError::BadContext { .. })
        ));
    }
}
