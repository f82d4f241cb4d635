//! Writes the parity tests' tiny weights as a Hugging Face checkpoint: `config.json` in each
//! family's `transformers` vocabulary and two safetensors shards with an index, tensor names and
//! layouts as `transformers` stores them (Gemma norms as `w - 1`, Mixtral experts one tensor per
//! expert). The name table here is written from the `modeling_*.py` files, independently of the
//! loader's.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::json;

use super::family_shapes::{Fam, D, EPS, EXPERTS, F, H, NH, NKV, V, W, WINDOW};

fn layer_name(f: Fam, stem: &str) -> Option<&'static str> {
    Some(match stem {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_qkv" => "self_attn.qkv_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "attn_norm" => "input_layernorm",
        "ffn_norm" if f.gemma() => "pre_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "post_attention_norm" => "post_attention_layernorm",
        "post_ffw_norm" => "post_feedforward_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" if f == Fam::Phi3 => "mlp.gate_up_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "ffn_gate_inp" => "block_sparse_moe.gate",
        _ => return None,
    })
}

fn config(f: Fam, tied: bool) -> serde_json::Value {
    let model_type = match f {
        Fam::Llama => "llama",
        Fam::Qwen2 => "qwen2",
        Fam::Qwen3 => "qwen3",
        Fam::Gemma2 => "gemma2",
        Fam::Gemma3 => "gemma3_text",
        Fam::Phi3 => "phi3",
        Fam::Olmo2 => "olmo2",
        Fam::Granite => "granite",
        Fam::Cohere => "cohere",
        Fam::Mixtral => "mixtral",
        Fam { moe: true, .. } => unreachable!("only Llama has a mixture-of-experts variant"),
    };
    let mut c = json!({
        "model_type": model_type, "hidden_size": H, "num_hidden_layers": f.layers(),
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": D,
        "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 256,
        "rope_theta": if f == Fam::Gemma3 { 1_000_000.0 } else { 10_000.0 },
        "tie_word_embeddings": tied,
    });
    let extra = match f {
        Fam::Cohere => json!({"layer_norm_eps": EPS, "logit_scale": 0.5}),
        Fam::Gemma2 => json!({"rms_norm_eps": EPS, "sliding_window": WINDOW,
            "query_pre_attn_scalar": D, "attn_logit_softcapping": 2.0,
            "final_logit_softcapping": 3.0}),
        Fam::Gemma3 => json!({"rms_norm_eps": EPS, "sliding_window": WINDOW,
            "query_pre_attn_scalar": D, "rope_local_base_freq": 10_000.0}),
        Fam::Mixtral => json!({"rms_norm_eps": EPS, "num_local_experts": EXPERTS,
            "num_experts_per_tok": 2}),
        Fam::Granite => json!({"rms_norm_eps": EPS, "embedding_multiplier": 1.5,
            "attention_multiplier": 0.2, "residual_multiplier": 0.5, "logits_scaling": 4.0}),
        _ => json!({"rms_norm_eps": EPS}),
    };
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// Write `w` into `dir` as `config.json`, two shards and `model.safetensors.index.json`.
pub(super) fn write(f: Fam, w: &W, dir: &Path) {
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for (name, (shape, v)) in &w.m {
        let mut v = v.clone();
        // Gemma's RMSNorm multiplies by (1 + w); llama.cpp's conversion stores 1 + w.
        if f.gemma() && name.contains("norm") {
            v.iter_mut().for_each(|x| *x -= 1.0);
        }
        let hf = match name.as_str() {
            "token_embd.weight" => "model.embed_tokens.weight".to_owned(),
            "output_norm.weight" => "model.norm.weight".to_owned(),
            "output.weight" => "lm_head.weight".to_owned(),
            _ => {
                let rest = name.strip_prefix("blk.").unwrap();
                let (layer, rest) = rest.split_once('.').unwrap();
                let (stem, suffix) = rest.rsplit_once('.').unwrap();
                if let Some(kind) = stem.strip_suffix("_exps") {
                    let w_name = match kind {
                        "ffn_gate" => "w1",
                        "ffn_up" => "w3",
                        _ => "w2",
                    };
                    let per: usize = shape[1..].iter().product();
                    for e in 0..EXPERTS {
                        tensors.push((
                            format!(
                                "model.layers.{layer}.block_sparse_moe.experts.{e}.{w_name}.weight"
                            ),
                            shape[1..].to_vec(),
                            v[e * per..(e + 1) * per].to_vec(),
                        ));
                    }
                    continue;
                }
                let hf = layer_name(f, stem).unwrap_or_else(|| panic!("no HF name for {name}"));
                format!("model.layers.{layer}.{hf}.{suffix}")
            }
        };
        tensors.push((hf, shape.clone(), v));
    }
    let tied = !w.m.contains_key("output.weight");
    let cfg = serde_json::to_vec_pretty(&config(f, tied)).unwrap();
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let mut shards: [HashMap<String, Tensor>; 2] = [HashMap::new(), HashMap::new()];
    let mut weight_map = serde_json::Map::new();
    for (name, shape, v) in tensors {
        let shard = usize::from(!(name.contains("layers.0.") || name.contains("embed")));
        let file = format!("model-0000{}-of-00002.safetensors", shard + 1);
        weight_map.insert(name.clone(), json!(file));
        let t = Tensor::from_vec(v, shape.as_slice(), &Device::Cpu).unwrap();
        shards[shard].insert(name, t);
    }
    for (i, shard) in shards.iter().enumerate() {
        let file = dir.join(format!("model-0000{}-of-00002.safetensors", i + 1));
        candle_core::safetensors::save(shard, file).unwrap();
    }
    let index = json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
}
