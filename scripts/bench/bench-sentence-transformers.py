"""Measure sentence-transformers' CPU embedding throughput, the baseline of
`cargo bench --bench embeddings` (run both with the same threads, inputs and machine).

Reads the inputs from a JSON file (a list of strings, written by the bench), loads the
sentence-transformers folder with PyTorch on the CPU (`torch.set_num_threads(threads)`), runs
one untimed warm-up, then for each batch size encodes the inputs with
`encode(texts, batch_size=B, normalize_embeddings=True)` (sentence-transformers sorts by
length and pads each batch, as tollgate does), best of `runs`. Prints one JSON line:
{"batch": {"1": {"inputs_per_s": ..., "tokens_per_s": ...}, ...}, "versions": {...}}.
Tokens are counted with the model's tokenizer, special tokens included (what tollgate bills).

The bench runs it with `.venv-bench/bin/python` (`python3 -m venv .venv-bench &&
.venv-bench/bin/pip install sentence-transformers`), or the python in BENCH_ST_PYTHON.

Usage: python bench-sentence-transformers.py MODEL_DIR INPUTS_JSON --threads 2 --runs 3 \
           --batches 1,32,256
"""
import argparse
import json
import time

import torch
import sentence_transformers
from sentence_transformers import SentenceTransformer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("inputs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", default="1,32,256")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.inputs) as f:
        texts = json.load(f)
    model = SentenceTransformer(a.model_dir, device="cpu")
    tokens = sum(len(model.tokenizer(t)["input_ids"]) for t in texts)
    model.encode(texts[:32], batch_size=32, normalize_embeddings=True)
    out = {}
    for b in (int(x) for x in a.batches.split(",")):
        best = float("inf")
        for _ in range(a.runs):
            t0 = time.perf_counter()
            with torch.inference_mode():
                model.encode(texts, batch_size=b, normalize_embeddings=True)
            best = min(best, time.perf_counter() - t0)
        out[str(b)] = {"seconds": best, "inputs_per_s": len(texts) / best,
                       "tokens_per_s": tokens / best}
    print(json.dumps({"batch": out, "inputs": len(texts), "tokens": tokens, "threads": a.threads,
                      "versions": {"torch": torch.__version__,
                                   "sentence_transformers": sentence_transformers.__version__}}))


if __name__ == "__main__":
    main()
