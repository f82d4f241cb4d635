#!/usr/bin/env python3
"""Writes tests/data/tokenizer_ids.json: reference token ids for the two GGUF tokenizers we ship.

What it is
    An independent implementation of our tokenizers, to check src/engine/text/tokenizer.rs against:
    the `transformers` package's GGUF tokenizer conversion
    (transformers/integrations/gguf/gguf_tokenizer_mapping.py, `convert_gguf_tokenizer`), which
    builds a `tokenizers.Tokenizer` from the vocabulary, merges and token types stored in the GGUF.
    The metadata is read with the `gguf` package (transformers' own GGUF reader imports torch;
    this needs no torch).

How to run (from the repository root, with the weights fetched by scripts/fetch-weights)
    python3 -m venv /tmp/tokref-venv
    /tmp/tokref-venv/bin/pip install transformers gguf sentencepiece protobuf tokenizers
    /tmp/tokref-venv/bin/python scripts/tokenizer-reference.py
    Made with transformers 5.23.0, tokenizers 0.23.3, gguf 0.19.0 (sentencepiece 0.2.3 and
    protobuf 7.36.2 are installed alongside, as transformers' tokenizer modules may import them).

What it reads
    weights/SmolLM2-135M-Instruct.Q4_1.gguf  (tokenizer.ggml.model = gpt2, pre = smollm)
    weights/gemma-3-270m-q4_k_m.gguf         (tokenizer.ggml.model = llama, arch gemma3)

What it writes
    tests/data/tokenizer_ids.json:
        {"smollm2": [{"text": ..., "ids": [...]}, ...],
         "gemma3":  [{"text": ..., "ids": [...]}, ...],
         "smollm2_meta": {...}, "gemma3_meta": {...}}
    The ids are the raw encoding of the text, with no special tokens added (no BOS); special
    tokens written in the text itself (`<|im_start|>`, `<start_of_turn>`, `<bos>`) are matched
    whole. Each *_meta object holds what the GGUF metadata says: bos/eos/unk/pad token ids and
    their spellings, add_bos_token, the tokenizer model and pre-tokenizer names, the vocabulary
    size, and whether a chat template is stored (has_chat_template).
    Every case is checked to decode back to its text before anything is written.

Deliberate choices
    * SmolLM2 (`tokenizer.ggml.pre = smollm`): transformers has no split for `smollm` and falls back
      to GPT-2's, while SmolLM2's own tokenizer.json and llama.cpp split every digit on its own
      first (`Digits(individual_digits=True)` before the byte-level GPT-2 split). The reference
      uses SmolLM2's own split, so "12345" is five tokens.
    * Gemma 3: transformers' `gemma_tokenizer` already handles two traps of Gemma GGUFs -- tokens of
      two or more spaces are stored as real spaces and are respelled with U+2581 before the
      merges are built, and the merges (the file has none) are ranked by the order the tokens
      appear in the file, not by their scores.
"""
import json
import pathlib

from gguf import GGUFReader
from tokenizers import pre_tokenizers
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}

# The rendered chat prompts come first: the ChatML one is what SmolLM2's template renders for a
# system + user turn with a generation prompt; the Gemma one is Gemma 3's turn format.
CHAT = {
    "smollm2": [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    ],
    "gemma3": [
        "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    ],
}
COMMON = [
    "Hello world",
    "The capital of France is",
    "12345 6789",
    "12345 6789 3.14159",
    'fn main() { println!("héllo"); }',
    "日本語 Привет مرحبا 🙂",
    "a  b   c\n\n\td",
    "a  b   c\n\n\td    ",
    " leading",
    " leading space",
    "<|im_start|>literal markers<|im_end|> <start_of_turn>",
    "",
]


def read_metadata(path):
    reader = GGUFReader(str(path))
    return {name: field.contents() for name, field in reader.fields.items()}


def tokenizer_dict(meta):
    """What transformers' own (torch-importing) `get_gguf_tokenizer` collects, from the `gguf` reader."""
    renames = GGUF_TOKENIZER_MAPPING["tokenizer"]
    return {name: meta[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in meta}


def build(meta):
    tok_dict = tokenizer_dict(meta)
    tok, _ = convert_gguf_tokenizer(meta["general.architecture"], tok_dict)
    if tok_dict.get("pre_tokenizer_type") == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    return tok


def describe(meta):
    tokens = meta["tokenizer.ggml.tokens"]

    def token_id(key):
        value = meta.get(f"tokenizer.ggml.{key}")
        return None if value is None else int(value)

    out = {}
    for name in ("bos", "eos", "unknown", "padding"):
        tid = token_id(f"{name}_token_id")
        out[f"{name}_token_id"] = tid
        out[f"{name}_token"] = None if tid is None else tokens[tid]
    out["add_bos_token"] = meta.get("tokenizer.ggml.add_bos_token")
    out["tokenizer_model"] = meta.get("tokenizer.ggml.model")
    out["tokenizer_pre"] = meta.get("tokenizer.ggml.pre")
    out["vocab_size"] = len(tokens)
    out["has_chat_template"] = "tokenizer.chat_template" in meta
    return out


def main():
    out = {}
    for name, file in FILES.items():
        meta = read_metadata(ROOT / "weights" / file)
        tok = build(meta)
        cases = []
        for text in [*CHAT[name], *COMMON]:
            ids = tok.encode(text, add_special_tokens=False).ids
            back = tok.decode(ids, skip_special_tokens=False)
            assert back == text, (name, text, back)
            cases.append({"text": text, "ids": ids})
        out[name] = cases
        out[f"{name}_meta"] = describe(meta)
    dest = ROOT / "tests" / "data" / "tokenizer_ids.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
