//! Loading a `Transformer` from a `TensorStore` (a GGUF file or a Hugging Face safetensors
//! directory): per-family hyper-parameters, tensor names and variants. Metadata keys and tensor
//! names follow llama.cpp (`token_embd`, `blk.N.attn_q`, ..., `output_norm`, `output`).

use candle_core::Tensor;

use super::attention::{KvType, Rope, RopeStyle};
use super::linear::{KernelPath, Matmul};
use super::{Config, Family, GateUp, Layer, Linear, Mlp, Qkv, Transformer};
use crate::engine::weights::store::{RopeLayout, TensorStore};

/// GGUF architectures the engine runs.
pub const SUPPORTED: &str =
    "llama, mistral, qwen2, qwen2vl, qwen3, gemma2, gemma3, phi3, olmo2, granite, command-r";

struct Loader<'a> {
    file: &'a mut dyn TensorStore,
    path: KernelPath,
}

impl Loader<'_> {
    fn matmul(&mut self, name: &str) -> anyhow::Result<Matmul> {
        Ok(Matmul::new(self.file.qtensor(name)?, self.path)?)
    }

    fn opt(&mut self, name: &str) -> anyhow::Result<Option<Tensor>> {
        if self.file.has_tensor(name) {
            Ok(Some(self.file.tensor_f32(name)?))
        } else {
            Ok(None)
        }
    }

    fn linear(&mut self, name: &str) -> anyhow::Result<Linear> {
        Ok(Linear {
            w: self.matmul(&format!("{name}.weight"))?,
            b: self.opt(&format!("{name}.bias"))?,
        })
    }
}

/// Separate `ffn_gate`/`ffn_up`, or Phi-3's fused `[gate | up]` in `ffn_up`.
fn dense_gate_up(ld: &mut Loader<'_>, p: &str) -> anyhow::Result<GateUp> {
    if ld.file.has_tensor(&format!("{p}.ffn_gate.weight")) {
        let parts = vec![
            ld.matmul(&format!("{p}.ffn_gate.weight"))?,
            ld.matmul(&format!("{p}.ffn_up.weight"))?,
        ];
        Ok(match Matmul::fuse(parts) {
            Ok(fused) => GateUp::Fused(fused),
            Err(parts) => {
                let [g, u]: [Matmul; 2] =
                    parts.try_into().map_err(|_| anyhow::anyhow!("two parts"))?;
                GateUp::Separate(g, u)
            }
        })
    } else {
        Ok(GateUp::Fused(ld.matmul(&format!("{p}.ffn_up.weight"))?))
    }
}

/// Separate q, k, v projections as one matrix when our kernels run all three with the same
/// type (biases, if all three have them, concatenated too): one pass over the activations
/// instead of three, with the same outputs.
fn fuse_qkv(q: Linear, k: Linear, v: Linear) -> anyhow::Result<Qkv> {
    let bias = match (&q.b, &k.b, &v.b) {
        (Some(a), Some(b), Some(c)) => Some(Some(Tensor::cat(&[a, b, c], 0)?)),
        (None, None, None) => Some(None),
        _ => None,
    };
    let Some(bias) = bias else {
        return Ok(Qkv::Separate(q, k, v));
    };
    let (qb, kb, vb) = (q.b, k.b, v.b);
    Ok(match Matmul::fuse(vec![q.w, k.w, v.w]) {
        Ok(w) => Qkv::Fused(Linear { w, b: bias }),
        Err(parts) => {
            let [qw, kw, vw]: [Matmul; 3] = parts
                .try_into()
                .map_err(|_| anyhow::anyhow!("three parts"))?;
            Qkv::Separate(
                Linear { w: qw, b: qb },
                Linear { w: kw, b: kb },
                Linear { w: vw, b: vb },
            )
        }
    })
}

impl Family {
    /// The family that serves a GGUF `general.architecture` (one of `SUPPORTED`).
    pub fn of(arch: &str) -> Option<Self> {
        Some(match arch {
            "llama" | "mistral" => Self::Llama,
            // Qwen2-VL/Qwen2.5-VL's text model: Qwen2 with multimodal RoPE sections.
            "qwen2" | "qwen2vl" => Self::Qwen2,
            "qwen3" => Self::Qwen3,
            "gemma2" => Self::Gemma2,
            "gemma3" => Self::Gemma3,
            "phi3" => Self::Phi3,
            "olmo2" => Self::Olmo2,
            "granite" => Self::Granite,
            "command-r" => Self::Cohere,
            _ => return None,
        })
    }

    /// The GGUF `general.architecture` llama.cpp writes for this family (`of`'s inverse; a
    /// Mistral or Mixtral checkpoint is written as `llama`).
    pub fn arch(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma2 => "gemma2",
            Self::Gemma3 => "gemma3",
            Self::Phi3 => "phi3",
            Self::Olmo2 => "olmo2",
            Self::Granite => "granite",
            Self::Cohere => "command-r",
        }
    }
}

impl Transformer {
    /// Load a model from an open store (GGUF file or safetensors directory), for contexts
    /// within the model's original training context (see `load_for_context`).
    ///
    /// # Errors
    /// Unsupported architectures, missing tensors or metadata.
    pub fn load(file: &mut dyn TensorStore) -> anyhow::Result<Self> {
        Self::load_for_context(file, 0)
    }

    /// Load a model that will serve sequences of up to `context` tokens. LongRoPE files
    /// (Phi-3.5-mini, Phi-4-mini: `rope_factors_short`/`rope_factors_long` and
    /// `rope.scaling.original_context_length`) use the long factors when `context` exceeds the
    /// original context, else the short ones; chosen once per load, as llama.cpp chooses by
    /// its context size (`llm_graph_context::build_rope_factors`), so every cached key was
    /// rotated with the same frequencies. Source: Phi-3 technical report, LongRoPE (Ding et
    /// al. 2024).
    ///
    /// # Errors
    /// Unsupported architectures, missing tensors or metadata.
    pub fn load_for_context(file: &mut dyn TensorStore, context: usize) -> anyhow::Result<Self> {
        let path = KernelPath::for_device(&file.device());
        Self::load_on_path(file, context, path)
    }

    /// As `load_for_context`, with the kernel path chosen by the caller: tests load a CPU
    /// model on `KernelPath::Candle` to run the code a CUDA device runs.
    ///
    /// # Errors
    /// As `load_for_context`.
    pub fn load_on_path(
        file: &mut dyn TensorStore,
        context: usize,
        path: KernelPath,
    ) -> anyhow::Result<Self> {
        let arch = file.architecture()?;
        let family = Family::of(&arch).ok_or_else(|| {
            anyhow::anyhow!("unsupported architecture `{arch}` (supported: {SUPPORTED})")
        })?;
        let mut meta = Meta {
            file: &mut *file,
            arch: &arch,
        };
        let mut config = meta.config(family)?;
        let ropes = meta.ropes(&config, context)?;
        let window = meta
            .file
            .usize_or(&meta.key("attention.sliding_window"), 4096);
        let top_k = meta.file.usize_or(&meta.key("expert_used_count"), 2);
        let mut ld = Loader { file, path };
        let layers = (0..config.n_layers)
            .map(|i| ld.layer(i, family, window, top_k.max(1)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let embed = ld.file.qtensor("token_embd.weight")?;
        let lm_head = if ld.file.has_tensor("output.weight") {
            ld.matmul("output.weight")?
        } else {
            // Tied embeddings: the same matrix, as our matmul.
            ld.matmul("token_embd.weight")?
        };
        let output_norm = ld.file.tensor_f32("output_norm.weight")?;
        config.vocab_size = embed.shape().dims().first().copied().unwrap_or(0);
        let device = embed.device();
        let zero_bias = Tensor::zeros(
            config.hidden.max(config.n_heads * config.head_dim),
            candle_core::DType::F32,
            &device,
        )?;
        Ok(Self {
            config,
            embed,
            layers,
            output_norm,
            zero_bias,
            lm_head,
            ropes,
            device,
            path,
            kv_type: KvType::default(),
        })
    }
}

/// A store's metadata under its architecture's prefix (`{arch}.{key}`).
struct Meta<'a> {
    file: &'a mut dyn TensorStore,
    arch: &'a str,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// A positive f32 value (the soft-capping keys, where 0 means none).
    fn softcap(&self, k: &str) -> Option<f32> {
        self.file
            .get(&self.key(k))
            .and_then(|v| v.to_f32().ok())
            .filter(|c| *c > 0.0)
    }

    fn f64_key(&self, k: &str) -> Option<f64> {
        self.file
            .get(&self.key(k))
            .and_then(|v| v.to_f32().ok())
            .map(f64::from)
    }

    /// The hyper-parameters; `vocab_size` is 0 until the embedding is read.
    fn config(&self, family: Family) -> anyhow::Result<Config> {
        let file = &*self.file;
        let key = |k: &str| self.key(k);
        let hidden = file.usize(&key("embedding_length"))?;
        let n_heads = file.usize(&key("attention.head_count"))?;
        let n_kv_heads = file.usize_or(&key("attention.head_count_kv"), n_heads);
        let head_dim = file.usize_or(&key("attention.key_length"), hidden / n_heads.max(1));
        anyhow::ensure!(
            n_kv_heads > 0 && n_heads % n_kv_heads == 0,
            "head counts {n_heads}/{n_kv_heads} do not divide"
        );
        let n_layers = file.usize(&key("block_count"))?;
        let rms_eps = f64::from(file.f32_or(
            &key("attention.layer_norm_rms_epsilon"),
            file.f32_or(&key("attention.layer_norm_epsilon"), 1e-6),
        ));
        let gemma = matches!(family, Family::Gemma2 | Family::Gemma3);
        let only = |f: Family, v: Option<f64>| if family == f { v } else { None };
        Ok(Config {
            family,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_eps,
            context_length: file.usize_or(&key("context_length"), 4096),
            vocab_size: 0, // set from the embedding
            embed_scale: if gemma {
                Some((hidden as f64).sqrt())
            } else {
                self.f64_key("embedding_scale")
            },
            attn_scale: self
                .f64_key("attention.scale")
                .map_or(1.0 / (head_dim as f32).sqrt(), |s| s as f32),
            attn_softcap: (family == Family::Gemma2)
                .then(|| self.softcap("attn_logit_softcapping"))
                .flatten(),
            final_softcap: (family == Family::Gemma2)
                .then(|| self.softcap("final_logit_softcapping"))
                .flatten(),
            residual_scale: self.f64_key("residual_scale"),
            logit_scale: only(Family::Granite, self.f64_key("logit_scale")),
            gelu: gemma,
            layer_norm: family == Family::Cohere,
            parallel_block: family == Family::Cohere,
            logit_mul: only(Family::Cohere, self.f64_key("logit_scale")),
        })
    }

    /// The rotary embeddings: the model's, then (Gemma 3) the local layers' at base 10000.
    fn ropes(&mut self, c: &Config, context: usize) -> anyhow::Result<Vec<Rope>> {
        let arch = self.arch;
        let key = |k: &str| format!("{arch}.{k}");
        let file = &mut *self.file;
        let theta = file.f32_or(&key("rope.freq_base"), 10_000.0);
        let linear = match file.string(&key("rope.scaling.type")) {
            Ok("linear") => file.f32_or(&key("rope.scaling.factor"), 1.0),
            _ => 1.0,
        };
        // Llama 3.1 `rope_freqs`; LongRoPE files carry short and long factors.
        let original = file.usize_or(&key("rope.scaling.original_context_length"), 0);
        let long = original > 0 && context > original;
        let factor_tensor = [
            "rope_freqs.weight",
            if long {
                "rope_factors_long.weight"
            } else {
                "rope_factors_short.weight"
            },
        ]
        .into_iter()
        .find(|n| file.has_tensor(n));
        let factors = match factor_tensor {
            Some(n) => Some(file.tensor_f32(n)?.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        // llama.cpp's GGUF conversion permutes q/k for llama-style models (interleaved pairs);
        // the others, and every Hugging Face checkpoint, keep the rotate-half layout.
        let style = if file.rope_layout() == RopeLayout::LlamaCpp
            && matches!(c.family, Family::Llama | Family::Granite | Family::Cohere)
        {
            RopeStyle::Interleaved
        } else {
            RopeStyle::Neox
        };
        // Partial rotary (Phi-4-mini) and LongRoPE's cos/sin multiplier.
        let rotary_dim = file.usize_or(&key("rope.dimension_count"), c.head_dim);
        let mscale = file.f32_or(&key("rope.scaling.attn_factor"), 1.0);
        let mut ropes = vec![
            Rope::new(style, theta, rotary_dim, factors.as_deref(), linear)
                .for_head(c.head_dim, mscale),
        ];
        if c.family == Family::Gemma3 {
            ropes.push(Rope::new(style, 10_000.0, c.head_dim, None, 1.0));
        }
        if let Some(v) = file
            .get(&key("rope.dimension_sections"))
            .and_then(crate::engine::weights::gguf::int_array)
        {
            let s: Vec<usize> = v.iter().map(|&x| usize::try_from(x).unwrap_or(0)).collect();
            anyhow::ensure!(
                s.len() >= 3 && s[..3].iter().sum::<usize>() == rotary_dim / 2,
                "rope.dimension_sections {v:?} do not split {} frequency pairs",
                rotary_dim / 2
            );
            for rope in &mut ropes {
                rope.sections = Some([s[0], s[1], s[2]]);
            }
        }
        Ok(ropes)
    }
}

impl Loader<'_> {
    /// Layer `i`: its projections, norms, feed-forward block, rope and attention window
    /// (Gemma 3: five local layers of `window` to one global; Gemma 2: alternating).
    fn layer(
        &mut self,
        i: usize,
        family: Family,
        window: usize,
        top_k: usize,
    ) -> anyhow::Result<Layer> {
        let p = format!("blk.{i}");
        let qkv = if self.file.has_tensor(&format!("{p}.attn_qkv.weight")) {
            Qkv::Fused(self.linear(&format!("{p}.attn_qkv"))?)
        } else {
            fuse_qkv(
                self.linear(&format!("{p}.attn_q"))?,
                self.linear(&format!("{p}.attn_k"))?,
                self.linear(&format!("{p}.attn_v"))?,
            )?
        };
        let mlp = if self.file.has_tensor(&format!("{p}.ffn_gate_inp.weight")) {
            self.experts(&p, top_k)?
        } else {
            Mlp::Dense {
                gate_up: dense_gate_up(self, &p)?,
                down: self.matmul(&format!("{p}.ffn_down.weight"))?,
            }
        };
        let (rope, window) = match family {
            Family::Gemma3 if !(i + 1).is_multiple_of(6) => (1, Some(window)),
            Family::Gemma2 if i.is_multiple_of(2) => (0, Some(window)),
            _ => (0, None),
        };
        Ok(Layer {
            attn_norm: self.opt(&format!("{p}.attn_norm.weight"))?,
            qkv,
            o: self.matmul(&format!("{p}.attn_output.weight"))?,
            q_norm: self.opt(&format!("{p}.attn_q_norm.weight"))?,
            k_norm: self.opt(&format!("{p}.attn_k_norm.weight"))?,
            post_attn_norm: self.opt(&format!("{p}.post_attention_norm.weight"))?,
            ffn_norm: self.opt(&format!("{p}.ffn_norm.weight"))?,
            mlp,
            post_ffn_norm: self.opt(&format!("{p}.post_ffw_norm.weight"))?,
            rope,
            window,
        })
    }

    /// A sparse mixture of experts under prefix `p`: the router and the experts' gate, up and
    /// down matrices, from fused `ffn_*_exps` tensors or (older files) one per expert.
    fn experts(&mut self, p: &str, top_k: usize) -> anyhow::Result<Mlp> {
        let router = self.matmul(&format!("{p}.ffn_gate_inp.weight"))?;
        let fused = self.file.has_tensor(&format!("{p}.ffn_gate_exps.weight"));
        let (gates, ups, downs) = if fused {
            let mut split = |n: &str| -> anyhow::Result<Vec<Matmul>> {
                let q = self.file.qtensor(&format!("{p}.{n}.weight"))?;
                super::moe::split_experts(&q, &self.file.device(), self.path)
            };
            (
                split("ffn_gate_exps")?,
                split("ffn_up_exps")?,
                split("ffn_down_exps")?,
            )
        } else {
            // Older files store one tensor per expert: `ffn_gate.{e}.weight`, ...
            let n = (0..)
                .take_while(|e| self.file.has_tensor(&format!("{p}.ffn_gate.{e}.weight")))
                .count();
            let mut per = |kind: &str| -> anyhow::Result<Vec<Matmul>> {
                (0..n)
                    .map(|e| self.matmul(&format!("{p}.{kind}.{e}.weight")))
                    .collect()
            };
            (per("ffn_gate")?, per("ffn_up")?, per("ffn_down")?)
        };
        Ok(Mlp::Experts(super::moe::Moe::new(
            router, gates, ups, downs, top_k,
        )))
    }
}
