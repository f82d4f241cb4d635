//! The greedy pick over a row of logits (`argmax`), shared by the sampler and the model's
//! checks; tested against a one-pass scan in `runtime::sampler`'s tests.

/// Index of the largest logit; the lowest index wins ties; NaN never wins; 0 when no logit is
/// above -inf.
///
/// Greedy decoding calls this once per sequence and step on the engine thread while the pool
/// waits (a 151,936-entry vocabulary for Qwen2.5), so it runs as two passes the compiler
/// vectorizes instead of one loop with a branch per logit: the maximum over 16 lanes (`vmaxps`,
/// which keeps the lane's value when the logit is NaN), then the first 16-chunk holding it and
/// the first index in that chunk. Same result as the one-pass scan (`argmax_scan` in the tests).
pub fn argmax(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    // `if v > m { v } else { m }` skips NaN (every comparison with it is false).
    let keep_greater = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = keep_greater(*m, v);
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .copied()
        .fold(f32::NEG_INFINITY, keep_greater);
    if max == f32::NEG_INFINITY {
        return 0;
    }
    let hit = |c: &[f32]| c.iter().fold(false, |h, &v| h | (v == max));
    let chunk = logits.chunks(LANES).position(hit).unwrap_or(0);
    let at = logits[chunk * LANES..]
        .iter()
        .position(|&v| v == max)
        .map_or(0, |i| chunk * LANES + i);
    u32::try_from(at).unwrap_or(0)
}
