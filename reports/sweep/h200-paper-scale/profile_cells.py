"""cProfile of a serial sweep's layer batches alone, not its start-up (issue 7).

The one-layer cProfile of ``run_paper.sh`` is dominated by start-up (checkpoint digests,
imports); this one wraps ``conformance.sweep.runner.run_layer_batch`` and profiles every
batch after the first ``--skip`` (their compiles and first-call costs), with a CUDA
synchronize before the profiler stops, so that device time left queued by a batch is
charged to it. Usage, from the repository root, with the arguments of a serial sweep:

    python reports/sweep/h200-paper-scale/profile_cells.py OUT_PREFIX --skip 2 -- \
        sweep --kernel triton --model /tmp/big --no-model-checks --no-score --workers 1 \
        --layers 0,1,2,3 --db /tmp/prof.sqlite --out /tmp/prof

Writes OUT_PREFIX-cumtime.txt and OUT_PREFIX-tottime.txt (top 60 entries each) and prints
the profiled batches' cell count and wall time. With ``--torch`` the same batches are also
recorded by ``torch.profiler`` (CPU and CUDA activities) and OUT_PREFIX-torch.txt holds its
operator table sorted by device time and by host time (top 40 each): which aten ops and
which kernels a cell's time goes to, device side included.
"""
import argparse
import cProfile
import pstats
import sys
import time

import torch

from conformance import cli
from conformance.sweep import runner

if "--" not in sys.argv:
    sys.exit("usage: profile_cells.py OUT_PREFIX [--skip N] -- INT8CONF_ARGS...")
cut = sys.argv.index("--")
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("out_prefix")
ap.add_argument("--skip", type=int, default=2, help="layer batches run before profiling starts")
ap.add_argument("--torch", action="store_true", help="also record the batches with torch.profiler")
args = ap.parse_args(sys.argv[1:cut])
rest = sys.argv[cut + 1:]

prof = cProfile.Profile()
tprof = None
if args.torch:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    tprof = profile(activities=acts)
seen = {"batches": 0, "cells": 0, "wall": 0.0}
unprofiled = runner.run_layer_batch


def profiled(tasks):
    seen["batches"] += 1
    if seen["batches"] <= args.skip:
        return unprofiled(tasks)
    t0 = time.perf_counter()
    if tprof is not None and seen["batches"] == args.skip + 1:
        tprof.__enter__()
    prof.enable()
    try:
        return unprofiled(tasks)
    finally:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        prof.disable()
        seen["cells"] += len(tasks)
        seen["wall"] += time.perf_counter() - t0


runner.run_layer_batch = profiled
rc = cli.main(rest)
if tprof is not None and seen["batches"] > args.skip:
    tprof.__exit__(None, None, None)
    dev = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    with open(f"{args.out_prefix}-torch.txt", "w") as f:
        for key in (dev, "self_cpu_time_total"):
            f.write(f"sorted by {key}\n")
            f.write(tprof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=60))
            f.write("\n\n")
for key in ("cumtime", "tottime"):
    with open(f"{args.out_prefix}-{key}.txt", "w") as f:
        pstats.Stats(prof, stream=f).sort_stats(key).print_stats(60)
n = max(seen["cells"], 1)
print(f"profiled {seen['cells']} cells in {seen['batches'] - args.skip} batches: "
      f"{seen['wall']:.2f} s, {1000 * seen['wall'] / n:.2f} ms per cell (rc {rc})")
sys.exit(rc)
