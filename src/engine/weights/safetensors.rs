//! Hugging Face checkpoints: a directory with `config.json`, `tokenizer.json` and one or more
//! `*.safetensors` files (sharded through `model.safetensors.index.json`). `HfModel` is a
//! `TensorStore`: it translates `config.json` into GGUF metadata keys and llama.cpp tensor
//! names into `transformers` names, so the same `Transformer::load` serves both formats.
//!
//! Differences from llama.cpp's GGUF conversion that are handled here (source: llama.cpp
//! `convert_hf_to_gguf.py` and `transformers` `modeling_*.py` of each family):
//! - q/k rows are not permuted: RoPE rotates halves for every family (`RopeLayout::RotateHalf`);
//! - Gemma 2/3 store RMSNorm weights as `w` and scale by `1 + w`; 1 is added at load;
//! - Llama 3.1 `rope_scaling` (`rope_type = "llama3"`) and Phi-3 `longrope` short and long
//!   factors are computed into the `rope_freqs` / `rope_factors_short` / `rope_factors_long`
//!   tensors GGUF files carry, with the original context length;
//! - Gemma's `query_pre_attn_scalar` sets the attention scale.
//!
//! Weight matrices are quantized at load to `MatrixType` (Q8_0 by default, f32 in parity tests).
//! Uses candle only.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use super::store::{RopeLayout, TensorStore};

/// How weight matrices (tensors of rank >= 2) are stored after loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixType {
    /// Q8_0 blocks of 32 (about 1.06 bytes per weight; rows whose length is not a multiple of
    /// 32 stay f32).
    Q8_0,
    /// Full f32, bit-exact with the checkpoint (tests, tiny models).
    F32,
}

/// An open Hugging Face model directory.
pub struct HfModel {
    dir: PathBuf,
    meta: HashMap<String, gguf_file::Value>,
    st: MmapedSafetensors,
    names: HashSet<String>,
    /// Prefix of the decoder's tensors: `model.`, or `model.language_model.` in multimodal files.
    prefix: String,
    lm_head: Option<String>,
    family: String,
    virtual_tensors: HashMap<String, Vec<f32>>,
    matrix: MatrixType,
    device: Device,
}

/// Files of a Hugging Face checkpoint directory, for residency estimates and downloads.
///
/// # Errors
/// A malformed `model.safetensors.index.json`.
pub fn safetensors_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let v: Value = serde_json::from_slice(&std::fs::read(&index)?)?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| anyhow::anyhow!("`{}` has no weight_map", index.display()))?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(str::to_owned))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    Ok(vec![dir.join("model.safetensors")])
}

/// `config.json` of a directory, with a multimodal `text_config` merged over the top level.
///
/// # Errors
/// Missing or malformed file.
pub fn read_config(dir: &Path) -> anyhow::Result<Value> {
    let path = dir.join("config.json");
    let bytes = std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("cannot read `{}`: {e}", path.display()))?;
    let mut v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("`{}` is not JSON: {e}", path.display()))?;
    if let Some(text) = v.get("text_config").cloned() {
        if let (Some(top), Some(text)) = (v.as_object_mut(), text.as_object()) {
            for (k, x) in text {
                if k != "model_type" || !top.contains_key("model_type") {
                    top.insert(k.clone(), x.clone());
                }
            }
        }
    }
    Ok(v)
}

/// The GGUF architecture name for a `transformers` `model_type`.
fn architecture(model_type: &str) -> Option<&'static str> {
    Some(match model_type {
        "llama" | "mistral" | "mixtral" => "llama",
        "qwen2" => "qwen2",
        "qwen3" => "qwen3",
        "gemma2" => "gemma2",
        "gemma3" | "gemma3_text" => "gemma3",
        "phi3" => "phi3",
        "olmo2" => "olmo2",
        "granite" => "granite",
        "cohere" => "command-r",
        _ => return None,
    })
}

impl HfModel {
    /// Open `dir`, map its safetensors files and translate `config.json`.
    ///
    /// # Errors
    /// Missing files, an unsupported `model_type`, `rope_scaling` type or option.
    pub fn open(dir: &Path, device: &Device, matrix: MatrixType) -> anyhow::Result<Self> {
        let cfg = read_config(dir)?;
        let model_type = cfg
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow::anyhow!("config.json has no model_type"))?;
        let arch = architecture(model_type).ok_or_else(|| {
            anyhow::anyhow!(
                "unsupported model_type `{model_type}` in `{}`",
                dir.display()
            )
        })?;
        anyhow::ensure!(
            !cfg.get("use_qk_norm")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            "Cohere per-head q/k LayerNorm (`use_qk_norm`) is not supported"
        );
        let files = safetensors_files(dir)?;
        for f in &files {
            anyhow::ensure!(f.exists(), "weights file `{}` is missing", f.display());
        }
        // SAFETY: the files are memory-mapped read-only; they must not be truncated or rewritten
        // while the model loads (weights are copied into tensors before `HfModel` is dropped).
        let st = unsafe { MmapedSafetensors::multi(&files) }
            .map_err(|e| anyhow::anyhow!("cannot map safetensors in `{}`: {e}", dir.display()))?;
        let names: HashSet<String> = st.tensors().into_iter().map(|(n, _)| n).collect();
        let embed = names
            .iter()
            .filter(|n| n.ends_with("embed_tokens.weight"))
            .min_by_key(|n| n.len())
            .ok_or_else(|| anyhow::anyhow!("no `embed_tokens.weight` in `{}`", dir.display()))?;
        let prefix = embed.trim_end_matches("embed_tokens.weight").to_owned();
        let lm_head = names
            .iter()
            .filter(|n| n.ends_with("lm_head.weight"))
            .min_by_key(|n| n.len())
            .cloned();
        let (meta, virtual_tensors) = translate(&cfg, arch)?;
        Ok(Self {
            dir: dir.to_owned(),
            meta,
            st,
            names,
            prefix,
            lm_head,
            family: arch.to_owned(),
            virtual_tensors,
            matrix,
            device: device.clone(),
        })
    }

    fn gemma(&self) -> bool {
        self.family.starts_with("gemma")
    }

    /// The `transformers` name of a llama.cpp tensor name, if the family has one.
    fn hf_name(&self, gguf: &str) -> Option<String> {
        let p = &self.prefix;
        match gguf {
            "token_embd.weight" => return Some(format!("{p}embed_tokens.weight")),
            "output_norm.weight" => return Some(format!("{p}norm.weight")),
            "output.weight" => return self.lm_head.clone(),
            _ => {}
        }
        let rest = gguf.strip_prefix("blk.")?;
        let (layer, rest) = rest.split_once('.')?;
        let (stem, suffix) = rest.rsplit_once('.')?;
        let (gemma, olmo) = (self.gemma(), self.family == "olmo2");
        let hf = match stem {
            "attn_q" => "self_attn.q_proj".to_owned(),
            "attn_k" => "self_attn.k_proj".to_owned(),
            "attn_v" => "self_attn.v_proj".to_owned(),
            "attn_output" => "self_attn.o_proj".to_owned(),
            "attn_qkv" => "self_attn.qkv_proj".to_owned(),
            "attn_q_norm" => "self_attn.q_norm".to_owned(),
            "attn_k_norm" => "self_attn.k_norm".to_owned(),
            "attn_norm" => "input_layernorm".to_owned(),
            "ffn_norm" if gemma => "pre_feedforward_layernorm".to_owned(),
            "ffn_norm" if !olmo => "post_attention_layernorm".to_owned(),
            "post_attention_norm" if gemma || olmo => "post_attention_layernorm".to_owned(),
            "post_ffw_norm" if gemma || olmo => "post_feedforward_layernorm".to_owned(),
            "ffn_gate" => "mlp.gate_proj".to_owned(),
            "ffn_up" if self.family == "phi3" => "mlp.gate_up_proj".to_owned(),
            "ffn_up" => "mlp.up_proj".to_owned(),
            "ffn_down" => "mlp.down_proj".to_owned(),
            "ffn_gate_inp" => "block_sparse_moe.gate".to_owned(),
            _ => {
                // Mixtral experts: `ffn_gate.E` -> `w1`, `ffn_up.E` -> `w3`, `ffn_down.E` -> `w2`.
                let (kind, e) = stem.split_once('.')?;
                let w = match kind {
                    "ffn_gate" => "w1",
                    "ffn_up" => "w3",
                    "ffn_down" => "w2",
                    _ => return None,
                };
                format!("block_sparse_moe.experts.{e}.{w}")
            }
        };
        Some(format!("{p}layers.{layer}.{hf}.{suffix}"))
    }
}

impl TensorStore for HfModel {
    fn device(&self) -> Device {
        self.device.clone()
    }

    fn get(&self, key: &str) -> Option<&gguf_file::Value> {
        self.meta.get(key)
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.virtual_tensors.contains_key(name)
            || self.hf_name(name).is_some_and(|n| self.names.contains(&n))
    }

    fn qtensor(&mut self, name: &str) -> anyhow::Result<QTensor> {
        if let Some(v) = self.virtual_tensors.get(name) {
            let t = Tensor::from_slice(v, v.len(), &self.device)?;
            return Ok(QTensor::quantize(&t, GgmlDType::F32)?);
        }
        let hf = self
            .hf_name(name)
            .filter(|n| self.names.contains(n))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "tensor `{name}` has no counterpart in `{}`",
                    self.dir.display()
                )
            })?;
        let mut t = self
            .st
            .load(&hf, &self.device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| anyhow::anyhow!("tensor `{hf}` in `{}`: {e}", self.dir.display()))?;
        if self.gemma() && hf.ends_with("norm.weight") {
            t = (t + 1.0)?;
        }
        let dims = t.dims().to_vec();
        let blocks = dims.last().is_some_and(|d| d % 32 == 0);
        let dtype = if dims.len() >= 2 && blocks && self.matrix == MatrixType::Q8_0 {
            GgmlDType::Q8_0
        } else {
            GgmlDType::F32
        };
        Ok(QTensor::quantize(&t, dtype)?)
    }

    fn rope_layout(&self) -> RopeLayout {
        RopeLayout::RotateHalf
    }
}

type Translated = (HashMap<String, gguf_file::Value>, HashMap<String, Vec<f32>>);

/// `config.json` fields as GGUF metadata (`{arch}.*` keys) plus computed RoPE factor tensors.
fn translate(cfg: &Value, arch: &str) -> anyhow::Result<Translated> {
    use gguf_file::Value as G;
    let mut meta = HashMap::new();
    let mut tensors = HashMap::new();
    meta.insert(
        "general.architecture".to_owned(),
        G::String(arch.to_owned()),
    );
    let int = |k: &str| cfg.get(k).and_then(Value::as_u64);
    let float = |k: &str| cfg.get(k).and_then(Value::as_f64);
    let mut put_int = |gguf: &str, hf: &str, required: bool| -> anyhow::Result<()> {
        match int(hf) {
            Some(v) => {
                meta.insert(format!("{arch}.{gguf}"), G::U64(v));
                Ok(())
            }
            None if required => anyhow::bail!("config.json has no integer `{hf}`"),
            None => Ok(()),
        }
    };
    put_int("embedding_length", "hidden_size", true)?;
    put_int("block_count", "num_hidden_layers", true)?;
    put_int("attention.head_count", "num_attention_heads", true)?;
    put_int("attention.head_count_kv", "num_key_value_heads", false)?;
    put_int("attention.key_length", "head_dim", false)?;
    put_int("context_length", "max_position_embeddings", false)?;
    put_int("attention.sliding_window", "sliding_window", false)?;
    put_int("expert_count", "num_local_experts", false)?;
    put_int("expert_used_count", "num_experts_per_tok", false)?;
    let mut put_float = |gguf: &str, v: Option<f64>| {
        if let Some(v) = v {
            meta.insert(format!("{arch}.{gguf}"), G::F32(v as f32));
        }
    };
    put_float("attention.layer_norm_rms_epsilon", float("rms_norm_eps"));
    put_float("attention.layer_norm_epsilon", float("layer_norm_eps"));
    put_float("rope.freq_base", float("rope_theta"));
    put_float("attn_logit_softcapping", float("attn_logit_softcapping"));
    put_float("final_logit_softcapping", float("final_logit_softcapping"));
    if arch == "granite" {
        put_float("embedding_scale", float("embedding_multiplier"));
        put_float("attention.scale", float("attention_multiplier"));
        put_float("residual_scale", float("residual_multiplier"));
        put_float("logit_scale", float("logits_scaling"));
    }
    if arch == "command-r" {
        put_float("logit_scale", float("logit_scale"));
    }
    if arch.starts_with("gemma") {
        put_float(
            "attention.scale",
            float("query_pre_attn_scalar").map(|s| 1.0 / s.sqrt()),
        );
    }
    let head_dim = int("head_dim").unwrap_or_else(|| {
        int("hidden_size").unwrap_or(0) / int("num_attention_heads").unwrap_or(1).max(1)
    }) as usize;
    // Partial rotary (Phi-4-mini: 0.75 of the head).
    if let Some(f) = float("partial_rotary_factor") {
        let dim = (head_dim as f64 * f).round() as u64;
        meta.insert(format!("{arch}.rope.dimension_count"), G::U64(dim));
    }
    if let Some(scaling) = cfg.get("rope_scaling").filter(|v| !v.is_null()) {
        rope_scaling(cfg, scaling, arch, head_dim, &mut meta, &mut tensors)?;
    }
    Ok((meta, tensors))
}

/// `rope_scaling` of `config.json` as GGUF metadata and RoPE factor tensors: linear, Llama 3
/// (`rope_freqs`) or LongRoPE; other types are an error.
fn rope_scaling(
    cfg: &Value,
    scaling: &Value,
    arch: &str,
    head_dim: usize,
    meta: &mut HashMap<String, gguf_file::Value>,
    tensors: &mut HashMap<String, Vec<f32>>,
) -> anyhow::Result<()> {
    use gguf_file::Value as G;
    let float = |k: &str| cfg.get(k).and_then(Value::as_f64);
    let kind = scaling
        .get("rope_type")
        .or_else(|| scaling.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let theta = float("rope_theta").unwrap_or(10_000.0);
    match kind {
        "default" => {}
        "linear" => {
            meta.insert(
                format!("{arch}.rope.scaling.type"),
                G::String("linear".into()),
            );
            let f = scaling.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
            meta.insert(format!("{arch}.rope.scaling.factor"), G::F32(f as f32));
        }
        "llama3" => {
            tensors.insert(
                "rope_freqs.weight".to_owned(),
                llama3_factors(scaling, head_dim, theta)?,
            );
        }
        "longrope" | "su" => longrope(cfg, scaling, arch, meta, tensors)?,
        other => anyhow::bail!("unsupported rope_scaling type `{other}`"),
    }
    Ok(())
}

/// LongRoPE (Phi-3.5, Phi-4-mini): short and long factor tensors, the original context length
/// and the cos/sin multiplier.
fn longrope(
    cfg: &Value,
    scaling: &Value,
    arch: &str,
    meta: &mut HashMap<String, gguf_file::Value>,
    tensors: &mut HashMap<String, Vec<f32>>,
) -> anyhow::Result<()> {
    use gguf_file::Value as G;
    let float = |k: &str| cfg.get(k).and_then(Value::as_f64);
    let short: Vec<f32> = scaling
        .get("short_factor")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow::anyhow!("longrope rope_scaling without short_factor"))?
        .iter()
        .map(|x| x.as_f64().unwrap_or(1.0) as f32)
        .collect();
    tensors.insert("rope_factors_short.weight".to_owned(), short);
    if let Some(long) = scaling.get("long_factor").and_then(Value::as_array) {
        let long = long.iter().map(|x| x.as_f64().unwrap_or(1.0) as f32);
        tensors.insert("rope_factors_long.weight".to_owned(), long.collect());
    }
    if let Some(original) = float("original_max_position_embeddings") {
        meta.insert(
            format!("{arch}.rope.scaling.original_context_length"),
            G::U64(original as u64),
        );
    }
    // cos/sin multiplier: `attention_factor`, else sqrt(1 + ln(s) / ln(original))
    // with s = max_position_embeddings / original (transformers
    // `_compute_longrope_parameters`).
    let factor = scaling
        .get("attention_factor")
        .and_then(Value::as_f64)
        .or_else(|| {
            let original = float("original_max_position_embeddings")?;
            let max = float("max_position_embeddings")?;
            let s = max / original;
            Some(if s <= 1.0 {
                1.0
            } else {
                (1.0 + s.ln() / original.ln()).sqrt()
            })
        })
        .unwrap_or(1.0);
    meta.insert(
        format!("{arch}.rope.scaling.attn_factor"),
        G::F32(factor as f32),
    );
    Ok(())
}

/// Llama 3.1 frequency divisors, one per rotated pair (`head_dim / 2` values); source:
/// `transformers` `_compute_llama3_parameters`. Wavelengths shorter than
/// `original_max_position_embeddings / high_freq_factor` are kept, longer than
/// `... / low_freq_factor` are divided by `factor`, and those between are interpolated.
///
/// # Errors
/// Missing fields.
fn llama3_factors(scaling: &Value, head_dim: usize, theta: f64) -> anyhow::Result<Vec<f32>> {
    let f = |k: &str| {
        scaling
            .get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| anyhow::anyhow!("llama3 rope_scaling without `{k}`"))
    };
    let (factor, low, high, old) = (
        f("factor")?,
        f("low_freq_factor")?,
        f("high_freq_factor")?,
        f("original_max_position_embeddings")?,
    );
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    Ok((0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let divisor = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_factors_keep_short_wavelengths_and_divide_long_ones() {
        let scaling = serde_json::json!({
            "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"
        });
        let f = llama3_factors(&scaling, 128, 500_000.0).unwrap();
        assert_eq!(f.len(), 64);
        assert!((f[0] - 1.0).abs() < 1e-6, "highest frequency kept");
        assert!(
            (f[63] - 8.0).abs() < 1e-6,
            "lowest frequency divided by factor"
        );
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "monotone");
        assert!(f.iter().any(|x| *x > 1.0 && *x < 8.0), "some interpolated");
    }

    #[test]
    fn unknown_model_types_and_rope_scalings_are_refused() {
        assert!(architecture("gpt_neox").is_none());
        let cfg = serde_json::json!({
            "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0}
        });
        let err = translate(&cfg, "llama").err().unwrap().to_string();
        assert!(err.contains("yarn"), "{err}");
    }
}
