#!/usr/bin/env python3
"""NumPy re-implementation of Qwen2.5-VL image input, checked against gen.py's references.

Vision side (reads ONLY mmproj.gguf keys/tensors, plus the image file and the processor's
min/max pixels, which no GGUF holds):
    PNG -> RGB8 -> smart_resize + Pillow BICUBIC -> rescale/normalise -> patchify (pixel_values)
    -> Conv3d-as-matmul (v.patch_embd.weight + v.patch_embd.weight.1) -> window reorder
    -> 4 x [RMSNorm, qkv, 2-D rotary, window/full attention, out, RMSNorm, SwiGLU]
    -> merger (v.post_ln RMSNorm, 4 rows -> 1, mm.0, exact GELU, mm.2) -> inverse reorder.
Text side (reads ONLY model.gguf): embeddings with the image rows replaced by the features,
M-RoPE positions (get_rope_index), 2 Qwen2 layers with GQA, logits; 5 greedy steps.

Prints, per image, pixel_values and feature errors against transformers (relative = max abs
error / max abs reference), negative controls (what a plausible mistake would cost), and the
text-side logits error and greedy tokens. Exits non-zero if a check fails.

    python3 scripts/vision-qwen-numpy.py --dir /tmp/qvl/qwen25vl
(needs numpy and Pillow; gguf-py from the llama.cpp tree; transformers only for the optional
smart_resize cross-check.)
"""

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vision_fixture_tools import DEFAULT_SDIST, llama_cpp_tree, read_gguf  # noqa: E402

HERE = Path(__file__).resolve().parent
MERGE = 2            # spatial_merge_size: not in the GGUF (llama.cpp hard-codes 2, clip.cpp:4948)
WINDOW = 112         # window_size in pixels: not in the GGUF (llama.cpp default 112, clip.cpp:4957)
TEMPORAL = 2         # temporal_patch_size: implied by v.patch_embd.weight + .weight.1
VISION_THETA = 10000.0  # vision rope theta: not in the GGUF (HF default, clip graph constant)


# ---------------------------------------------------------------------------------------------
# GGUF


def read_f64(llama_cpp, path):
    """The GGUF's metadata and its tensors as float64 (all must be F32, as the generator writes)."""
    kv, tensors = read_gguf(llama_cpp, path)
    for name, (_, kind) in tensors.items():
        assert kind == "F32", (name, kind)
    return kv, {name: a.astype(np.float64) for name, (a, _) in tensors.items()}


# ---------------------------------------------------------------------------------------------
# preprocessing


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers qwen2_vl smart_resize. NB Python round() is round-half-to-even."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio > 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def preprocess(image_path, kv, min_pixels, max_pixels):
    """-> (pixel_values [gh*gw, 3*2*P*P] float32, (1, gh, gw), resized uint8 HWC)."""
    from PIL import Image

    P = kv["clip.vision.patch_size"]
    mean = np.array(kv["clip.vision.image_mean"], dtype=np.float32)
    std = np.array(kv["clip.vision.image_std"], dtype=np.float32)
    with Image.open(image_path) as im:
        img = im.convert("RGB")
    h, w = img.height, img.width
    rh, rw = smart_resize(h, w, P * MERGE, min_pixels, max_pixels)
    rgb = np.asarray(img.resize((rw, rh), resample=Image.Resampling.BICUBIC), dtype=np.uint8)
    x = (rgb.astype(np.float64) * (1 / 255)).astype(np.float32)      # rescale: f64 then f32
    x = (x - mean) / std                                              # normalise in f32
    x = x.transpose(2, 0, 1)                                          # CHW
    gh, gw = rh // P, rw // P
    x = x.reshape(3, gh // MERGE, MERGE, P, gw // MERGE, MERGE, P)
    x = x.transpose(1, 4, 2, 5, 0, 3, 6)          # (bh, bw, mh, mw, C, py, px)
    x = np.broadcast_to(x[:, :, :, :, :, None], x.shape[:5] + (TEMPORAL, P, P))
    pv = np.ascontiguousarray(x.reshape(gh * gw, 3 * TEMPORAL * P * P), dtype=np.float32)
    return pv, (1, gh, gw), rgb


# ---------------------------------------------------------------------------------------------
# vision encoder


def window_index(gh, gw, patch):
    """transformers get_vision_window_index for one image (t = 1):
    (window_index over merged cells, cu_window_seqlens over patches)."""
    vws = WINDOW // MERGE // patch
    lh, lw = gh // MERGE, gw // MERGE
    idx, cu = [], [0]
    for wy in range(0, lh, vws):            # windows in row-major order over the merged grid
        for wx in range(0, lw, vws):
            n = 0
            for y in range(wy, min(wy + vws, lh)):
                for x in range(wx, min(wx + vws, lw)):
                    idx.append(y * lw + x)
                    n += 1
            cu.append(cu[-1] + n * MERGE * MERGE)
    return np.array(idx), np.array(cu)


def window_index_llamacpp(gh, gw, patch):
    """clip.cpp:4955-4992 (QWEN25VL): idx[src] = dst, inv_idx[dst] = src; returns inv_idx."""
    pw, ph = gw // 2, gh // 2
    grid_window = WINDOW // patch // 2
    idx = [0] * (ph * pw)
    inv = [0] * (ph * pw)
    dst = 0
    for y in range(0, ph, grid_window):
        for x in range(0, pw, grid_window):
            for dy in range(min(grid_window, ph - y)):
                for dx in range(min(grid_window, pw - x)):
                    src = (y + dy) * pw + (x + dx)
                    idx[src] = dst
                    inv[dst] = src
                    dst += 1
    return np.array(inv), np.array(idx)


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def vision(pv, grid, kv, T, variant=None):
    """pixel_values [N, 3*2*P*P] (processor order) -> features [N/4, projection_dim]."""
    variant = variant or {}
    _, gh, gw = grid
    P = kv["clip.vision.patch_size"]
    H = kv["clip.vision.embedding_length"]
    nh = kv["clip.vision.attention.head_count"]
    L = kv["clip.vision.block_count"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    n_wa = kv["clip.vision.n_wa_pattern"]
    dh = H // nh
    N = gh * gw
    unit = MERGE * MERGE

    # patch embedding: Conv3d(kernel = stride = (2, P, P), no bias) as two matmuls
    x6 = pv.astype(np.float64).reshape(N, 3, TEMPORAL, P, P)
    w0 = T["v.patch_embd.weight"].reshape(H, 3 * P * P)     # temporal slice 0, (c, ky, kx)
    w1 = T["v.patch_embd.weight.1"].reshape(H, 3 * P * P)   # temporal slice 1
    x = x6[:, :, 0].reshape(N, -1) @ w0.T + x6[:, :, 1].reshape(N, -1) @ w1.T

    # (h, w) patch coordinates of each pixel_values row (block-major)
    r = np.arange(N)
    b, m = r // unit, r % unit
    hpos = (b // (gw // MERGE)) * MERGE + m // MERGE
    wpos = (b % (gw // MERGE)) * MERGE + m % MERGE
    if variant.get("swap_hw"):
        hpos, wpos = wpos, hpos

    widx, cu = window_index(gh, gw, P)
    if variant.get("no_reorder"):
        widx = np.arange(len(widx))
    perm = (widx[:, None] * unit + np.arange(unit)[None]).reshape(-1)  # patch-level reorder
    x, hpos, wpos = x[perm], hpos[perm], wpos[perm]

    # 2-D rotary: dh/4 frequencies, first half of each half-dim from h, second from w
    inv = 1.0 / VISION_THETA ** (np.arange(0, dh // 2, 2) / (dh // 2))
    ang = np.concatenate([hpos[:, None] * inv, wpos[:, None] * inv], -1)    # [N, dh/2]
    ang = np.concatenate([ang, ang], -1)                                     # [N, dh]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]                    # [N, 1, dh]

    full_seg = np.array([0, N])
    for il in range(L):
        p = f"v.blk.{il}."
        full = (il + 1) % n_wa == 0 or variant.get("all_full")
        seg = full_seg if full else cu
        h = rms(x, T[p + "ln1.weight"], eps)
        q, k, v = (h @ T[p + f"attn_{c}.weight"].T + T[p + f"attn_{c}.bias"] for c in "qkv")
        q, k, v = (t.reshape(N, nh, dh) for t in (q, k, v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        o = np.zeros_like(q)
        for s, e in zip(seg[:-1], seg[1:]):
            if e == s:
                continue
            qs, ks, vs = (t[s:e].transpose(1, 0, 2) for t in (q, k, v))   # [nh, n, dh]
            a = qs @ ks.transpose(0, 2, 1) / math.sqrt(dh)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            o[s:e] = (a @ vs).transpose(1, 0, 2)
        x = x + o.reshape(N, H) @ T[p + "attn_out.weight"].T + T[p + "attn_out.bias"]
        h = rms(x, T[p + "ln2.weight"], eps)
        g = h @ T[p + "ffn_gate.weight"].T + T[p + "ffn_gate.bias"]
        u = h @ T[p + "ffn_up.weight"].T + T[p + "ffn_up.bias"]
        x = x + (g / (1 + np.exp(-g)) * u) @ T[p + "ffn_down.weight"].T + T[p + "ffn_down.bias"]

    # merger: RMSNorm per patch, 4 consecutive patches -> one row, MLP with exact GELU
    y = rms(x, T["v.post_ln.weight"], 1e-6).reshape(N // unit, unit * H)
    y = y @ T["mm.0.weight"].T + T["mm.0.bias"]
    y = gelu_tanh(y) if variant.get("tanh_gelu") else gelu_erf(y)
    y = y @ T["mm.2.weight"].T + T["mm.2.bias"]
    out = np.empty_like(y)
    out[widx] = y            # == y[argsort(widx)]: back to row-major merged order
    return out


# ---------------------------------------------------------------------------------------------
# text side


def rope_index(ids, image_id, grids):
    """transformers Qwen2_5_VLModel.get_rope_index for images: (3, seq) int positions."""
    pos = np.zeros((3, len(ids)), dtype=np.int64)
    cur, i, gi = 0, 0, 0
    while i < len(ids):
        if ids[i] != image_id:
            pos[:, i] = cur
            cur += 1
            i += 1
            continue
        _, gh, gw = grids[gi]
        gi += 1
        lh, lw = gh // MERGE, gw // MERGE
        for r in range(lh):
            for c in range(lw):
                assert ids[i] == image_id
                pos[:, i] = (cur, cur + r, cur + c)
                i += 1
        cur += max(lh, lw)
    return pos


def text_forward(kv, T, ids, pos, image_rows, image_id):
    arch = kv["general.architecture"]
    nh = kv[f"{arch}.attention.head_count"]
    nkv = kv[f"{arch}.attention.head_count_kv"]
    Hd = kv[f"{arch}.embedding_length"]
    L = kv[f"{arch}.block_count"]
    eps = kv[f"{arch}.attention.layer_norm_rms_epsilon"]
    base = kv[f"{arch}.rope.freq_base"]
    sect = list(kv[f"{arch}.rope.dimension_sections"])
    dh = Hd // nh
    n = len(ids)

    x = T["token_embd.weight"][ids].copy()
    img = [i for i, t in enumerate(ids) if t == image_id]
    x[img] = image_rows
    # M-RoPE: pair k (0..dh/2-1) takes its position from component t/h/w by section
    inv = 1.0 / base ** (np.arange(0, dh, 2) / dh)
    comp = np.concatenate([np.full(s, j) for j, s in enumerate(sect[:3])])
    assert len(comp) == dh // 2
    ang = pos[comp].T * inv                         # [n, dh/2]
    ang = np.concatenate([ang, ang], -1)
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for il in range(L):
        p = f"blk.{il}."
        h = rms(x, T[p + "attn_norm.weight"], eps)
        q = (h @ T[p + "attn_q.weight"].T + T[p + "attn_q.bias"]).reshape(n, nh, dh)
        k = (h @ T[p + "attn_k.weight"].T + T[p + "attn_k.bias"]).reshape(n, nkv, dh)
        v = (h @ T[p + "attn_v.weight"].T + T[p + "attn_v.bias"]).reshape(n, nkv, dh)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // nkv
        k, v = np.repeat(k, rep, 1), np.repeat(v, rep, 1)   # q head i uses kv head i // rep
        a = q.transpose(1, 0, 2) @ k.transpose(1, 2, 0) / math.sqrt(dh) + mask
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(n, Hd)
        x = x + o @ T[p + "attn_output.weight"].T
        h = rms(x, T[p + "ffn_norm.weight"], eps)
        g = h @ T[p + "ffn_gate.weight"].T
        u = h @ T[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ T[p + "ffn_down.weight"].T
    x = rms(x, T["output_norm.weight"], eps)
    return x @ T["output.weight"].T


# ---------------------------------------------------------------------------------------------


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=str(HERE.parent / "tests" / "data" / "vision" / "qwen25vl"))
    ap.add_argument("--sdist", default=str(DEFAULT_SDIST))
    ap.add_argument("--llama-cpp", help="an unpacked llama.cpp tree (or the sdist's root)")
    args = ap.parse_args()
    d = Path(args.dir)
    ref = json.loads((d / "reference.json").read_text())
    with tempfile.TemporaryDirectory(prefix="vision-qwen-numpy-") as tmp:
        llama_cpp = llama_cpp_tree(args.llama_cpp, args.sdist, tmp)
        kv, T = read_f64(llama_cpp, d / "mmproj.gguf")
        tkv, TT = read_f64(llama_cpp, d / "model.gguf")
    pre = ref["model"]["preprocessor"]
    image_id = ref["model"]["token_ids"]["<|image_pad|>"]
    ok = True

    def load(e, key):
        return np.fromfile(d / e[key]["file"], dtype="<f4").reshape(e[key]["shape"])

    # smart_resize == transformers' for many sizes (incl. .5 rounding ties and both branches)
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_sr
        bad = 0
        for h in list(range(1, 200, 3)) + [14, 42, 70, 98, 1000, 1366, 2048, 4000]:
            for w in list(range(1, 200, 7)) + [14, 42, 70, 98, 768, 1080, 3000]:
                if max(h, w) / min(h, w) > 200:
                    continue
                for mn, mx in ((pre["min_pixels"], pre["max_pixels"]), (3136, 12845056),
                               (6272, 3211264), (784, 28 * 28 * 4)):
                    if smart_resize(h, w, 28, mn, mx) != hf_sr(h, w, 28, mn, mx):
                        bad += 1
        print(f"smart_resize vs transformers over a size grid: {bad} mismatches")
        ok &= bad == 0
    except ImportError:
        print("smart_resize cross-check skipped (no transformers)")

    worst = 0.0
    for e in ref["images"]:
        name = e["name"]
        pv, grid, rgb = preprocess(d / e["file"], kv, pre["min_pixels"], pre["max_pixels"])
        grid = list(grid)
        # transformers' pixel values exist while the generator runs; the committed fixture
        # keeps only the resized image, which pins them (checked equal below).
        pv_ref = pv if e["pixel_values"]["file"] is None else load(e, "pixel_values")
        rgb_ref = np.fromfile(d / e["resized"]["file"], dtype=np.uint8).reshape(e["resized"]["shape"])
        feats_ref = load(e, "features").astype(np.float64)
        assert grid == e["image_grid_thw"], (grid, e["image_grid_thw"])
        widx, cu = window_index(grid[1], grid[2], kv["clip.vision.patch_size"])
        inv_lc, _ = window_index_llamacpp(grid[1], grid[2], kv["clip.vision.patch_size"])
        same_w = (widx.tolist() == e["window_index"] and cu.tolist() == e["cu_window_seqlens"]
                  and inv_lc.tolist() == e["window_index"])
        pv_err = float(np.abs(pv - pv_ref).max())
        feats = vision(pv_ref, grid, kv, T)
        feats_own = vision(pv, grid, kv, T)
        err = rel(feats, feats_ref)
        err_own = rel(feats_own, feats_ref)
        worst = max(worst, err, err_own)
        print(f"{name:9} grid {grid} -> {feats.shape[0]} rows; resized RGB8 equal: "
              f"{np.array_equal(rgb, rgb_ref)}; pixel_values max abs diff {pv_err:.3g}; "
              f"window_index/cu (HF and llama.cpp algorithms) equal: {same_w}")
        print(f"          features rel err: {err:.3g} (from HF pixel_values), "
              f"{err_own:.3g} (from our pixel_values); max |ref| {np.abs(feats_ref).max():.3g}")
        ctl = {v: rel(vision(pv_ref, grid, kv, T, {v: True}), feats_ref)
               for v in ("all_full", "no_reorder", "tanh_gelu", "swap_hw")}
        print("          negative controls (rel err): " +
              ", ".join(f"{k} {v:.3g}" for k, v in ctl.items()))
        ok &= (pv_err == 0.0 and np.array_equal(rgb, rgb_ref) and same_w and err < 1e-5
               and err_own < 1e-5)

        # text side: positions, logits at the last position, 5 greedy tokens
        ids = list(e["input_ids"])
        pos = rope_index(ids, image_id, [grid])
        mp = e["mrope_position_ids"]
        same_pos = pos.tolist() == [mp["t"], mp["h"], mp["w"]]
        delta = int(pos.max()) + 1 - len(ids)
        logits = text_forward(tkv, TT, ids, pos, feats_own, image_id)[-1]
        lref = load(e, "logits").astype(np.float64)
        lerr = rel(logits, lref)
        greedy = []
        for _ in range(len(e["greedy"])):
            p_ = rope_index(ids, image_id, [grid])
            t = int(np.argmax(text_forward(tkv, TT, ids, p_, feats_own, image_id)[-1]))
            greedy.append(t)
            ids.append(t)
        print(f"          text: M-RoPE positions equal: {same_pos} (rope delta {delta} vs "
              f"{e['rope_delta']}); last logits rel err {lerr:.3g}; greedy {greedy} "
              f"vs HF {e['greedy']}")
        ok &= same_pos and delta == e["rope_delta"] and lerr < 1e-5 and greedy == e["greedy"]
        worst = max(worst, lerr)
    print(f"worst relative error: {worst:.3g}; {'OK' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
