#!/usr/bin/env python3
"""Aleph's CPU path against transformers at fixed shapes (batch × tokens), one family at a time, in one run: the
forward pass (Aleph: encoder and pooling; transformers: the model's forward) of synthetic inputs of equal length,
including long ones (1 × 4096) where attention dominates.

    pip install torch transformers            # a developer machine, not CI
    cargo build --release -p aleph-bench
    python3 bench/shapes.py qwen3 32x16 8x256 1x4096

The family's random checkpoint is families.py's (/tmp/aleph-families/NAME, made there if absent). 2 threads each;
medians of at least 3 runs after a warm-up. Prints one markdown row per shape.
"""
import re
import statistics
import subprocess
import sys
import time

import families


def aleph(d, shape):
    out = subprocess.run([str(families.ROOT / "target/release/compute"), "--model", str(d), "--shape", shape,
                          "--no-candle", "--seconds", "1"],
                         env={**families.os.environ, "ALEPH_COMPUTE_THREADS": "2"}, check=True, capture_output=True,
                         text=True).stdout
    rows = dict((m[0], float(m[1])) for m in re.findall(r"\| (aleph-cpu(?:-int8|-bf16)?) \| \d+ \| \d+ \| ([\d.]+) \|", out))
    return rows["aleph-cpu"], rows["aleph-cpu-bf16"], rows["aleph-cpu-int8"]


def pytorch(d, cls, batch, tokens):
    import torch

    torch.set_num_threads(2)
    model = getattr(families.namespace(cls), cls).from_pretrained(d).eval()
    ids = torch.randint(100, 1000, (batch, tokens))
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask)
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            model(input_ids=ids, attention_mask=mask)
            runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1e3


def main():
    name, shapes = sys.argv[1], sys.argv[2:]
    checkpoint, cls = families.FAMILIES[name][0], families.FAMILIES[name][1]
    d = families.make(name)
    print(f"| {name} ({checkpoint}) | Aleph f32 ms | Aleph bf16 ms | Aleph int8 ms | PyTorch f32 ms | f32 vs PyTorch "
          "| bf16 vs our f32 | int8 vs our f32 |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        b, t = map(int, shape.split("x"))
        f32, bf16, int8 = aleph(d, shape)
        torch_ms = pytorch(d, cls, b, t)
        print(f"| {b} × {t} | {f32:.1f} | {bf16:.1f} | {int8:.1f} | {torch_ms:.1f} | {torch_ms / f32:.2f}x "
              f"| {f32 / bf16:.2f}x | {f32 / int8:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
