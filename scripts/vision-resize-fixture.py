"""Write tests/data/vision/resize.json: Pillow's `Image.resize` of one small RGB image to
several sizes with the bilinear, bicubic and Lanczos filters, the reference for
`engine::vision::resize` (the vision models' preprocessing resizes through Pillow, so tollgate
must produce the same 8-bit pixels).

The input is a deterministic 23x17 pattern (gradients and a few hard edges, so both the
smooth and the ringing behaviour of each filter show). Needs only Pillow:

    python3 -m venv /tmp/pil && /tmp/pil/bin/pip install pillow
    /tmp/pil/bin/python scripts/vision-resize-fixture.py

The output records Pillow's version; rerunning gives the same bytes.
"""
import base64
import json
import pathlib

import PIL
from PIL import Image

W, H = 23, 17
# (30, 6) and (20, 5) shrink the height by more than twice what the width shrinks, where
# Pillow 13 runs its vertical pass first.
SIZES = [(9, 7), (23, 40), (40, 31), (64, 64), (5, 17), (1, 1), (30, 6), (20, 5)]
FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
           "lanczos": Image.Resampling.LANCZOS}


def pattern():
    px = bytearray()
    for y in range(H):
        for x in range(W):
            r = (x * 255) // (W - 1)
            g = (y * 255) // (H - 1)
            b = 255 if (x // 4 + y // 3) % 2 == 0 else 0
            if 8 <= x < 14 and 5 <= y < 11:
                r, g, b = 250, 20, 200
            px += bytes((r, g, b))
    return Image.frombytes("RGB", (W, H), bytes(px))


def main():
    img = pattern()
    cases = []
    for name, f in FILTERS.items():
        for w, h in SIZES:
            out = img.resize((w, h), resample=f)
            cases.append({"filter": name, "width": w, "height": h,
                          "rgb": base64.b64encode(out.tobytes()).decode()})
    doc = {"pillow": PIL.__version__, "width": W, "height": H,
           "rgb": base64.b64encode(img.tobytes()).decode(), "cases": cases}
    root = pathlib.Path(__file__).resolve().parent.parent
    path = root / "tests/data/vision/resize.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
