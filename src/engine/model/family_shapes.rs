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

use super::Family;

/// A family under test: the engine's `Family`, and for `Llama` whether the model is
/// Mixtral-shaped (mixture-of-experts feed-forward, written with the `llama` architecture).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Fam {
    pub(super) family: Family,
    pub(super) moe: bool,
}

const fn fam(family: Family) -> Fam {
    Fam { family, moe: false }
}

#[allow(non_upper_case_globals)] // Named as the variants of `Family` they stand for.
impl Fam {
    pub(super) const Llama: Fam = fam(Family::Llama);
    pub(super) const Qwen2: Fam = fam(Family::Qwen2);
    pub(super) const Qwen3: Fam = fam(Family::Qwen3);
    pub(super) const Gemma2: Fam = fam(Family::Gemma2);
    pub(super) const Gemma3: Fam = fam(Family::Gemma3);
    pub(super) const Phi3: Fam = fam(Family::Phi3);
    pub(super) const Olmo2: Fam = fam(Family::Olmo2);
    pub(super) const Granite: Fam = fam(Family::Granite);
    pub(super) const Cohere: Fam = fam(Family::Cohere);
    pub(super) const Mixtral: Fam = Fam {
        family: Family::Llama,
        moe: true,
    };
}

impl Fam {
    pub(super) fn arch(self) -> &'static str {
        self.family.arch()
    }
    /// The weights' seed offset: the family's index, Mixtral after the nine families.
    pub(super) fn seed(self) -> u64 {
        if self.moe {
            9
        } else {
            self.family as u64
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
