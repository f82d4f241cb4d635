#!/usr/bin/env python3
"""Tiny random-weight Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration`) as a llama.cpp GGUF pair
(text `model.gguf` + `mmproj.gguf`), plus what `transformers` computes for three test images.

Modelled on tollgate's scripts/vision-fixtures.py (Gemma 3 / SmolVLM). What it does:

- builds a byte-level BPE `tokenizer.json` with the `tokenizers` library (Qwen2's exact
  pipeline: NFC normaliser, Qwen2 split regex + ByteLevel pre-tokenizer, ByteLevel decoder),
  trained on a fixed corpus, plus Qwen's special tokens (<|endoftext|>, <|im_start|>,
  <|im_end|>, ..., <|vision_start|>, <|vision_end|>, <|vision_pad|>, <|image_pad|>,
  <|video_pad|>) and Qwen2.5-VL's published chat template;
- a tiny config (vision: patch 14, temporal patch 2, merge 2, window_size 112, hidden 32,
  2 heads, depth 4 with full attention at blocks [1, 3], SwiGLU 48, out 64; text: hidden 64,
  2 layers, 4 heads / 2 kv heads, head_dim 16, mrope_section [2, 3, 3]); weights re-drawn as
  N(0, 1/fan_in) (q/k/v x1.5 so attention is peaky and window vs full attention matters), every
  constant-initialised parameter (norm weights, biases) gets N(0, 0.1) noise;
- saves it in the original checkpoint layout (`visual.*`, `model.*`, `lm_head.*`), converts
  with llama.cpp's convert_hf_to_gguf.py (--outtype f32; text and --mmproj), reads both GGUFs
  back and checks every tensor equals the HF parameter bit for bit (after the converter's
  qkv split and Conv3d temporal split);
- per image (square 64x64, landscape 120x48, portrait 50x130; PNGs from tollgate's
  tests/data/vision/images): pixel_values/image_grid_thw from `Qwen2VLImageProcessorPil`
  (Pillow BICUBIC on uint8), the resized uint8 image, `get_image_features` (equal to the rows
  inserted at the <|image_pad|> tokens), window_index / cu_window_seqlens, the prompt
  [image, "Describe this."] through the chat template and `Qwen2_5_VLProcessor`, its M-RoPE
  position ids (get_rope_index), logits at the last position and 5 greedy tokens (generate
  == argmax loop over full forwards).

The BPE pre-tokenizer of a freshly trained vocabulary has no known llama.cpp hash, so the
converter runs through a wrapper (`--run-converter`, below) that makes
`TextModel.get_vocab_base_pre` answer "qwen2" (the real Qwen2.5-VL value) when the hash is
unknown; nothing else in the converter is touched.

Usage (CPU, single-threaded, deterministic):

    python3 scripts/vision-fixtures-qwen.py [--llama-cpp DIR] [--out DIR]

(in an environment like scripts/vision-fixtures.py's, plus `tokenizers`).

Default out: /tmp/qvl (writes hf/tiny-qwen2.5-vl/, qwen25vl/, images/); tollgate's fixture is
`qwen25vl/` copied to tests/data/vision/qwen25vl/. The NumPy re-implementation of the vision
pipeline and the M-RoPE text forward, from the GGUFs alone, is scripts/vision-qwen-numpy.py;
this script runs it as its last check.
"""

import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vision_fixture_tools import (  # noqa: E402
    DEFAULT_SDIST, SDIST, SDIST_SHA, f32_bin, llama_cpp_tree, log, read_gguf, sha256, write_json,
)

HERE = Path(__file__).resolve().parent
IMAGES_SRC = HERE.parent / "tests" / "data" / "vision" / "images"
SEED = 0
PROMPT_TEXT = "Describe this."
NEW_TOKENS = 5
IMAGES = ["square", "landscape", "portrait"]

# Qwen/Qwen2.5-VL-7B-Instruct chat_template.json (same as Qwen2-VL's).
QWEN25VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2's pre-tokenizer split regex (transformers/models/qwen2/tokenization_qwen2.py:35).
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# In Qwen's vocabulary order (151643..151656).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
            "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
            "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
            "<|image_pad|>", "<|video_pad|>"]

CORPUS = [
    "Describe this.", "Describe this image.", "Describe this picture, please.",
    "system", "user", "assistant", "You are a helpful assistant.",
    "the quick brown fox jumps over the lazy dog",
    "a red square on a blue background", "a green circle next to a yellow triangle",
    "what is in the picture?", "there is a bright gradient from left to right",
    "one two three four five six seven eight nine ten",
    "The image shows shapes: a disc, a bar and a wedge.",
    "It is a small synthetic image made for testing.",
]

# Preprocessing: min_pixels 140*140 makes the three images upscale to 140x140 (merged 5x5:
# 2x2 windows of 4, padded, reordered), 112x224 (merged 4x8: two exact windows, reordered) and
# 252x112 (merged 9x4: three windows down, last padded, order unchanged).
MIN_PIXELS = 140 * 140
MAX_PIXELS = 28 * 28 * 64
VISION = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, window_size=112, out_hidden_size=64,
              fullatt_block_indexes=[1, 3], in_channels=3, hidden_act="silu")
TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [2, 3, 3]})


# ---------------------------------------------------------------------------------------------
# converter


def run_converter_inplace(llama_cpp, argv):
    """Runs convert_hf_to_gguf.py in this process, with get_vocab_base_pre falling back to
    'qwen2' for the unknown hash of the tiny trained vocabulary."""
    sys.path.insert(0, str(llama_cpp))
    sys.path.insert(1, str(llama_cpp / "gguf-py"))
    import conversion.base as base  # noqa: PLC0415

    orig = base.TextModel.get_vocab_base_pre

    def patched(self, tokenizer):
        try:
            return orig(self, tokenizer)
        except NotImplementedError:
            print("gen.py: unknown BPE pre-tokenizer hash (tiny vocab) -> 'qwen2'", flush=True)
            return "qwen2"

    base.TextModel.get_vocab_base_pre = patched
    sys.argv = [str(llama_cpp / "convert_hf_to_gguf.py")] + argv
    runpy.run_path(str(llama_cpp / "convert_hf_to_gguf.py"), run_name="__main__")


def convert(llama_cpp, model_dir, outfile, name, mmproj):
    argv = [str(model_dir), "--outfile", str(outfile), "--outtype", "f32", "--model-name", name]
    if mmproj:
        argv.append("--mmproj")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--llama-cpp", str(llama_cpp),
           "--run-converter", json.dumps(argv)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=model_dir.parent)
    if r.returncode != 0:
        sys.exit(f"converter failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# tokenizer and model


def build_tokenizer(d):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import AddedToken

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False,
                               continuing_subword_prefix="", end_of_word_suffix=""))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=360, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(CORPUS * 20, trainer)
    n_bpe = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    assert [ids[s] for s in SPECIALS] == list(range(n_bpe, n_bpe + len(SPECIALS))), ids
    tok.save(str(d / "tokenizer.json"))

    dec = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True} for s in SPECIALS}
    write_json(d / "tokenizer_config.json", {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False,
        "add_eos_token": False, "add_prefix_space": False, "errors": "replace",
        "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "model_max_length": 2048, "added_tokens_decoder": dec})
    (d / "chat_template.jinja").write_text(QWEN25VL_TEMPLATE)
    return tok, ids


def reinit(model, torch):
    """Weights N(0, 1/fan_in) (q/k/v x1.5), embeddings N(0, 1); then N(0, 0.1) noise on every
    parameter the default init leaves constant (norm weights = 1, biases = 0)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                if "embed_tokens" in name:
                    p.copy_(torch.randn(p.shape))
                else:
                    fan_in = int(np.prod(p.shape[1:]))
                    scale = 1.5 if (".qkv." in name or "q_proj" in name or "k_proj" in name) else 1.0
                    p.copy_(torch.randn(p.shape) * scale / np.sqrt(fan_in))
        for name, p in sorted(model.named_parameters()):
            if p.numel() and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape) * 0.1)


def legacy_name(k):
    """transformers-5 state-dict names -> the original Qwen2.5-VL checkpoint layout."""
    if k.startswith("model.visual."):
        return k[len("model."):]
    if k.startswith("model.language_model."):
        return "model." + k[len("model.language_model."):]
    return k


def build_model(d):
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok, ids = build_tokenizer(d)
    vocab = tok.get_vocab_size()
    torch.manual_seed(SEED)
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=vocab, bos_token_id=ids["<|endoftext|>"],
                         eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                         tie_word_embeddings=False, **TEXT),
        vision_config=dict(VISION),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    reinit(model, torch)

    model.save_pretrained(d)
    from safetensors.torch import load_file, save_file
    st = d / "model.safetensors"
    tensors = load_file(str(st))
    renamed = {legacy_name(k): v.contiguous() for k, v in sorted(tensors.items())}
    save_file(renamed, str(st), metadata={"format": "pt"})
    pre = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "patch_size": 14,
           "temporal_patch_size": 2, "merge_size": 2,
           "image_mean": [0.48145466, 0.4578275, 0.40821073],
           "image_std": [0.26862954, 0.26130258, 0.27577711],
           "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255,
           "do_normalize": True, "do_convert_rgb": True, "resample": 3}
    write_json(d / "preprocessor_config.json",
               {**pre, "image_processor_type": "Qwen2VLImageProcessor",
                "processor_class": "Qwen2_5_VLProcessor"})
    return model, tok, ids, pre, sorted(renamed)


# ---------------------------------------------------------------------------------------------
# checks and references


def check_gguf_tensors(model, T_mm, T_txt):
    """Every GGUF tensor equals the HF parameter it came from (bit for bit)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    vis = {k[len("model.visual."):]: v for k, v in sd.items() if k.startswith("model.visual.")}
    want = {}
    want["v.patch_embd.weight"] = vis["patch_embed.proj.weight"][:, :, 0]
    want["v.patch_embd.weight.1"] = vis["patch_embed.proj.weight"][:, :, 1]
    for i in range(VISION["depth"]):
        b = f"blocks.{i}."
        p = f"v.blk.{i}."
        H = VISION["hidden_size"]
        for j, c in enumerate("qkv"):
            want[p + f"attn_{c}.weight"] = vis[b + "attn.qkv.weight"][j * H:(j + 1) * H]
            want[p + f"attn_{c}.bias"] = vis[b + "attn.qkv.bias"][j * H:(j + 1) * H]
        for hf, g in (("attn.proj", "attn_out"), ("mlp.gate_proj", "ffn_gate"),
                      ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
            want[p + g + ".weight"] = vis[b + hf + ".weight"]
            want[p + g + ".bias"] = vis[b + hf + ".bias"]
        want[p + "ln1.weight"] = vis[b + "norm1.weight"]
        want[p + "ln2.weight"] = vis[b + "norm2.weight"]
    want["v.post_ln.weight"] = vis["merger.ln_q.weight"]
    for j in (0, 2):
        want[f"mm.{j}.weight"] = vis[f"merger.mlp.{j}.weight"]
        want[f"mm.{j}.bias"] = vis[f"merger.mlp.{j}.bias"]
    assert set(want) == set(T_mm), (sorted(set(want) ^ set(T_mm)))
    for n, w in want.items():
        a, typ = T_mm[n]
        assert typ == "F32", (n, typ)
        assert a.shape == w.shape and np.array_equal(a, w), n

    lm = {k[len("model.language_model."):]: v for k, v in sd.items()
          if k.startswith("model.language_model.")}
    want = {"token_embd.weight": lm["embed_tokens.weight"], "output_norm.weight": lm["norm.weight"],
            "output.weight": sd["lm_head.weight"]}
    for i in range(TEXT["num_hidden_layers"]):
        b = f"layers.{i}."
        p = f"blk.{i}."
        for hf, g in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                      ("self_attn.v_proj", "attn_v")):
            want[p + g + ".weight"] = lm[b + hf + ".weight"]
            want[p + g + ".bias"] = lm[b + hf + ".bias"]
        for hf, g in (("self_attn.o_proj", "attn_output"), ("mlp.gate_proj", "ffn_gate"),
                      ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down"),
                      ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm")):
            want[p + g + ".weight"] = lm[b + hf + ".weight"]
    assert set(want) == set(T_txt), (sorted(set(want) ^ set(T_txt)))
    for n, w in want.items():
        a, typ = T_txt[n]
        assert typ == "F32", (n, typ)
        assert a.shape == w.shape and np.array_equal(a, w), n


def reference_for(ctx, name, img):
    import torch
    from transformers import GenerationConfig

    model, proc, ip, raw_tok, ids, out = (ctx[k] for k in
                                          ("model", "proc", "ip", "raw_tok", "ids", "out"))
    entry = {"name": name, "file": f"../images/{name}.png", "width": img.width,
             "height": img.height}

    # (a) the image processor alone
    pv_out = ip(images=[img], return_tensors="np")
    pv = np.asarray(pv_out["pixel_values"], dtype=np.float32)
    thw = [int(x) for x in np.asarray(pv_out["image_grid_thw"]).reshape(-1)]
    _, gh, gw = thw
    P = VISION["patch_size"]
    rh, rw = gh * P, gw * P
    resized = np.asarray(img.convert("RGB").resize((rw, rh), resample=3), dtype=np.uint8)
    resized.tofile(out / f"{name}.resized_rgb8.bin")
    entry["resized"] = {"file": f"{name}.resized_rgb8.bin", "dtype": "u8",
                        "shape": [rh, rw, 3], "filter": "Pillow BICUBIC"}
    entry["image_grid_thw"] = thw
    entry["pixel_values"] = {"file": f"{name}.pixel_values.bin",
                             "shape": f32_bin(out / f"{name}.pixel_values.bin", pv)}

    # window bookkeeping as transformers computes it
    from transformers.vision_utils import get_vision_window_index
    widx, cu = get_vision_window_index(torch.tensor([thw]), 2, VISION["window_size"], P)
    entry["window_index"] = widx.tolist()
    entry["cu_window_seqlens"] = cu.tolist()

    # (b) the chat prompt through the processor
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": PROMPT_TEXT}]}]
    rendered = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=rendered, images=[img], return_tensors="pt", add_special_tokens=False)
    assert np.array_equal(inputs["pixel_values"].numpy(), pv), "processor pixel_values differ"
    assert inputs["image_grid_thw"].tolist() == [thw]
    input_ids = inputs["input_ids"][0].tolist()
    n_img = gh * gw // 4
    expanded = rendered.replace("<|image_pad|>", "<|image_pad|>" * n_img)
    ref_ids = raw_tok.encode(expanded, add_special_tokens=False).ids
    assert input_ids == ref_ids, f"{name}: processor ids differ from tokenizers\n{input_ids}\n{ref_ids}"
    positions = [i for i, t in enumerate(input_ids) if t == ids["<|image_pad|>"]]
    assert len(positions) == n_img
    mm_tt = inputs["mm_token_type_ids"][0].tolist()
    assert [i for i, t in enumerate(mm_tt) if t] == positions, "mm_token_type_ids"

    # (c) features, and what the model inserts at the image tokens
    captured = {}
    lm = model.model.language_model

    def grab(_m, _a, kwargs):
        captured.setdefault("embeds", kwargs["inputs_embeds"].detach().clone())
        captured.setdefault("pos", kwargs["position_ids"].detach().clone())

    h = lm.register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad():
        feats = model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"],
                                         return_dict=True).pooler_output
        feats = torch.cat(list(feats)) if isinstance(feats, (list, tuple)) else feats
        direct = model.model.visual(inputs["pixel_values"],
                                    grid_thw=inputs["image_grid_thw"]).pooler_output
        assert torch.equal(direct, feats)
        outp = model(**inputs)
    h.remove()
    assert feats.shape == (n_img, TEXT["hidden_size"]), feats.shape
    assert torch.equal(captured["embeds"][0, positions], feats), "inserted rows != features"
    entry["features"] = {"file": f"{name}.features.bin",
                         "shape": f32_bin(out / f"{name}.features.bin", feats.numpy())}

    # M-RoPE position ids (3, seq) used by the text model, and rope delta
    pos = captured["pos"]
    assert pos.shape[0] == 3 and pos.shape[1] == 1, pos.shape
    pos = pos[:, 0].tolist()
    entry["mrope_position_ids"] = {"t": pos[0], "h": pos[1], "w": pos[2]}
    entry["rope_delta"] = int(model.model.rope_deltas.reshape(-1)[0])

    logits = outp.logits[0, -1].float().numpy()
    entry["logits"] = {"file": f"{name}.logits.bin",
                       "shape": f32_bin(out / f"{name}.logits.bin", logits)}

    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=ids["<|endoftext|>"])
    with torch.no_grad():
        gen = model.generate(**inputs, generation_config=gc)
    greedy = gen[0, len(input_ids):].tolist()
    loop, margins = [], []
    cur = dict(inputs)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            model.model.rope_deltas = None
            lg = model(**cur).logits[0, -1].double()
            top = torch.topk(lg, 2)
            loop.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            nxt = torch.tensor([[loop[-1]]])
            cur["input_ids"] = torch.cat([cur["input_ids"], nxt], 1)
            cur["attention_mask"] = torch.cat([cur["attention_mask"], torch.ones_like(nxt)], 1)
            cur["mm_token_type_ids"] = torch.cat([cur["mm_token_type_ids"],
                                                  torch.zeros_like(nxt)], 1)
    assert greedy == loop, f"{name}: generate {greedy} != argmax loop {loop}"
    assert loop[0] == int(np.argmax(logits))

    entry.update({
        "rendered_prompt": rendered,
        "input_ids": input_ids,
        "n_tokens": len(input_ids),
        "image_token_positions": positions,
        "n_image_tokens": n_img,
        "greedy": greedy,
        "greedy_pieces": [raw_tok.id_to_token(t) for t in greedy],
        "greedy_min_top2_margin": round(min(margins), 6),
        "logits_argmax": int(np.argmax(logits)),
    })
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", default=str(DEFAULT_SDIST))
    ap.add_argument("--llama-cpp", help="an unpacked llama.cpp tree (or the sdist's root)")
    ap.add_argument("--out", default="/tmp/qvl")
    ap.add_argument("--run-converter", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_converter:
        run_converter_inplace(Path(args.llama_cpp), json.loads(args.run_converter))
        return
    with tempfile.TemporaryDirectory(prefix="vision-fixtures-qwen-") as tmp:
        generate(args, llama_cpp_tree(args.llama_cpp, args.sdist, tmp))


def generate(args, llama_cpp):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import PIL
    import PIL.Image
    import tokenizers
    import torch
    import transformers
    from transformers import AutoTokenizer, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    transformers.logging.set_verbosity_error()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "pillow": PIL.__version__,
                "numpy": np.__version__, "python": sys.version.split()[0]}

    root = Path(args.out).resolve()
    hf_dir = root / "hf" / "tiny-qwen2.5-vl"
    out = root / "qwen25vl"
    img_dir = root / "images"
    for d in (hf_dir, out, img_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for n in IMAGES:
        shutil.copyfile(IMAGES_SRC / f"{n}.png", img_dir / f"{n}.png")

    model, raw_tok, ids, pre, st_names = build_model(hf_dir)
    log(f"vocab {raw_tok.get_vocab_size()}, specials {ids}")
    log(f"safetensors names: {st_names[:3]} ... {st_names[-3:]}")

    name = "tollgate-tiny-qwen2.5-vl"
    clog = convert(llama_cpp, hf_dir, out / "model.gguf", name, mmproj=False)
    assert "unknown BPE pre-tokenizer hash" in clog, clog[-3000:]
    convert(llama_cpp, hf_dir, out / "mmproj.gguf", name, mmproj=True)
    kv, T_mm = read_gguf(llama_cpp, out / "mmproj.gguf")
    tkv, T_txt = read_gguf(llama_cpp, out / "model.gguf")
    assert kv["general.architecture"] == "clip"
    assert kv["clip.projector_type"] == "qwen2.5vl_merger", kv["clip.projector_type"]
    assert kv["clip.vision.n_wa_pattern"] == 2
    assert tkv["general.architecture"] == "qwen2vl"
    assert tkv["tokenizer.ggml.model"] == "gpt2" and tkv["tokenizer.ggml.pre"] == "qwen2"
    assert tkv["tokenizer.chat_template"] == QWEN25VL_TEMPLATE
    assert len(tkv["tokenizer.ggml.tokens"]) == raw_tok.get_vocab_size()
    assert list(tkv["qwen2vl.rope.dimension_sections"]) == [2, 3, 3, 0]
    check_gguf_tensors(model, T_mm, T_txt)
    log("GGUF tensors == HF parameters (bit-exact, all F32)")

    tok = AutoTokenizer.from_pretrained(hf_dir)
    assert len(tok) == raw_tok.get_vocab_size(), (len(tok), raw_tok.get_vocab_size())
    ip = Qwen2VLImageProcessorPil(**pre)

    class ImageOnlyProcessor(Qwen2_5_VLProcessor):
        """Qwen2_5_VLProcessor without its video processor (that one needs torchvision)."""

        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    proc = ImageOnlyProcessor(image_processor=ip, tokenizer=tok, video_processor=None,
                              chat_template=QWEN25VL_TEMPLATE)
    ctx = dict(model=model, proc=proc, ip=ip, raw_tok=raw_tok, ids=ids, out=out)
    entries = []
    for n in IMAGES:
        with PIL.Image.open(img_dir / f"{n}.png") as im:
            img = im.convert("RGB")
        img.load()
        entries.append(reference_for(ctx, n, img))

    vc = model.config.vision_config
    tc = model.config.text_config
    info = {
        "architecture": "Qwen2_5_VLForConditionalGeneration",
        "text": {"vocab_size": tc.vocab_size, "hidden_size": tc.hidden_size,
                 "intermediate_size": tc.intermediate_size, "layers": tc.num_hidden_layers,
                 "heads": tc.num_attention_heads, "kv_heads": tc.num_key_value_heads,
                 "head_dim": tc.hidden_size // tc.num_attention_heads,
                 "rms_norm_eps": tc.rms_norm_eps, "rope_parameters": tc.rope_parameters,
                 "tie_word_embeddings": bool(model.config.tie_word_embeddings)},
        "vision": {k: getattr(vc, k) for k in ("depth", "hidden_size", "intermediate_size",
                                               "num_heads", "patch_size", "spatial_merge_size",
                                               "temporal_patch_size", "window_size",
                                               "out_hidden_size", "hidden_act")}
                  | {"fullatt_block_indexes": list(vc.fullatt_block_indexes),
                     "rope_parameters": vc.rope_parameters, "rms_norm_eps": 1e-6},
        "token_ids": {s: ids[s] for s in SPECIALS},
        "preprocessor": {"class": "Qwen2VLImageProcessorPil", "min_pixels": MIN_PIXELS,
                         "max_pixels": MAX_PIXELS, "factor": 28, "resample": "bicubic",
                         "image_mean": pre["image_mean"], "image_std": pre["image_std"]},
    }
    ref = {
        "family": "qwen25vl",
        "generator": "scripts/vision-fixtures-qwen.py",
        "seed": SEED,
        "versions": versions,
        "converter": {"sdist": SDIST, "sha256": SDIST_SHA,
                      "commands": ["convert_hf_to_gguf.py DIR --outtype f32 (pre-tokenizer "
                                   "hash fallback 'qwen2')",
                                   "convert_hf_to_gguf.py DIR --mmproj --outtype f32"]},
        "gguf": {n: {"sha256": sha256(out / n), "bytes": (out / n).stat().st_size}
                 for n in ("model.gguf", "mmproj.gguf")},
        "model": info,
        "prompt": {"messages": [{"role": "user", "content": [
                       {"type": "image"}, {"type": "text", "text": PROMPT_TEXT}]}],
                   "add_generation_prompt": True,
                   "note": "rendered with the GGUF's chat template, <|image_pad|> expanded to "
                           "grid_h*grid_w/4 copies, tokenized with add_special_tokens=False "
                           "(Qwen adds no BOS)"},
        "generation": {"max_new_tokens": NEW_TOKENS, "do_sample": False, "stop_at_eos": False},
        "arrays": "little-endian float32 (resized: uint8 HWC RGB), row-major, shapes as listed",
        "images": entries,
    }
    write_json(out / "reference.json", ref)
    for e in entries:
        log(f"  {e['name']:9} {e['width']}x{e['height']} -> grid {e['image_grid_thw']}: "
            f"{e['n_tokens']} tokens, {e['n_image_tokens']} image tokens, "
            f"cu_window_seqlens {e['cu_window_seqlens']}, greedy {e['greedy']} "
            f"(min margin {e['greedy_min_top2_margin']})")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"{out}: {total} bytes")

    # the NumPy re-implementation (mmproj.gguf / model.gguf only) must reproduce all of it
    r = subprocess.run([sys.executable, str(HERE / "vision-qwen-numpy.py"), "--dir", str(out),
                        "--llama-cpp", str(llama_cpp)],
                       capture_output=True, text=True)
    log(r.stdout + r.stderr)
    assert r.returncode == 0, "vision-qwen-numpy.py failed"
    # transformers' pixel_values (1.7 MB) are checked above and not committed: the Rust tests
    # compare the resized image (exact) and the features.
    for e in entries:
        (out / e["pixel_values"]["file"]).unlink()
        e["pixel_values"]["file"] = None
    write_json(out / "reference.json", ref)


if __name__ == "__main__":
    main()
