//! Packed inputs: several inputs' token ids laid end to end, without padding, and how a
//! request's rows are cut into forwards. The encoders' forwards take a `Packed`.
//!
//! Owns: the layout. May use: std. Never: candle, tokenizers.

use std::ops::Range;

/// Several inputs' token ids laid end to end: what the encoders' forwards take. Linear layers
/// run on all `T` tokens at once; attention and pooling stay within each input's span.
pub struct Packed {
    /// `[T]` token ids.
    pub ids: Vec<u32>,
    /// `[T]` each token's position within its input (0 at its first token).
    pub positions: Vec<u32>,
    /// Each input's rows in `0..T`, in order.
    pub spans: Vec<Range<usize>>,
}

impl Packed {
    /// Pack `rows` in order.
    pub fn new(rows: &[Vec<u32>]) -> Self {
        let total = rows.iter().map(Vec::len).sum();
        let mut p = Self {
            ids: Vec::with_capacity(total),
            positions: Vec::with_capacity(total),
            spans: Vec::with_capacity(rows.len()),
        };
        for r in rows {
            let start = p.ids.len();
            p.ids.extend_from_slice(r);
            p.positions.extend(0..r.len() as u32);
            p.spans.push(start..p.ids.len());
        }
        p
    }
}

/// `rows` cut, in order, into runs of at most `max_tokens` tokens (a longer row runs alone).
pub fn batches(rows: &[Vec<u32>], max_tokens: usize) -> Vec<&[Vec<u32>]> {
    let mut out = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        if i > start && tokens + r.len() > max_tokens {
            out.push(&rows[start..i]);
            (start, tokens) = (i, 0);
        }
        tokens += r.len();
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_rows_in_order_under_the_token_limit() {
        let rows: Vec<Vec<u32>> = [3usize, 3, 5, 300, 300, 1000, 9000, 2]
            .iter()
            .map(|&n| vec![7; n])
            .collect();
        let cut = batches(&rows, 1000);
        let lens: Vec<Vec<usize>> = cut
            .iter()
            .map(|b| b.iter().map(Vec::len).collect())
            .collect();
        assert_eq!(
            lens,
            [vec![3, 3, 5, 300, 300], vec![1000], vec![9000], vec![2]]
        );
        assert!(batches(&[], 1000).is_empty());
    }

    #[test]
    fn packing_lays_inputs_end_to_end_with_their_own_positions() {
        let p = Packed::new(&[vec![5, 6, 7], vec![8], vec![9, 10]]);
        assert_eq!(p.ids, [5, 6, 7, 8, 9, 10]);
        assert_eq!(p.positions, [0, 1, 2, 0, 0, 1]);
        assert_eq!(p.spans, [0..3, 3..4, 4..6]);
    }
}
