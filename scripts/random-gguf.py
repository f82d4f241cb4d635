#!/usr/bin/env python3
"""A GGUF file with RANDOM weights in the shape of a real model, for speed measurements where
the real weights cannot be brought (a GPU machine reached through a 64 MiB carry: see
scripts/gpu-check `--bench-shape`). Decode and prefill time depend on the shapes and the
quantization, not on the values, so tok/s and the bandwidth fraction measured on this file are
the real model's; its text is noise, so nothing about quality can be read from it.

The tokenizer, chat template and every other metadata key come from `--like`, a GGUF file of
the same family and vocabulary (SmolLM2-135M for the SmolLM2 shapes); the shape keys are
replaced from SHAPES below (the models' `config.json` on the Hugging Face hub). Every matrix,
the token embedding included, is Q4_K: 256-value blocks of random 4-bit codes and 6-bit scales
with fixed block scales (`d` = `dmin` = 2^-14), so weights stay within +-0.06. Norms are 1.

Format: GGUF v3 (llama.cpp's docs/gguf.md; ggml's `block_q4_K` for the block layout). Standard
library only, not llama.cpp's gguf-py: that needs NumPy, which a GPU machine that cannot reach
PyPI may not have. About 5 seconds per GB.

Usage: scripts/random-gguf.py --like weights/SmolLM2-135M-Instruct.Q4_1.gguf \\
           --shape smollm2-1.7b OUT.gguf
"""
import argparse
import os
import struct

# hidden, layers, heads, kv heads, feed-forward, context, RoPE base (llama architecture keys);
# Q4_K needs rows (hidden and feed-forward widths) in multiples of 256.
SHAPES = {
    "smollm2-1.7b": dict(hidden=2048, layers=24, heads=32, kv_heads=32, ffn=8192, context=8192,
                         rope_theta=130000.0),
    # A shape small enough for a test here (scripts/test runs it).
    "tiny": dict(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, context=2048, rope_theta=10000.0),
}
GGUF_MAGIC, VERSION, ALIGN = b"GGUF", 3, 32
F32, Q4_K = 0, 12
Q4_K_BLOCK, Q4_K_BYTES = 256, 144
# The fixed sizes of GGUF value types (llama.cpp's gguf_type): u8 i8 u16 i16 u32 i32 f32 bool;
# 8 string and 9 array are read apart; u64 i64 f64.
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, U32 = 8, 9, 4


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        self.at += n
        return self.data[self.at - n:self.at]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64()).decode()

    def skip_value(self, kind):
        if kind == STRING:
            self.take(self.u64())
        elif kind == ARRAY:
            inner, n = self.u32(), self.u64()
            for _ in range(n):
                self.skip_value(inner)
        else:
            self.take(SIZES[kind])


def metadata(path):
    """The key-value pairs of GGUF file `path`: key -> (type, the value's bytes as stored)."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)  # the metadata (a 49k-token vocabulary is about 2 MB) is first
    r = Reader(head)
    if r.take(4) != GGUF_MAGIC or r.u32() != VERSION:
        raise SystemExit(f"{path}: not a GGUF v{VERSION} file")
    r.u64()
    out = {}
    for _ in range(r.u64()):
        key, kind = r.string(), r.u32()
        start = r.at
        r.skip_value(kind)
        out[key] = (kind, head[start:r.at])
    return out


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def shaped(meta, shape, name):
    """`meta` with the shape keys of `shape` and `general.name` replaced."""
    arch = meta["general.architecture"][1][8:].decode()
    u32 = lambda v: (U32, struct.pack("<I", v))
    meta = dict(meta)
    meta.update({
        f"{arch}.embedding_length": u32(shape["hidden"]),
        f"{arch}.block_count": u32(shape["layers"]),
        f"{arch}.feed_forward_length": u32(shape["ffn"]),
        f"{arch}.attention.head_count": u32(shape["heads"]),
        f"{arch}.attention.head_count_kv": u32(shape["kv_heads"]),
        f"{arch}.rope.dimension_count": u32(shape["hidden"] // shape["heads"]),
        f"{arch}.context_length": u32(shape["context"]),
        f"{arch}.rope.freq_base": (6, struct.pack("<f", shape["rope_theta"])),
        "general.name": (STRING, gguf_string(name)),
        "general.file_type": u32(14),  # all matrices Q4_K (llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_S)
    })
    return meta


def tensors(shape, vocab):
    """(name, dims innermost first, type) of a llama-architecture model of `shape`."""
    h, f, d = shape["hidden"], shape["ffn"], shape["hidden"] // shape["heads"]
    kv = shape["kv_heads"] * d
    out = [("token_embd.weight", [h, vocab], Q4_K), ("output_norm.weight", [h], F32)]
    for i in range(shape["layers"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", [h], F32), (b + "attn_q.weight", [h, h], Q4_K),
                (b + "attn_k.weight", [h, kv], Q4_K), (b + "attn_v.weight", [h, kv], Q4_K),
                (b + "attn_output.weight", [h, h], Q4_K), (b + "ffn_norm.weight", [h], F32),
                (b + "ffn_gate.weight", [h, f], Q4_K), (b + "ffn_up.weight", [h, f], Q4_K),
                (b + "ffn_down.weight", [f, h], Q4_K)]
    return out


def nbytes(dims, kind):
    n = 1
    for x in dims:
        n *= x
    if kind == F32:
        return 4 * n
    if dims[0] % Q4_K_BLOCK:
        raise SystemExit(f"rows of {dims[0]} values do not split into Q4_K blocks of 256")
    return n // Q4_K_BLOCK * Q4_K_BYTES


def data(dims, kind):
    n = nbytes(dims, kind)
    if kind == F32:
        return struct.pack("<f", 1.0) * (n // 4)
    blocks = bytearray(os.urandom(n))
    count = n // Q4_K_BYTES
    # d and dmin (f16 0x0400 = 2^-14) at bytes 0..4 of every block; scales and codes stay random.
    blocks[0::Q4_K_BYTES] = bytes(count)
    blocks[1::Q4_K_BYTES] = b"\x04" * count
    blocks[2::Q4_K_BYTES] = bytes(count)
    blocks[3::Q4_K_BYTES] = b"\x04" * count
    return blocks


def vocab_size(meta):
    kind, raw = meta["tokenizer.ggml.tokens"]
    assert kind == ARRAY
    return struct.unpack("<Q", raw[4:12])[0]


def write(path, meta, infos):
    pad = lambda n: (-n) % ALIGN
    with open(path, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", VERSION, len(infos), len(meta)))
        for key, (kind, raw) in meta.items():
            f.write(gguf_string(key) + struct.pack("<I", kind) + raw)
        offset = 0
        for name, dims, kind in infos:
            f.write(gguf_string(name) + struct.pack("<I", len(dims)))
            f.write(b"".join(struct.pack("<Q", x) for x in dims) + struct.pack("<IQ", kind, offset))
            n = nbytes(dims, kind)
            offset += n + pad(n)
        f.write(bytes(pad(f.tell())))
        for _, dims, kind in infos:
            blob = data(dims, kind)
            f.write(blob)
            f.write(bytes(pad(len(blob))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", required=True, help="a GGUF file whose tokenizer and template are kept")
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("out")
    a = ap.parse_args()
    meta = metadata(a.like)
    if meta.get("general.alignment", (U32, struct.pack("<I", ALIGN)))[1] != struct.pack("<I", ALIGN):
        raise SystemExit(f"{a.like}: only the default alignment of {ALIGN} is supported")
    shape = SHAPES[a.shape]
    infos = tensors(shape, vocab_size(meta))
    write(a.out, shaped(meta, shape, f"random weights in the shape of {a.shape}"), infos)
    params = sum(x[1][0] * (x[1][1] if len(x[1]) > 1 else 1) for x in infos)
    print(f"wrote {a.out}: {params / 1e9:.2f}B random parameters, {os.path.getsize(a.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
