//! Sparse mixture-of-experts MLP (Mixtral; Jiang et al., "Mixtral of Experts", 2024): a router
//! picks the top-k experts per token, their SwiGLU outputs are summed with the router's softmax
//! weights renormalised over the chosen k. GGUF stores the experts fused (`ffn_gate_exps`,
//! `ffn_up_exps`, `ffn_down_exps`, shape `[experts, rows, cols]`); they are split per expert at
//! load. Each token's result depends only on its own row, so batching stays invariant.

use std::borrow::Cow;

use candle_core::quantized::{QStorage, QTensor};

use super::linear::{KernelPath, Matmul};
use candle_core::{Device, Tensor};

/// One expert's SwiGLU MLP.
pub struct Expert {
    gate: Matmul,
    up: Matmul,
    down: Matmul,
}

/// The router and the experts of one layer.
pub struct Moe {
    /// `[experts, hidden]`.
    router: Matmul,
    experts: Vec<Expert>,
    top_k: usize,
}

/// Split a fused `[experts, rows, cols]` tensor into one `[rows, cols]` matmul per expert.
///
/// # Errors
/// Shape or storage errors.
pub fn split_experts(
    q: &QTensor,
    device: &Device,
    path: KernelPath,
) -> anyhow::Result<Vec<Matmul>> {
    let (n, rows, cols) = q.shape().dims3()?;
    let data = q.data()?;
    anyhow::ensure!(
        n > 0 && data.len() % n == 0,
        "expert tensor of {} bytes does not split into {n}",
        data.len()
    );
    let per = data.len() / n;
    (0..n)
        .map(|e| {
            let storage = QStorage::from_data(
                Cow::Borrowed(&data[e * per..(e + 1) * per]),
                device,
                q.dtype(),
            )?;
            Ok(Matmul::new(QTensor::new(storage, (rows, cols))?, path)?)
        })
        .collect()
}

impl Moe {
    pub fn new(
        router: Matmul,
        gates: Vec<Matmul>,
        ups: Vec<Matmul>,
        downs: Vec<Matmul>,
        top_k: usize,
    ) -> Self {
        let experts = gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate, up), down)| Expert { gate, up, down })
            .collect();
        Self {
            router,
            experts,
            top_k,
        }
    }

    /// `h`: `[tokens, hidden]` -> `[tokens, hidden]`.
    ///
    /// # Errors
    /// candle errors.
    pub fn forward(&self, h: &Tensor) -> candle_core::Result<Tensor> {
        let (t, hidden) = h.dims2()?;
        let logits = self.router.forward(h)?.to_vec2::<f32>()?;
        // Per expert: (token index, weight).
        let mut routed: Vec<Vec<(u32, f32)>> = vec![Vec::new(); self.experts.len()];
        for (tok, row) in logits.iter().enumerate() {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            let chosen = &order[..self.top_k.min(order.len())];
            let max = row[chosen[0]];
            let exps: Vec<f32> = chosen.iter().map(|&e| (row[e] - max).exp()).collect();
            let z: f32 = exps.iter().sum();
            for (&e, w) in chosen.iter().zip(exps) {
                routed[e].push((u32::try_from(tok).unwrap_or(u32::MAX), w / z));
            }
        }
        let mut out = vec![0f32; t * hidden];
        for (e, toks) in routed.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            let idx: Vec<u32> = toks.iter().map(|x| x.0).collect();
            let x = h.index_select(&Tensor::new(idx.as_slice(), h.device())?, 0)?;
            let ex = &self.experts[e];
            let y = ex
                .down
                .forward(&(ex.gate.forward(&x)?.silu()? * ex.up.forward(&x)?)?)?
                .to_vec2::<f32>()?;
            for ((tok, w), row) in toks.iter().zip(y) {
                let dst = &mut out[*tok as usize * hidden..(*tok as usize + 1) * hidden];
                for (d, v) in dst.iter_mut().zip(row) {
                    *d += w * v;
                }
            }
        }
        Tensor::from_vec(out, (t, hidden), h.device())
    }
}
