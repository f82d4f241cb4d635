#!/usr/bin/env python3
"""A SCRIPTED tiny Qwen3 checkpoint for the playground's browser test of a thinking model's
folded reasoning (tests/browser/playground-fixtures.mjs). No thinking model's weights can be
fetched here (tests/reasoning.rs says the same), so this writes a Hugging Face directory whose
weights are set by hand: greedy decoding after the chat template's generation prompt writes

    <think>The question names France; its capital is Paris.</think>\\n\\nParis!<|im_end|>

whatever the conversation. It is not a language model: its layers add nothing (every attention
and MLP output projection is zero), so the logits depend only on the last token, and `lm_head`
maps each token of the reply to the next one (a bigram table). What it does exercise is
everything around the weights: the real Qwen3 tokenizer and chat template (from
`data/tokenizers/qwen3`, fetched by scripts/fetch-tokenizers), the safetensors loader, the
engine's reasoning spec and token count, the API's split into `reasoning_content` and
`content`, billing, and the playground's view.

Usage: scripts/thinking-fixture.py OUT_DIR  (standard library only; about 1 second; 39 MB,
mostly zeros: the vocabulary is Qwen3's 151,936 tokens).
"""
import array
import json
import pathlib
import shutil
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "data" / "tokenizers" / "qwen3"
VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 151_936, 32, 2, 1, 16, 32
# The generation prompt ends with "\n" (token 198); each reply token then follows the one
# before it. Every token appears once, so a bigram table can write the whole reply.
REPLY = ["<think>", "The", "Ġquestion", "Ġnames", "ĠFrance", ";", "Ġits", "Ġcapital", "Ġis",
         "ĠParis", ".", "</think>", "ĊĊ", "Paris", "!", "<|im_end|>"]
START = "Ċ"
# The winning logit is SCALE * sqrt(HIDDEN) (about 57) against 0 for every other token.
SCALE = 10.0


def token_ids():
    t = json.loads((TOKENIZER / "tokenizer.json").read_text())
    ids = dict(t["model"]["vocab"])
    ids.update({a["content"]: a["id"] for a in t["added_tokens"]})
    chain = [ids[w] for w in [START, *REPLY]]
    assert len(set(chain)) == len(chain) <= HIDDEN, "each token needs its own direction"
    assert max(chain) < VOCAB
    return chain


def tensors(chain):
    """name -> (shape, flat float32 values): zeros except the norms, the embedding rows of the
    chain (token k of the chain is basis vector k) and lm_head (row of token k+1 = basis k)."""
    zeros = lambda *shape: (list(shape), array.array("f", bytes(4 * _prod(shape))))
    ones = lambda n: ([n], array.array("f", [1.0] * n))
    embed, head = zeros(VOCAB, HIDDEN), zeros(VOCAB, HIDDEN)
    for k, tok in enumerate(chain):
        embed[1][tok * HIDDEN + k] = 1.0
        if k + 1 < len(chain):
            head[1][chain[k + 1] * HIDDEN + k] = SCALE
    layer = "model.layers.0."
    return {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": head,
        "model.norm.weight": ones(HIDDEN),
        layer + "input_layernorm.weight": ones(HIDDEN),
        layer + "post_attention_layernorm.weight": ones(HIDDEN),
        layer + "self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, HIDDEN),
        layer + "self_attn.k_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        layer + "self_attn.v_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        layer + "self_attn.o_proj.weight": zeros(HIDDEN, HEADS * HEAD_DIM),
        layer + "self_attn.q_norm.weight": ones(HEAD_DIM),
        layer + "self_attn.k_norm.weight": ones(HEAD_DIM),
        layer + "mlp.gate_proj.weight": zeros(FFN, HIDDEN),
        layer + "mlp.up_proj.weight": zeros(FFN, HIDDEN),
        layer + "mlp.down_proj.weight": zeros(HIDDEN, FFN),
    }


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write_safetensors(path, named):
    """The safetensors layout: an 8-byte little-endian header length, the JSON header, then
    each tensor's little-endian bytes in header order."""
    header, offset, blobs = {}, 0, []
    for name, (shape, values) in named.items():
        data = values.tobytes() if sys.byteorder == "little" else _swapped(values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def _swapped(values):
    v = array.array("f", values)
    v.byteswap()
    return v.tobytes()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not (TOKENIZER / "tokenizer.json").exists():
        sys.exit(f"missing {TOKENIZER}/tokenizer.json: run scripts/fetch-tokenizers")
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    chain = token_ids()
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": VOCAB,
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "bos_token_id": 151_643, "eos_token_id": 151_645, "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER / name, out / name)
    write_safetensors(out / "model.safetensors", tensors(chain))
    print(f"wrote {out}: the scripted reply is {len(REPLY)} tokens")


if __name__ == "__main__":
    main()
