//! Rotary position embedding (RoPE) for the packed batch: cos/sin tables per position and the
//! rotation of query and key heads in place.
//!
//! Su et al., "RoFormer" (2021). Two layouts: `Interleaved` pairs (x[2i], x[2i+1]) as in GGUF
//! llama files (llama.cpp permutes q/k at conversion); `Neox` pairs (x[i], x[i + d/2]) as in
//! Hugging Face `rotate_half` (Qwen2, Gemma).
//! May use: std only. Never: candle, the KV cache, the scheduler.

/// RoPE pairing layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    Interleaved,
    Neox,
}

/// Rotary embedding parameters for a group of layers.
#[derive(Debug, Clone)]
pub struct Rope {
    /// Multimodal RoPE (Qwen2-VL, Qwen2.5-VL): frequency pairs `0..s0` turn with a token's
    /// temporal position, the next `s1` with its row, the last `s2` with its column
    /// (`rope.dimension_sections`; `transformers`' `apply_multimodal_rotary_pos_emb`). `None`:
    /// one position for every pair.
    pub sections: Option<[usize; 3]>,
    pub style: RopeStyle,
    /// Inverse frequencies, `rotary_dim / 2` entries (after any scaling).
    pub inv_freq: Vec<f32>,
    /// Head dimension; entries past the rotary dimension pass through (partial rotary, e.g.
    /// Phi-4-mini rotates 96 of 128).
    pub head_dim: usize,
    /// Multiplier on cos and sin (LongRoPE's attention factor; 1 otherwise).
    pub mscale: f32,
}

impl Rope {
    /// `theta` is the base (e.g. 10000); `factors` divide the frequencies (Llama 3 `rope_freqs`,
    /// linear scaling); `dim` is the rotary dimension (the head dimension unless `for_head`
    /// says otherwise).
    pub fn new(
        style: RopeStyle,
        theta: f32,
        dim: usize,
        factors: Option<&[f32]>,
        linear: f32,
    ) -> Self {
        let half = dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / theta.powf((2 * i) as f32 / dim as f32);
                let f = factors.and_then(|fs| fs.get(i)).map_or(f, |s| f / s);
                f / linear
            })
            .collect();
        Self {
            sections: None,
            style,
            inv_freq,
            head_dim: dim,
            mscale: 1.0,
        }
    }

    /// Set the head dimension (>= the rotary dimension) and the cos/sin multiplier.
    #[must_use]
    pub fn for_head(mut self, head_dim: usize, mscale: f32) -> Self {
        self.head_dim = head_dim.max(self.inv_freq.len() * 2);
        self.mscale = mscale;
        self
    }

    /// cos/sin tables for the given positions: each `positions.len() * head_dim / 2`.
    pub fn tables(&self, positions: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for &f in &self.inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos() * self.mscale);
                sin.push(a.sin() * self.mscale);
            }
        }
        (cos, sin)
    }

    /// cos/sin tables for 3-D positions `(t, row, column)`, each pair taking the component its
    /// section names (`sections`; the first component when there are none): each
    /// `positions.len() * head_dim / 2`. For text tokens the three are equal and this is
    /// `tables`.
    pub fn tables_3d(&self, positions: &[[usize; 3]]) -> (Vec<f32>, Vec<f32>) {
        let half = self.inv_freq.len();
        let component: Vec<usize> = (0..half)
            .map(|j| match self.sections {
                Some([s0, _, _]) if j < s0 => 0,
                Some([s0, s1, _]) if j < s0 + s1 => 1,
                Some(_) => 2,
                None => 0,
            })
            .collect();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for p in positions {
            for (&f, &c) in self.inv_freq.iter().zip(&component) {
                let a = p[c] as f32 * f;
                cos.push(a.cos() * self.mscale);
                sin.push(a.sin() * self.mscale);
            }
        }
        (cos, sin)
    }

    /// Rotate `x` laid out as `[tokens][heads][head_dim]` in place (the first rotary-dimension
    /// entries of each head).
    pub fn apply(&self, x: &mut [f32], heads: usize, cos: &[f32], sin: &[f32]) {
        let half = self.inv_freq.len();
        for (row, v) in x.chunks_exact_mut(self.head_dim).enumerate() {
            let t = row / heads;
            let (c, s) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            match self.style {
                RopeStyle::Interleaved => {
                    for i in 0..half {
                        let (a, b) = (v[2 * i], v[2 * i + 1]);
                        v[2 * i] = a * c[i] - b * s[i];
                        v[2 * i + 1] = a * s[i] + b * c[i];
                    }
                }
                RopeStyle::Neox => {
                    for i in 0..half {
                        let (a, b) = (v[i], v[i + half]);
                        v[i] = a * c[i] - b * s[i];
                        v[i + half] = a * s[i] + b * c[i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_rotary_rotates_the_leading_dims_and_passes_the_rest() {
        // Two heads of dim 6, rotary dim 4: equal to full RoPE on the first 4 entries.
        let partial = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0).for_head(6, 1.0);
        let full = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0);
        let (c, s) = partial.tables(&[5]);
        let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
        let mut got = x.clone();
        partial.apply(&mut got, 2, &c, &s);
        for head in 0..2 {
            let mut want = x[head * 6..head * 6 + 4].to_vec();
            full.apply(&mut want, 1, &c, &s);
            assert_eq!(&got[head * 6..head * 6 + 4], want.as_slice());
            assert_eq!(
                &got[head * 6 + 4..head * 6 + 6],
                &x[head * 6 + 4..head * 6 + 6]
            );
        }
        // The LongRoPE multiplier scales cos and sin.
        let scaled = Rope::new(RopeStyle::Neox, 10000.0, 4, None, 1.0).for_head(4, 1.5);
        let (c2, _) = scaled.tables(&[0]);
        assert!(c2.iter().all(|v| (v - 1.5).abs() < 1e-6));
    }

    #[test]
    fn rope_styles_rotate_the_right_pairs_and_keep_norms() {
        let d = 4;
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            let rope = Rope::new(style, 10000.0, d, None, 1.0);
            let (c, s) = rope.tables(&[0, 3]);
            let mut x = vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
            rope.apply(&mut x, 1, &c, &s);
            assert_eq!(&x[..4], &[1.0, 2.0, 3.0, 4.0], "position 0 is the identity");
            let n: f32 = x[4..].iter().map(|v| v * v).sum();
            assert!((n - 30.0).abs() < 1e-4);
            // Position 3 rotates the first pair by 3 radians.
            let (a, b) = match style {
                RopeStyle::Interleaved => (x[4], x[5]),
                RopeStyle::Neox => (x[4], x[6]),
            };
            let (x0, y0) = match style {
                RopeStyle::Interleaved => (1.0f32, 2.0f32),
                RopeStyle::Neox => (1.0, 3.0),
            };
            assert!((a - (x0 * 3f32.cos() - y0 * 3f32.sin())).abs() < 1e-5);
            assert!((b - (x0 * 3f32.sin() + y0 * 3f32.cos())).abs() < 1e-5);
        }
    }
}
