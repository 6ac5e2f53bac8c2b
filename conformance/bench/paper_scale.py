"""The paper-scale sweep's set-up on a GPU machine (``paper_scale.sh`` runs it):

    python -m conformance.bench.paper_scale model DIR [--small]   # random Qwen3-1.7B-shaped model
    python -m conformance.bench.paper_scale precompile            # Triton variants the F6/F7 cells call
    python -m conformance.bench.paper_scale per-fault STORE       # per-fault per-cell seconds of a store

The model: hidden 2048, intermediate 6144, 28 blocks (196 linears), vocabulary 4096, seed 0, with the
shipped tokenizer; ``--small`` gives a 2-block model with hidden 256 for a dry run.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sqlite3
import time
from pathlib import Path

import torch

from conformance.kernels import builtin_triton as bt
from reference.model.assets import default_model_dir
from reference.model.checkpoint import write_random_qwen3

PAPER_SHAPE = dict(vocab_size=4096, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28)
PAPER_SHAPE.update(num_attention_heads=16, num_key_value_heads=8, head_dim=128)
SMALL_SHAPE = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=2)


def write_model(out: Path, small: bool = False) -> Path:
    write_random_qwen3(out, seed=0, **(SMALL_SHAPE if small else PAPER_SHAPE))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_dir() / f, out / f)
    return out


def precompile() -> int:
    """Compile the Triton variants of the F6 window (K = 2^17 + 256 j) and the F7 whole cases into
    Triton's disk cache, so a timed sweep never compiles; returns the number of shapes (CUDA only)."""
    shapes = [(16, 16, 131072 + 256 * j) for j in range(4)]
    shapes += [(64, n, k0 + 256 * j) for n in (1024, 2048, 6144) for k0 in (3072, 7168) for j in range(4)]
    for m, n, k in shapes:
        a = torch.zeros((m, k), dtype=torch.int8, device="cuda")
        b = torch.zeros((n, k), dtype=torch.int8, device="cuda")
        bt.scaled_mm(a, b, torch.ones(m, device="cuda"), torch.ones(n, device="cuda"))
        bt.int_mm(a, b)
    torch.cuda.synchronize()
    return len(shapes)


def per_fault_lines(store: Path) -> list[str]:
    """Mean / median / max seconds per layer cell of each fault in a sweep store."""
    times = collections.defaultdict(list)
    with sqlite3.connect(store) as db:
        for fault, t in db.execute("select fault, elapsed_s from cells where layer != '*model*'"):
            times[fault].append(t)
    n = sum(len(v) for v in times.values())
    total = sum(sum(v) for v in times.values())
    out = [f"{n} cells, summed per-cell time {total:.1f} s, mean {1000 * total / max(n, 1):.2f} ms/cell"]
    for fault in sorted(times):
        v = sorted(times[fault])
        mean, median = 1000 * sum(v) / len(v), 1000 * v[len(v) // 2]
        out.append(f"  {fault}: n={len(v):5d} mean {mean:8.2f} ms  median {median:8.2f} ms  max {1000 * v[-1]:8.1f} ms")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.bench.paper_scale")
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("model")
    m.add_argument("dir", type=Path)
    m.add_argument("--small", action="store_true")
    sub.add_parser("precompile")
    pf = sub.add_parser("per-fault")
    pf.add_argument("store", type=Path)
    args = p.parse_args(argv)
    if args.what == "model":
        print("wrote", write_model(args.dir, args.small))
    elif args.what == "precompile":
        t0 = time.perf_counter()
        print(f"pre-compiled {precompile()} shapes in {time.perf_counter() - t0:.1f} s")
    else:
        print("\n".join(per_fault_lines(args.store)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
