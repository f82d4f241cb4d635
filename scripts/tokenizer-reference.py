#!/usr/bin/env python3
"""Writes tests/data/tokenizer_ids.json: reference token ids for the GGUF tokenizers we build.

The reference is an independent implementation: the `transformers` package's GGUF tokenizer
conversion (transformers/integrations/gguf/gguf_tokenizer_mapping.py), run without torch.
One deliberate difference: for `tokenizer.ggml.pre = smollm` transformers falls back to the plain
GPT-2 split, while SmolLM2's own tokenizer.json and llama.cpp split digits one by one first
(`Digits(individual_digits=true)` before `ByteLevel`); the reference uses SmolLM2's own split.

Run (needs `pip install transformers gguf sentencepiece protobuf`, no torch; transformers'
own GGUF reader imports torch, so the metadata is read with the `gguf` package instead):
    python3 scripts/tokenizer-reference.py
It reads weights/SmolLM2-135M-Instruct.Q4_1.gguf and weights/gemma-3-270m-q4_k_m.gguf.
"""
import json
import pathlib

from gguf import GGUFReader
from tokenizers import pre_tokenizers
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMON = [
    "Hello world",
    "The capital of France is",
    "12345 6789 3.14159",
    'fn main() { println!("héllo"); }',
    "日本語 Привет مرحبا 🙂",
    "a  b   c\n\n\td    ",
    " leading space",
    "<|im_start|>literal markers<|im_end|> <start_of_turn>",
    "",
]
CHAT = {
    "smollm2": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "gemma3": "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
}
FILES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}


def read_tokenizer_dict(path):
    """What transformers' own (torch-importing) reader returns, read with the `gguf` package."""
    reader = GGUFReader(str(path))
    meta = {name: field.contents() for name, field in reader.fields.items()}
    renames = GGUF_TOKENIZER_MAPPING["tokenizer"]
    tok_dict = {name: meta[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in meta}
    return meta["general.architecture"], tok_dict


def build(path):
    arch, tok_dict = read_tokenizer_dict(path)
    tok, _ = convert_gguf_tokenizer(arch, tok_dict)
    if tok_dict.get("pre_tokenizer_type") == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    return tok


def main():
    out = {}
    for name, file in FILES.items():
        tok = build(ROOT / "weights" / file)
        cases = []
        for text in [CHAT[name], *COMMON]:
            ids = tok.encode(text, add_special_tokens=False).ids
            assert tok.decode(ids, skip_special_tokens=False) == text, (name, text)
            cases.append({"text": text, "ids": ids})
        out[name] = cases
    dest = ROOT / "tests" / "data" / "tokenizer_ids.json"
    dest.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
