#!/usr/bin/env python3
"""Regenerate tests/data/vision/: tiny vision-language models as llama.cpp GGUF pairs (text
model + `mmproj`), three generated test images, and what `transformers` computes for them.

Why: tollgate's vision parity tests (image preprocessing, the SigLIP encoder and projector read
from an `mmproj` GGUF, and the text forward with image embeddings in the prompt) compare against
`transformers`, but CI has no Python or PyTorch. This script runs `transformers` once and commits
its numbers next to the GGUF files it converted from the very same weights.

What it writes, for two families:

- `gemma3/`: `Gemma3ForConditionalGeneration` (SigLIP tower 64x64 / patch 8, avg-pool projector
  with `mm_tokens_per_image = 4`, two sliding-window text layers with window 16, shorter than
  the 22-token prompts, and `query_pre_attn_scalar = head_dim` as llama.cpp assumes; the
  official Gemma 3 chat template). Every parameter the default initialisation leaves constant (norms, biases, the
  projector, which starts at zero) gets N(0, 0.1) noise so the comparison means something, and the
  projection `mm_input_projection_weight` is rounded to float16 because the converter stores it
  as F16 even with `--outtype f32` (so the GGUF holds exactly the weights used here).
- `smolvlm/`: `Idefics3ForConditionalGeneration` (the architecture of SmolVLM-256M/500M-Instruct)
  with a Llama text model (`text_config.architectures = ["LlamaForCausalLM"]`), SigLIP-style tower
  64x64 / patch 8, pixel-shuffle `scale_factor = 2` (16 tokens per tile), preprocessing
  `size.longest_edge = 128` and `max_image_size.longest_edge = 64` so images split into a grid
  of 64x64 tiles plus a global image, and SmolVLM's chat template.

Each has `model.gguf` (`convert_hf_to_gguf.py --outtype f32`), `mmproj.gguf`
(`--mmproj --outtype f32`) and `reference.json`, which for each image lists: pixel_values as the
`*ImageProcessorPil` class returns them (Pillow resizing, never torchvision), with the split's
rows/cols/tiles for smolvlm; the projected image features (`get_image_features`, equal to the
rows the model writes at the image tokens); for the prompt "one user message = [image, text
'Describe this.']" rendered with the GGUF's chat template (`add_generation_prompt=True`) and
expanded by the family's processor: the input ids, the image-token positions, the logits at the
last position (full vocabulary) and 5 greedy tokens from `model.generate(do_sample=False)`
(Gemma 3 with the processor's `token_type_ids`, i.e. bidirectional attention inside the image
block), with end-of-sequence ignored so all 5 are plain argmax steps. Arrays are little-endian
float32 `.bin` files named in `reference.json` with their shapes. `images/` holds the generated
PNGs (square 64x64, landscape 120x48, portrait 50x130) and one JPEG for a decode-only test.

The tokenizers are tiny SentencePiece BPE models trained here on a fixed corpus, with the
families' special tokens (`<start_of_turn>`, `<start_of_image>`, `<image_soft_token>`;
`<fake_token_around_image>`, `<image>`, `<global-img>`, `<row_R_col_C>`, ...) as user-defined
pieces marked in `tokenizer_config.json` so the converter types them CONTROL (or USER_DEFINED for
`\\n` and `\\n\\n`). The converter copies `chat_template.jinja` into
`tokenizer.chat_template`. The script asserts that the processor's ids equal a plain
SentencePiece encoding of the expanded prompt, that each mmproj has the expected
`clip.projector_type`, that the image-token count equals the feature rows, that the features the
model inserts equal `get_image_features`, that a NumPy re-implementation of the mmproj graph from
the GGUF tensors reproduces the features, and that `generate` equals an argmax loop.

Environment (CPU only; everything is seeded and single-threaded, so a rerun in the same
environment gives identical bytes):

    python3 -m venv .venv-vision
    .venv-vision/bin/pip install torch transformers==5.24.0 pillow sentencepiece protobuf numpy safetensors

(a CPU build of torch is enough; the fixtures were made with torch 2.15, transformers 5.24.0,
Pillow 13.0, sentencepiece 0.2.3, numpy 2.4; reference.json records the versions).

The converter is llama.cpp's `convert_hf_to_gguf.py` (with its `conversion/` and `gguf-py/`) from
the llama-cpp-python 0.3.36 source distribution, which `scripts/fetch-weights` downloads and
caches as ~/.cache/tollgate/sdist/llama_cpp_python-0.3.36.tar.gz (SHA-256 pinned below). The
script unpacks the needed members of that tarball into a temporary directory, or uses an
already unpacked llama.cpp tree.

Usage:

    .venv-vision/bin/python scripts/vision-fixtures.py [--sdist TARBALL | --llama-cpp DIR] [--out DIR]

Default: --sdist ~/.cache/tollgate/sdist/llama_cpp_python-0.3.36.tar.gz --out tests/data/vision.
It replaces the `gemma3/`, `smolvlm/` and `images/` subdirectories (other files there are left
alone) and prints the directory's size. Takes about 30 seconds.
"""

import argparse
import io
import os
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

ROOT = Path(__file__).resolve().parent.parent
SEED = 0
PROMPT_TEXT = "Describe this."
NEW_TOKENS = 5

# Published chat templates. Gemma 3: the template of google/gemma-3-*-it (as written by
# transformers' convert_gemma3_weights.py into chat_template.json). SmolVLM: the template of
# HuggingFaceTB/SmolVLM-256M-Instruct / -500M-Instruct (and of ggml-org's GGUFs of them); it only
# accepts a list as `content`.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# Training text for the tiny tokenizers: it holds every character the templates and the prompt
# use (no byte fallback), so nothing becomes <unk>.
CORPUS = [
    "Describe this.", "Describe this image.", "Describe this picture, please.",
    "user", "model", "User", "Assistant", "User: hello", "Assistant: hi",
    "the quick brown fox jumps over the lazy dog",
    "a red square on a blue background", "a green circle next to a yellow triangle",
    "what is in the picture?", "there is a bright gradient from left to right",
    "one two three four five six seven eight nine ten",
    "The image shows shapes: a disc, a bar and a wedge.",
    "It is a small synthetic image made for testing.",
]

# (name, width, height): square, landscape (1x2 grid for smolvlm), portrait (2x1 grid).
IMAGES = [("square", 64, 64), ("landscape", 120, 48), ("portrait", 50, 130)]
JPEG_OF = "landscape"


# ---------------------------------------------------------------------------------------------
# llama.cpp converter


def convert(llama_cpp, model_dir, outfile, name, mmproj):
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir),
           "--outfile", str(outfile), "--outtype", "f32", "--model-name", name]
    if mmproj:
        cmd.append("--mmproj")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=model_dir.parent)
    if r.returncode != 0:
        sys.exit(f"converter failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")


# ---------------------------------------------------------------------------------------------
# Inputs: images and tokenizers


def make_image(w, h, k):
    """Smooth integer gradients plus a disc, a bar and a wedge (pure integer arithmetic)."""
    from PIL import Image

    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x * 255) // (w - 1)
    g = (y * 255) // (h - 1)
    b = ((x + y) * 255) // (w + h - 2)
    b = np.where(((x // 7 + y // 5 + k) % 4) == 0, 255 - b, b)
    cx, cy, rad = (w * 2) // 3, h // 3, min(w, h) // 4
    disc = (x - cx) ** 2 + (y - cy) ** 2 <= rad * rad
    bar = (x >= w // 8) & (x < w // 8 + max(3, w // 6)) & (y >= h // 2) & (y < h - h // 8)
    wedge = (y - h // 2) * w >= (w - x) * h // 2 + (k * w)  # lower-right triangle
    rgb = np.stack([r, g, b], -1)
    rgb[disc] = (240, 30 + 40 * k, 60)
    rgb[bar] = (20, 200, 220 - 50 * k)
    rgb[wedge & ~disc] = (250, 240, 40) if k != 1 else (90, 20, 160)
    return Image.fromarray(rgb.astype(np.uint8), "RGB")


def train_spm(vocab_size, bos, eos, pad, unk, ids, user_symbols):
    """A SentencePiece BPE model (bytes), trained in memory on CORPUS, single-threaded."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=buf, model_type="bpe",
        vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=1.0,
        bos_piece=bos, eos_piece=eos, pad_piece=pad, unk_piece=unk,
        bos_id=ids["bos"], eos_id=ids["eos"], pad_id=ids["pad"], unk_id=ids["unk"],
        user_defined_symbols=user_symbols, byte_fallback=False,
        normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, num_threads=1, minloglevel=2)
    return buf.getvalue()


def tokenizer_config(sp, tokenizer_class, specials, plain, extra, bos, eos, pad, unk, add_bos):
    """tokenizer_config.json: the family's special tokens as `special` added tokens (the converter
    types them CONTROL), `\\n`-style pieces as non-special ones (USER_DEFINED)."""
    dec = {}
    for piece in specials + plain:
        i = sp.piece_to_id(piece)
        assert sp.id_to_piece(i) == piece, piece
        dec[str(i)] = {"content": piece, "lstrip": False, "normalized": False,
                       "rstrip": False, "single_word": False, "special": piece in specials}
    for piece in (bos, eos, pad, unk):
        i = sp.piece_to_id(piece)
        dec[str(i)] = {"content": piece, "lstrip": False, "normalized": False,
                       "rstrip": False, "single_word": False, "special": True}
    dec = dict(sorted(dec.items(), key=lambda kv: int(kv[0])))
    return {"tokenizer_class": tokenizer_class, "bos_token": bos, "eos_token": eos,
            "pad_token": pad, "unk_token": unk, "add_bos_token": add_bos, "add_eos_token": False,
            "add_prefix_space": False, "legacy": False, "clean_up_tokenization_spaces": False,
            "model_max_length": 2048, "added_tokens_decoder": dec, "extra_special_tokens": extra}


def placeholder(family):
    return "<start_of_image>" if family == "gemma3" else "<image>"


def expansion(family, entry):
    """What the processor puts in place of the template's image placeholder (written out here
    independently of transformers, as tollgate must do it)."""
    if family == "gemma3":
        return "\n\n<start_of_image>" + "<image_soft_token>" * 4 + "<end_of_image>\n\n"
    tile = "<image>" * 16
    if entry["rows"] == 0 and entry["cols"] == 0:
        return "<fake_token_around_image><global-img>" + tile + "<fake_token_around_image>"
    s = ""
    for r in range(entry["rows"]):
        for c in range(entry["cols"]):
            s += f"<fake_token_around_image><row_{r + 1}_col_{c + 1}>" + tile
        s += "\n"
    return s + "\n<fake_token_around_image><global-img>" + tile + "<fake_token_around_image>"


def spm_reference_ids(sp, text, added):
    """Token ids of `text` the plain way: split on the added (special and user-defined) pieces,
    longest first, and SentencePiece-encode the stretches between them."""
    out, i, rest = [], 0, ""
    order = sorted(added, key=len, reverse=True)
    while i < len(text):
        hit = next((p for p in order if text.startswith(p, i)), None)
        if hit is None:
            rest += text[i]
            i += 1
            continue
        if rest:
            out += sp.encode(rest)
            rest = ""
        out.append(sp.piece_to_id(hit))
        i += len(hit)
    if rest:
        out += sp.encode(rest)
    return out


# ---------------------------------------------------------------------------------------------
# Families


def perturb_constants(model, torch):
    """Add N(0, 0.1) to every parameter the default init leaves constant (zeros or ones)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.numel() and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape) * 0.1)


def build_gemma3(work):
    import sentencepiece as spm
    import torch
    from PIL import Image
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    specials = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                "<image_soft_token>"]
    plain = ["\n\n", "\n"]
    ids = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}  # as in Gemma's real vocabulary
    model_bytes = train_spm(160, "<bos>", "<eos>", "<pad>", "<unk>", ids, specials + plain)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    vocab = sp.vocab_size()
    tid = {p: sp.piece_to_id(p) for p in specials}

    torch.manual_seed(SEED)
    cfg = Gemma3Config(
        text_config=dict(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            # llama.cpp (and tollgate) scale attention by 1/sqrt(head_dim); Gemma 3 4B/12B have
            # query_pre_attn_scalar == head_dim, so keep them equal here.
            query_pre_attn_scalar=32, sliding_window=16, max_position_embeddings=512,
            pad_token_id=ids["pad"], eos_token_id=ids["eos"], bos_token_id=ids["bos"]),
        # Default layer_types (both sliding: llama.cpp's Gemma 3 rule is "every 6th is global").
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=64, patch_size=8,
                           vision_use_head=False),
        mm_tokens_per_image=4, boi_token_index=tid["<start_of_image>"],
        eoi_token_index=tid["<end_of_image>"], image_token_index=tid["<image_soft_token>"])
    model = Gemma3ForConditionalGeneration(cfg).eval()
    perturb_constants(model, torch)
    with torch.no_grad():
        w = model.model.multi_modal_projector.mm_input_projection_weight
        w.copy_(w.half().float())  # the converter stores it as F16

    d = work / "tiny-gemma3-vision"
    model.save_pretrained(d)
    # transformers 5 saves the SigLIP tower as `vision_tower.X`; the converter wants the
    # checkpoint layout `vision_tower.vision_model.X`.
    rename_safetensors(d / "model.safetensors",
                       lambda k: "vision_tower.vision_model." + k[len("vision_tower."):]
                       if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.")
                       else k)
    (d / "tokenizer.model").write_bytes(model_bytes)
    extra = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
             "image_token": "<image_soft_token>"}
    write_json(d / "tokenizer_config.json",
               tokenizer_config(sp, "GemmaTokenizer", specials, plain, extra,
                                "<bos>", "<eos>", "<pad>", "<unk>", add_bos=True))
    (d / "chat_template.jinja").write_text(GEMMA3_TEMPLATE)
    pre = {"size": {"height": 64, "width": 64}, "resample": Image.Resampling.BILINEAR.value,
           "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_resize": True,
           "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
           "do_convert_rgb": True, "do_pan_and_scan": False}
    write_json(d / "preprocessor_config.json",
               {**pre, "image_seq_length": 4, "image_processor_type": "Gemma3ImageProcessor",
                "processor_class": "Gemma3Processor"})

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    ip = Gemma3ImageProcessorPil(**pre)
    proc = Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=GEMMA3_TEMPLATE,
                           image_seq_length=4)
    info = {
        "architecture": "Gemma3ForConditionalGeneration",
        "text": {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128,
                 "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 32,
                 "query_pre_attn_scalar": 32, "sliding_window": 16,
                 "layer_types": list(cfg.text_config.layer_types),
                 "rms_norm_eps": cfg.text_config.rms_norm_eps,
                 "rope_parameters": cfg.text_config.rope_parameters},
        "vision": {"image_size": 64, "patch_size": 8, "hidden_size": 32, "layers": 2,
                   "heads": 2, "layer_norm_eps": cfg.vision_config.layer_norm_eps},
        "mm_tokens_per_image": 4,
        "token_ids": {"bos": ids["bos"], "eos": ids["eos"], "pad": ids["pad"],
                      "boi": tid["<start_of_image>"], "eoi": tid["<end_of_image>"],
                      "image": tid["<image_soft_token>"], "start_of_turn": tid["<start_of_turn>"],
                      "end_of_turn": tid["<end_of_turn>"]},
        "preprocessor": {"class": "Gemma3ImageProcessorPil", "size": [64, 64],
                         "resample": "bilinear", "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                         "note": "stretch to size (no aspect kept, no padding)"},
    }
    return dict(family="gemma3", dir=d, model=model, sp=sp, tok=tok, proc=proc, ip=ip,
                added=specials + plain + ["<bos>", "<eos>"], image_token=tid["<image_soft_token>"],
                projector="gemma3", info=info, name="tollgate-tiny-gemma3-vision")


def build_smolvlm(work):
    import sentencepiece as spm
    import torch
    from PIL import Image
    from transformers import AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    rowcol = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    specials = ["<fake_token_around_image>", "<image>", "<global-img>"] + rowcol
    plain = ["\n"]
    # SmolVLM's real tokenizer: unk <|endoftext|> 0, bos <|im_start|> 1, pad <|im_end|> 2, eos
    # <end_of_utterance> (an added token there; a control piece here).
    ids = {"unk": 0, "bos": 1, "pad": 2, "eos": 3}
    model_bytes = train_spm(200, "<|im_start|>", "<end_of_utterance>", "<|im_end|>",
                            "<|endoftext|>", ids, specials + plain)
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    vocab = sp.vocab_size()
    image_id = sp.piece_to_id("<image>")

    torch.manual_seed(SEED)
    cfg = Idefics3Config(
        text_config=dict(
            model_type="llama", vocab_size=vocab, hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=2048, pad_token_id=ids["pad"], bos_token_id=ids["bos"],
            eos_token_id=ids["eos"], architectures=["LlamaForCausalLM"]),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=64, patch_size=8),
        scale_factor=2, image_token_id=image_id, pad_token_id=ids["pad"])
    model = Idefics3ForConditionalGeneration(cfg).eval()
    perturb_constants(model, torch)

    d = work / "tiny-smolvlm"
    model.save_pretrained(d)
    (d / "tokenizer.model").write_bytes(model_bytes)
    extra = {"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
             "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}
    write_json(d / "tokenizer_config.json",
               tokenizer_config(sp, "LlamaTokenizer", specials, plain, extra, "<|im_start|>",
                                "<end_of_utterance>", "<|im_end|>", "<|endoftext|>",
                                add_bos=False))
    (d / "chat_template.jinja").write_text(SMOLVLM_TEMPLATE)
    pre = {"size": {"longest_edge": 128}, "max_image_size": {"longest_edge": 64},
           "resample": Image.Resampling.LANCZOS.value, "image_mean": [0.5, 0.5, 0.5],
           "image_std": [0.5, 0.5, 0.5], "do_resize": True, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "do_convert_rgb": True,
           "do_image_splitting": True, "do_pad": True}
    write_json(d / "preprocessor_config.json",
               {**pre, "image_processor_type": "Idefics3ImageProcessor",
                "processor_class": "Idefics3Processor"})

    tok = AutoTokenizer.from_pretrained(d)
    n_before = len(tok)
    ip = Idefics3ImageProcessorPil(**pre)
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=16,
                             chat_template=SMOLVLM_TEMPLATE)
    assert len(tok) == n_before == vocab, (n_before, len(tok), vocab)
    info = {
        "architecture": "Idefics3ForConditionalGeneration (text: LlamaForCausalLM)",
        "text": {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "layers": 2,
                 "heads": 2, "kv_heads": 1, "head_dim": 32,
                 "rms_norm_eps": cfg.text_config.rms_norm_eps,
                 "rope_parameters": cfg.text_config.rope_parameters,
                 "tie_word_embeddings": bool(cfg.text_config.tie_word_embeddings)},
        "vision": {"image_size": 64, "patch_size": 8, "hidden_size": 32, "layers": 2,
                   "heads": 2, "layer_norm_eps": cfg.vision_config.layer_norm_eps},
        "scale_factor": 2, "tokens_per_tile": 16,
        "token_ids": {"bos": ids["bos"], "eos": ids["eos"], "pad": ids["pad"], "unk": ids["unk"],
                      "image": image_id,
                      "fake_token_around_image": sp.piece_to_id("<fake_token_around_image>"),
                      "global_img": sp.piece_to_id("<global-img>"),
                      "row_1_col_1": sp.piece_to_id("<row_1_col_1>")},
        "preprocessor": {"class": "Idefics3ImageProcessorPil", "longest_edge": 128,
                         "max_image_size": 64, "resample": "lanczos", "image_mean": [0.5] * 3,
                         "image_std": [0.5] * 3,
                         "note": "tiles row-major, then the global image (last)"},
    }
    return dict(family="smolvlm", dir=d, model=model, sp=sp, tok=tok, proc=proc, ip=ip,
                added=specials + plain + ["<|im_start|>", "<end_of_utterance>", "<|im_end|>"],
                image_token=image_id, projector="idefics3", info=info, name="tollgate-tiny-smolvlm")


def rename_safetensors(path, rename):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    save_file({rename(k): v.contiguous() for k, v in sorted(tensors.items())}, str(path),
              metadata={"format": "pt"})


# ---------------------------------------------------------------------------------------------
# References


def mmproj_numpy(kv, T, pixel_tiles):
    """The mmproj graph (SigLIP + projector) from GGUF tensors, for [n, 3, S, S] tiles."""
    H = kv["clip.vision.embedding_length"]
    P = kv["clip.vision.patch_size"]
    S = kv["clip.vision.image_size"]
    nh = kv["clip.vision.attention.head_count"]
    L = kv["clip.vision.block_count"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    n = S // P

    def ln(x, w, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    outs = []
    for img in pixel_tiles.astype(np.float64):
        patches = img.reshape(3, n, P, n, P).transpose(1, 3, 0, 2, 4).reshape(n * n, 3 * P * P)
        x = patches @ T["v.patch_embd.weight"].reshape(H, -1).T + T["v.patch_embd.bias"]
        x = x + T["v.position_embd.weight"]
        for i in range(L):
            p = f"v.blk.{i}."
            h = ln(x, T[p + "ln1.weight"], T[p + "ln1.bias"])
            q, k, v = (h @ T[p + f"attn_{c}.weight"].T + T[p + f"attn_{c}.bias"] for c in "qkv")
            dh = H // nh
            q, k, v = (t.reshape(-1, nh, dh).transpose(1, 0, 2) for t in (q, k, v))
            a = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            o = (a @ v).transpose(1, 0, 2).reshape(-1, H)
            x = x + o @ T[p + "attn_out.weight"].T + T[p + "attn_out.bias"]
            h = ln(x, T[p + "ln2.weight"], T[p + "ln2.bias"])
            h = gelu(h @ T[p + "ffn_up.weight"].T + T[p + "ffn_up.bias"])
            x = x + h @ T[p + "ffn_down.weight"].T + T[p + "ffn_down.bias"]
        x = ln(x, T["v.post_ln.weight"], T["v.post_ln.bias"])
        if kv["clip.projector_type"] == "gemma3":
            k = kv.get("clip.vision.projector.scale_factor", 4)
            g = x.reshape(n // k, k, n // k, k, H).mean(axis=(1, 3)).reshape(-1, H)
            g = g / np.sqrt((g ** 2).mean(-1, keepdims=True) + eps) * T["mm.soft_emb_norm.weight"]
            outs.append(g @ T["mm.input_projection.weight"])
        else:
            s = kv["clip.vision.projector.scale_factor"]
            y = x.reshape(n, n // s, H * s).transpose(1, 0, 2)
            y = y.reshape(n // s, n // s, H * s * s).transpose(1, 0, 2).reshape(-1, H * s * s)
            outs.append(y @ T["mm.model.fc.weight"].T)
    return np.concatenate(outs)


def reference_for(fam, img_name, img, kv, T):
    import torch

    model, proc, tok, ip = fam["model"], fam["proc"], fam["tok"], fam["ip"]
    family = fam["family"]
    entry = {"name": img_name, "file": f"../images/{img_name}.png", "width": img.width,
             "height": img.height}

    # (a) pixel values from the Pil image processor alone
    extra = {"return_row_col_info": True} if family == "smolvlm" else {}
    pv_out = ip(images=[img], return_tensors="np", **extra)
    pv = np.asarray(pv_out["pixel_values"], dtype=np.float32)
    entry["pixel_values"] = {"file": f"{img_name}.pixel_values.bin",
                             "shape": f32_bin(fam["out"] / f"{img_name}.pixel_values.bin", pv)}
    if family == "smolvlm":
        rows = int(np.asarray(pv_out["rows"]).reshape(-1)[0])
        cols = int(np.asarray(pv_out["cols"]).reshape(-1)[0])
        tiles = pv.shape[1]
        assert tiles == (rows * cols + 1 if rows or cols else 1), (rows, cols, tiles)
        entry.update(rows=rows, cols=cols, tiles=tiles)
        tile_stack = pv[0]
    else:
        tile_stack = pv

    # (c) the chat prompt through the processor
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": PROMPT_TEXT}]}]
    rendered = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=rendered, images=[img], return_tensors="pt", add_special_tokens=False)
    assert np.array_equal(inputs["pixel_values"].numpy(), pv), "processor pixel_values differ"
    ids = inputs["input_ids"][0].tolist()
    expanded = rendered.replace(placeholder(family), expansion(family, entry))
    ref_ids = spm_reference_ids(fam["sp"], expanded, fam["added"])
    assert ids == ref_ids, f"{family}/{img_name}: HF ids differ from SentencePiece\n{ids}\n{ref_ids}"
    positions = [i for i, t in enumerate(ids) if t == fam["image_token"]]

    # (b) image features, and what the model inserts at the image tokens
    captured = {}
    lm = model.model.language_model if family == "gemma3" else model.model.text_model

    def grab(_module, _args, kwargs):
        captured.setdefault("embeds", kwargs["inputs_embeds"].detach().clone())

    handle = lm.register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad():
        if family == "gemma3":
            feats = model.get_image_features(inputs["pixel_values"], return_dict=True).pooler_output
        else:
            feats = model.get_image_features(inputs["pixel_values"],
                                             pixel_attention_mask=inputs["pixel_attention_mask"],
                                             return_dict=True).pooler_output
        feats = torch.cat(list(feats)) if isinstance(feats, (list, tuple)) else feats
        feats = feats.reshape(-1, feats.shape[-1]).float()
        out = model(**inputs)
    handle.remove()
    assert len(positions) == feats.shape[0], (len(positions), feats.shape)
    inserted = captured["embeds"][0, positions]
    assert torch.equal(inserted, feats), "inserted rows differ from get_image_features"
    entry["features"] = {"file": f"{img_name}.features.bin",
                         "shape": f32_bin(fam["out"] / f"{img_name}.features.bin", feats.numpy())}

    # the GGUF graph in NumPy reproduces the features
    mine = mmproj_numpy(kv, T, tile_stack)
    err = float(np.abs(mine - feats.numpy().astype(np.float64)).max())
    scale = float(np.abs(feats.numpy()).max())
    assert err <= 1e-4 * max(1.0, scale), f"{family}/{img_name}: numpy mmproj off by {err}"

    logits = out.logits[0, -1].float().numpy()
    entry["logits"] = {"file": f"{img_name}.logits.bin",
                       "shape": f32_bin(fam["out"] / f"{img_name}.logits.bin", logits)}

    # greedy: generate, checked against an argmax loop over full forwards
    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=fam["info"]["token_ids"]["pad"])
    with torch.no_grad():
        gen = model.generate(**inputs, generation_config=gc)
    greedy = gen[0, len(ids):].tolist()
    loop, margins = [], []
    cur = dict(inputs)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            lg = model(**cur).logits[0, -1].double()
            top = torch.topk(lg, 2)
            loop.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            nxt = torch.tensor([[loop[-1]]])
            cur["input_ids"] = torch.cat([cur["input_ids"], nxt], 1)
            cur["attention_mask"] = torch.cat([cur["attention_mask"], torch.ones_like(nxt)], 1)
            if "token_type_ids" in cur:
                cur["token_type_ids"] = torch.cat([cur["token_type_ids"], torch.zeros_like(nxt)], 1)
    assert greedy == loop, f"{family}/{img_name}: generate {greedy} != argmax loop {loop}"
    assert loop[0] == int(np.argmax(logits))

    entry.update({
        "rendered_prompt": rendered,
        "input_ids": ids,
        "n_tokens": len(ids),
        "image_token_positions": positions,
        "n_image_tokens": len(positions),
        "greedy": greedy,
        "greedy_pieces": [fam["sp"].id_to_piece(t) for t in greedy],
        "greedy_min_top2_margin": round(min(margins), 6),
        "logits_argmax": int(np.argmax(logits)),
    })
    if family == "gemma3":
        tt = inputs["token_type_ids"][0].tolist()
        assert [i for i, t in enumerate(tt) if t] == positions
        entry["token_type_ids"] = "1 at image_token_positions, else 0"
    return entry


def run_family(fam, llama_cpp, out_root, images, versions, jpeg):
    out = out_root / fam["family"]
    out.mkdir(parents=True)
    fam["out"] = out
    convert(llama_cpp, fam["dir"], out / "model.gguf", fam["name"], mmproj=False)
    convert(llama_cpp, fam["dir"], out / "mmproj.gguf", fam["name"], mmproj=True)

    kv, T = read_gguf(llama_cpp, out / "mmproj.gguf")
    assert kv["general.architecture"] == "clip", kv["general.architecture"]
    assert kv["clip.projector_type"] == fam["projector"], kv["clip.projector_type"]
    hf_eps = fam["info"]["vision"]["layer_norm_eps"]
    assert abs(kv["clip.vision.attention.layer_norm_epsilon"] - hf_eps) < 1e-12, "vision eps"
    types = {n: t for n, (_, t) in T.items()}
    if fam["family"] == "gemma3":
        assert types["mm.input_projection.weight"] == "F16"
        hf_w = fam["model"].model.multi_modal_projector.mm_input_projection_weight.detach().numpy()
        assert np.array_equal(T["mm.input_projection.weight"][0], hf_w), "F16 projection rounding"
        others = {t for n, t in types.items() if n != "mm.input_projection.weight"}
        assert others == {"F32"}, others
    else:
        assert set(types.values()) == {"F32"}, set(types.values())
    T = {n: a for n, (a, _) in T.items()}
    tkv, _ = read_gguf(llama_cpp, out / "model.gguf")
    assert tkv.get("tokenizer.chat_template") == (GEMMA3_TEMPLATE if fam["family"] == "gemma3"
                                                  else SMOLVLM_TEMPLATE), "chat template"
    assert tkv["tokenizer.ggml.model"] == "llama"
    assert len(tkv["tokenizer.ggml.tokens"]) == fam["info"]["text"]["vocab_size"]

    entries = [reference_for(fam, name, img, kv, T) for name, img in images]
    ref = {
        "family": fam["family"],
        "generator": "scripts/vision-fixtures.py",
        "seed": SEED,
        "versions": versions,
        "converter": {"sdist": SDIST, "sha256": SDIST_SHA,
                      "commands": ["convert_hf_to_gguf.py DIR --outtype f32",
                                   "convert_hf_to_gguf.py DIR --mmproj --outtype f32"]},
        "gguf": {n: {"sha256": sha256(out / n), "bytes": (out / n).stat().st_size}
                 for n in ("model.gguf", "mmproj.gguf")},
        "model": fam["info"],
        "prompt": {"messages": [{"role": "user", "content": [
                       {"type": "image"}, {"type": "text", "text": PROMPT_TEXT}]}],
                   "add_generation_prompt": True,
                   "note": "rendered with the GGUF's chat template, then expanded and tokenized "
                           "by the processor with add_special_tokens=False (the template "
                           "writes the BOS itself)"},
        "generation": {"max_new_tokens": NEW_TOKENS, "do_sample": False, "stop_at_eos": False},
        "arrays": "little-endian float32, row-major, shapes as listed",
        "images": entries,
        "jpeg": jpeg,
    }
    write_json(out / "reference.json", ref)
    return ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", default=str(DEFAULT_SDIST))
    ap.add_argument("--llama-cpp", help="an unpacked llama.cpp tree (or the sdist's root)")
    ap.add_argument("--out", default=str(ROOT / "tests/data/vision"))
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import PIL
    import PIL.Image
    import sentencepiece
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    transformers.logging.set_verbosity_error()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "sentencepiece": sentencepiece.__version__, "pillow": PIL.__version__,
                "numpy": np.__version__, "python": sys.version.split()[0]}
    if transformers.__version__ != "5.24.0":
        log(f"warning: transformers {transformers.__version__}, fixtures were made with 5.24.0")

    out_root = Path(args.out).resolve()
    with tempfile.TemporaryDirectory(prefix="vision-fixtures-") as tmp:
        tmp = Path(tmp)
        llama_cpp = llama_cpp_tree(args.llama_cpp, args.sdist, tmp)
        for sub in ("gemma3", "smolvlm", "images"):
            shutil.rmtree(out_root / sub, ignore_errors=True)
        img_dir = out_root / "images"
        img_dir.mkdir(parents=True)
        images = []
        for k, (name, w, h) in enumerate(IMAGES):
            img = make_image(w, h, k)
            img.save(img_dir / f"{name}.png", optimize=False)
            images.append((name, img))
            if name == JPEG_OF:
                jpg = img_dir / f"{name}.jpg"
                img.save(jpg, quality=90, optimize=False, progressive=False)
                with PIL.Image.open(jpg) as j:
                    diff = np.abs(np.asarray(j.convert("RGB"), np.int16)
                                  - np.asarray(img, np.int16))
                jpeg = {"file": f"../images/{name}.jpg", "source": f"../images/{name}.png",
                        "width": w, "height": h, "encoder": "Pillow, baseline, quality 90",
                        "pillow_decode_vs_png": {"max_abs_diff": int(diff.max()),
                                                 "mean_abs_diff": round(float(diff.mean()), 3)},
                        "note": "decode-only: JPEG decoders round differently, no parity"}

        work = tmp / "hf"
        work.mkdir()
        summary = {}
        for build in (build_gemma3, build_smolvlm):
            fam = build(work)
            ref = run_family(fam, llama_cpp, out_root, images, versions, jpeg)
            summary[fam["family"]] = ref

    for family, ref in summary.items():
        log(f"{family}: model.gguf {ref['gguf']['model.gguf']['bytes']} B, "
            f"mmproj.gguf {ref['gguf']['mmproj.gguf']['bytes']} B")
        for e in ref["images"]:
            grid = f" grid {e['rows']}x{e['cols']} ({e['tiles']} tiles)" if "tiles" in e else ""
            log(f"  {e['name']:9} {e['width']}x{e['height']}{grid}: {e['n_tokens']} tokens, "
                f"{e['n_image_tokens']} image tokens, greedy {e['greedy']} "
                f"(min top-2 margin {e['greedy_min_top2_margin']})")
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    log(f"{out_root}: {total} bytes ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
