//! Sampler: turns one row of logits into a token id (greedy, or temperature with top-k, top-p
//! and min-p), after `logit_bias` and the penalties.
//!
//! The logits are adjusted in this order (`Sampler::penalize`), then drawn from (`pick`):
//! - `logit_bias`: added to the listed tokens' logits (OpenAI; -100 bans, +100 forces).
//! - OpenAI's penalties (API reference, "Parameter details"):
//!   `logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty`, with counts
//!   over the tokens generated so far.
//! - `repetition_penalty` (CTRL, Keskar et al. 2019, as in transformers'
//!   `RepetitionPenaltyLogitsProcessor` and vLLM): the logit of every token seen in the prompt
//!   or the output is divided by the penalty when positive and multiplied by it when negative.
//! - At temperature > 0, the candidates are cut to the `top_k` most likely, then to the
//!   `top_p` nucleus, then to those at least `min_p` times as likely as the most likely one
//!   (Nguyen et al. 2024, "Min P Sampling"), and one is drawn. Greedy ignores all three.

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use crate::engine::kernels::argmax;
pub use crate::engine::seam::{SamplingParams, TokenLogprob};

/// Natural-log probabilities under `logits` (length = vocabulary size) as OpenAI reports them:
/// from the logits the sampler used, after the penalties (and any grammar mask or banned
/// token, which make a token impossible) and before temperature. Returns the log-probability
/// of `tok` and the `k` most likely tokens, most likely first (ties by lower id). NaN counts
/// as impossible. The normaliser is summed in `f64`.
pub fn logprobs(logits: &[f32], tok: u32, k: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|x| !x.is_nan())
        .map(|&l| f64::from(l - max).exp())
        .sum();
    let lse = max + sum.ln() as f32;
    let lp = |l: f32| {
        if l.is_nan() {
            f32::NEG_INFINITY
        } else {
            l - lse
        }
    };
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &l) in logits.iter().enumerate() {
        let l = lp(l);
        if top.len() == k && top.last().is_none_or(|&(_, m)| l <= m) {
            continue;
        }
        let at = top.partition_point(|&(_, m)| m >= l);
        top.insert(at, (u32::try_from(i).unwrap_or(u32::MAX), l));
        top.truncate(k);
    }
    (
        lp(logits.get(tok as usize).copied().unwrap_or(f32::NAN)),
        top,
    )
}

/// Per-sequence sampler state: parameters, RNG and generated-token counts.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    counts: HashMap<u32, u32>,
    /// Prompt tokens, kept only when `repetition_penalty` is on.
    prompt_seen: HashSet<u32>,
}

impl Sampler {
    /// A sampler seeded from `params.seed`, or from the OS when none is given.
    pub fn new(params: SamplingParams) -> Self {
        Self::with_prompt(params, &[])
    }

    /// A sampler whose `repetition_penalty` also covers the `prompt` token ids.
    pub fn with_prompt(params: SamplingParams, prompt: &[u32]) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        let prompt_seen = if params.repetition_penalty == 1.0 {
            HashSet::new()
        } else {
            prompt.iter().copied().collect()
        };
        Self {
            params,
            rng,
            counts: HashMap::new(),
            prompt_seen,
        }
    }

    /// Pick the next token from `logits` (length = vocabulary size) and record it.
    /// NaN logits are treated as negative infinity.
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        self.penalize(logits);
        let tok = self.pick(logits);
        self.record(tok);
        tok
    }

    /// Apply `logit_bias` and the penalties to `logits` in place (once per step; module doc).
    pub fn penalize(&self, logits: &mut [f32]) {
        let p = &self.params;
        for &(tok, bias) in &p.logit_bias {
            if let Some(l) = logits.get_mut(tok as usize) {
                *l += bias;
            }
        }
        if p.repetition_penalty != 1.0 {
            let r = p.repetition_penalty;
            let seen = self.counts.keys().filter(|t| !self.prompt_seen.contains(t));
            for &tok in self.prompt_seen.iter().chain(seen) {
                if let Some(l) = logits.get_mut(tok as usize) {
                    *l = if *l > 0.0 { *l / r } else { *l * r };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            for (&tok, &n) in &self.counts {
                if let Some(l) = logits.get_mut(tok as usize) {
                    let n = n as f32;
                    *l -= n * p.frequency_penalty + p.presence_penalty;
                }
            }
        }
    }

    /// Draw a token from already penalized `logits` (greedy at temperature 0) without recording
    /// it; a constrained sequence may draw again after masking.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            argmax(logits)
        } else {
            self.sample_soft(logits)
        }
    }

    /// Record the token finally chosen (for the penalties of later steps).
    pub fn record(&mut self, tok: u32) {
        *self.counts.entry(tok).or_insert(0) += 1;
    }

    fn sample_soft(&mut self, logits: &[f32]) -> u32 {
        let t = self.params.temperature;
        let max = logits
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let e = if l.is_nan() {
                    0.0
                } else {
                    ((l - max) / t).exp()
                };
                (u32::try_from(i).unwrap_or(u32::MAX), e)
            })
            .collect();
        let by_prob = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.params.top_k;
        if k > 0 && k < probs.len() {
            probs.select_nth_unstable_by(k - 1, by_prob);
            probs.truncate(k);
        }
        if self.params.top_p < 1.0 {
            probs.sort_unstable_by(by_prob);
            let total: f32 = probs.iter().map(|x| x.1).sum();
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, (_, p)) in probs.iter().enumerate() {
                acc += p / total;
                if acc >= self.params.top_p {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep.max(1));
        }
        if self.params.min_p > 0.0 {
            // The most likely token has weight 1 (its logit is `max`).
            let floor = self.params.min_p;
            probs.retain(|&(_, p)| p >= floor);
        }
        let total: f32 = probs.iter().map(|x| x.1).sum();
        if total <= 0.0 || !total.is_finite() {
            return argmax(logits);
        }
        let mut r = self.rng.random::<f32>() * total;
        for &(id, p) in &probs {
            if r < p {
                return id;
            }
            r -= p;
        }
        probs.last().map_or(0, |x| x.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature: t,
            top_p,
            seed: Some(seed),
            ..SamplingParams::default()
        }
    }

    /// The one-pass scan `argmax` replaced: the reference for its two passes.
    fn argmax_scan(logits: &[f32]) -> u32 {
        let mut best = 0usize;
        let mut best_v = f32::NEG_INFINITY;
        for (i, &v) in logits.iter().enumerate() {
            if v > best_v {
                best = i;
                best_v = v;
            }
        }
        u32::try_from(best).unwrap_or(0)
    }

    #[test]
    fn argmax_matches_the_scan_on_ties_nan_infinities_and_tails() {
        let mut rng = StdRng::seed_from_u64(7);
        for len in [0usize, 1, 5, 15, 16, 17, 31, 32, 33, 100, 1000, 151_936] {
            for case in 0..6 {
                let mut v: Vec<f32> = (0..len).map(|_| rng.random_range(-8.0..8.0)).collect();
                if len > 0 {
                    let at = rng.random_range(0..len);
                    match case {
                        // Ties: the same maximum at two places.
                        1 => {
                            v[at] = 9.0;
                            v[rng.random_range(0..len)] = 9.0;
                        }
                        2 => v[at] = f32::NAN,
                        3 => v.iter_mut().for_each(|x| *x = f32::NAN),
                        4 => v.iter_mut().for_each(|x| *x = f32::NEG_INFINITY),
                        5 => v[at] = f32::INFINITY,
                        _ => {}
                    }
                }
                assert_eq!(argmax(&v), argmax_scan(&v), "len {len} case {case}");
            }
        }
    }

    #[test]
    fn greedy_picks_argmax_and_ignores_nan() {
        let mut s = Sampler::new(params(0.0, 1.0, 1));
        assert_eq!(s.sample(&mut [0.1, f32::NAN, 3.0, 2.0]), 2);
    }

    #[test]
    fn same_seed_same_tokens_and_different_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = Sampler::new(params(1.0, 1.0, seed));
            (0..40)
                .map(|_| s.sample(&mut logits.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // Token 3 holds almost all the mass; top_p 0.5 must always pick it.
        let logits = [0.0, 0.0, 0.0, 10.0, 0.0];
        let mut s = Sampler::new(params(1.0, 0.5, 3));
        for _ in 0..100 {
            assert_eq!(s.sample(&mut logits.clone()), 3);
        }
    }

    #[test]
    fn frequency_and_presence_penalties_follow_openai_formula() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 0.0,
            presence_penalty: 0.5,
            frequency_penalty: 1.0,
            ..SamplingParams::default()
        });
        let mut first = [0.0, 2.0, 1.0];
        assert_eq!(s.sample(&mut first), 1);
        // Token 1 now has count 1: 2.0 - 1.0 - 0.5 = 0.5 < 1.0, so token 2 wins.
        let mut second = [0.0, 2.0, 1.0];
        assert_eq!(s.sample(&mut second), 2);
        assert!((second[1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn top_k_and_min_p_cut_the_candidates() {
        let logits = [1.0_f32, 3.0, 2.9, 0.5];
        let draw = |p: SamplingParams| {
            let mut s = Sampler::new(p);
            (0..200)
                .map(|_| s.sample(&mut logits.clone()))
                .collect::<HashSet<_>>()
        };
        let base = params(1.0, 1.0, 5);
        assert_eq!(draw(base.clone()).len(), 4);
        let top1 = draw(SamplingParams {
            top_k: 1,
            ..base.clone()
        });
        assert_eq!(top1, HashSet::from([1]));
        let top2 = draw(SamplingParams {
            top_k: 2,
            ..base.clone()
        });
        assert_eq!(top2, HashSet::from([1, 2]));
        // exp(-0.1) = 0.905 and exp(-2) = 0.135 of the top token's probability.
        let min_p = draw(SamplingParams { min_p: 0.5, ..base });
        assert_eq!(min_p, HashSet::from([1, 2]));
    }

    #[test]
    fn logit_bias_and_repetition_penalty_adjust_the_logits() {
        let s = Sampler::with_prompt(
            SamplingParams {
                logit_bias: vec![(0, -100.0), (3, 5.0)],
                repetition_penalty: 2.0,
                ..params(0.0, 1.0, 1)
            },
            &[1, 2],
        );
        let mut l = [4.0_f32, 4.0, -1.0, 0.0];
        s.penalize(&mut l);
        // Token 1 (in the prompt, positive) halves, token 2 (negative) doubles.
        assert_eq!(l, [-96.0, 2.0, -2.0, 5.0]);
        let off = Sampler::new(params(0.0, 1.0, 1));
        let mut l = [4.0_f32, 4.0, -1.0, 0.0];
        off.penalize(&mut l);
        assert_eq!(l, [4.0, 4.0, -1.0, 0.0]);
        // Generated tokens count too.
        let mut s = Sampler::new(SamplingParams {
            repetition_penalty: 4.0,
            ..params(0.0, 1.0, 1)
        });
        assert_eq!(s.sample(&mut [1.0, 2.0, 0.0]), 1);
        assert_eq!(s.sample(&mut [1.0, 2.0, 0.0]), 0);
    }

    #[test]
    fn logprobs_normalise_and_rank() {
        let logits = [1.0_f32, 3.0, f32::NAN, 2.0, f32::NEG_INFINITY];
        let (lp, top) = super::logprobs(&logits, 3, 2);
        let z: f32 = [1.0_f32, 3.0, 2.0].iter().map(|x| x.exp()).sum();
        assert!((lp - (2.0 - z.ln())).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3]);
        let total: f32 = [0, 1, 3]
            .iter()
            .map(|&i| super::logprobs(&logits, i, 0).0.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(super::logprobs(&logits, 2, 0).0, f32::NEG_INFINITY);
    }
}
