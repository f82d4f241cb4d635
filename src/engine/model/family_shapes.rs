//! The tiny models of the family parity tests: their shapes, families and weights (shared by
//! `family_tests`, which builds and checks them, and `family_tests_hf`, which writes them as a
//! Hugging Face checkpoint).

pub(super) const H: usize = 32; // hidden
pub(super) const NH: usize = 4; // query heads
pub(super) const NKV: usize = 2; // kv heads
pub(super) const D: usize = 8; // head dim
pub(super) const F: usize = 48; // ffn
pub(super) const V: usize = 64; // vocab
pub(super) const EPS: f32 = 1e-5;
pub(super) const WINDOW: usize = 4;
pub(super) const EXPERTS: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fam {
    Llama,
    Qwen2,
    Qwen3,
    Gemma2,
    Gemma3,
    Phi3,
    Olmo2,
    Granite,
    Cohere,
    Mixtral,
}

impl Fam {
    pub(super) fn arch(self) -> &'static str {
        match self {
            Fam::Llama => "llama",
            Fam::Qwen2 => "qwen2",
            Fam::Qwen3 => "qwen3",
            Fam::Gemma2 => "gemma2",
            Fam::Gemma3 => "gemma3",
            Fam::Phi3 => "phi3",
            Fam::Olmo2 => "olmo2",
            Fam::Granite => "granite",
            Fam::Cohere => "command-r",
            Fam::Mixtral => "llama",
        }
    }
    pub(super) fn layers(self) -> usize {
        if self == Fam::Gemma3 {
            6
        } else {
            3
        }
    }
    pub(super) fn gemma(self) -> bool {
        matches!(self, Fam::Gemma2 | Fam::Gemma3)
    }
}

/// Weights as plain row-major matrices `[out][in]`, by llama.cpp tensor name.
pub(super) struct W {
    pub(super) m: std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

impl W {
    pub(super) fn get(&self, n: &str) -> Option<&Vec<f32>> {
        self.m.get(n).map(|x| &x.1)
    }
    pub(super) fn req(&self, n: &str) -> &Vec<f32> {
        self.get(n).unwrap_or_else(|| panic!("missing {n}"))
    }
}
