"""Odd K natively: the built-in ``triton`` kernel with and without its zero-padding
of K to the next multiple of 16 (``builtin_triton._pad_k``), side by side, and the
same GEMM at K' with operands already aligned (the floor: no copy). Both modes are
forced (``_padded_k`` patched), whatever the default rule would choose; the
committed logs were taken before that rule existed (padding was then unconditional)
and are what set ``builtin_triton.PAD_K_MIN_MACS``.

For each shape: end-to-end microseconds per call (``bench._e2e_interleaved``, CUDA
events, median of 7 batches) of
  * ``unpadded``: ``_padded_k`` patched to 0 (fresh plans),
  * ``padded``: ``_padded_k`` patched to K' (two copies per call, then the K' GEMM),
  * ``aligned K'``: the K' GEMM on operands that are already [*, K'] (no copy);
and the bits of ``padded`` and ``unpadded`` against ``bench.check_bits`` on the
zero-padded operands (zero columns add nothing; ``torch._int_mm`` needs aligned K).
Run on the GPU machine from the repository root:
    python reports/bench/nvidia-h200/probe-2026-12-02/odd_k.py
"""
import functools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))
from conformance import bench
from conformance.kernels import builtin_triton as bt
from reference.contract import TRITON_STYLE

#: M, K, N: the sweep's F6 window (before its own padding), the suite's deep-K
#: family, decode / prefill layer shapes with K off by one, a square one
SHAPES = [(16, 131073, 16), (64, 8195, 320), (1, 2047, 6144), (16, 2049, 6144),
          (512, 2049, 6144), (4096, 4095, 4096), (4096, 4097, 4096)]


def _force_pad(kp, m, n, k, native):
    return kp if k % 16 else 0


def _fresh_plans():
    for cache in (bt._CALLS, bt._PLANS, bt._CHOSEN):
        cache.clear()


def main():
    import triton

    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0), flush=True)
    real = bt._padded_k
    print(f"{'M x K x N':>20} {'unpadded us':>12} {'padded us':>10} {'aligned K_ us':>13} "
          f"{'unpadded/padded':>15} {'padded/aligned':>14}  bits (mismatches)", flush=True)
    for m, k, n in SHAPES:
        a, b, sa, sb = bench._gpu_operands(m, k, n, seed=k)
        kp = (k + 15) // 16 * 16
        ap, bp = F.pad(a, (0, kp - k)), F.pad(b, (0, kp - k))
        _fresh_plans()
        odd = functools.partial(bt.scaled_mm, a, b, sa, sb)
        aligned = functools.partial(bt.scaled_mm, ap, bp, sa, sb)
        try:
            bt._padded_k = lambda mm, nn, kk, native: 0
            out_u = odd()
            t_u = bench._e2e_interleaved({"u": odd}, min_batch_ms=50, rounds=3)["u"]
            _fresh_plans()
            bt._padded_k = functools.partial(_force_pad, kp)
            out_p = odd()
            aligned()
            t = bench._e2e_interleaved({"p": odd, "al": aligned})
        finally:
            bt._padded_k = real
        bits = bench.check_bits(ap, bp, sa, sb, {"padded": (out_p, TRITON_STYLE),
                                                 "unpadded": (out_u, TRITON_STYLE)})
        ok = bits["acc_certified"] and bits["padded"] == 0 and bits["unpadded"] == 0
        print(f"{m:>5} x {k:>6} x {n:>5} {t_u:12.1f} {t['p']:10.1f} {t['al']:13.1f} "
              f"{t_u / t['p']:14.1f}x {t['p'] / t['al']:13.2f}x  "
              f"{'identical' if ok else 'MISMATCH'} (padded {bits['padded']}, unpadded "
              f"{bits['unpadded']}, {bits['rows_checked']}/{bits['rows_total']} rows)",
              flush=True)


if __name__ == "__main__":
    main()
