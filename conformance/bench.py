"""Throughput benchmark: the reference's exact accumulator vs each kernel.

Prints, for Qwen3-1.7B layer shapes (M = 512 tokens of prefill; K, N from
{2048, 6144}: hidden size 2048, MLP intermediate size 6144), the reference's
exact-accumulator throughput on the CPU (``reference.accumulate.exact_int_mm``,
and the full ``reference_scaled_mm`` = accumulator + epilogue) and each
kernel's ``scaled_mm`` throughput, in GMAC/s (10**9 multiply-accumulates per
second: M*K*N / seconds / 1e9), with the ratio kernel / reference-on-the-same-
device-and-shape, so the cost of checking a kernel is known. Target: reference >= 20 GMAC/s
exact on the 2-core CI machine.

The Triton *interpreter* (no GPU) executes every program instance in Python
over numpy blocks, about 10**3-10**4 times slower than the reference; it is
benchmarked on a reduced shape (default M=64, K=512, N=256) and the table says
so. On a CUDA machine ``int_mm`` and ``triton`` are also timed natively on the
full shapes (CUDA synchronized). Timing: median of ``reps`` calls after one
warm-up call, wall clock (``time.perf_counter``).

This is a benchmark that prints figures, never a timed test (team rule).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

import torch

from reference.contract import CUTLASS_STYLE
from reference.operands import GemmOperands

QWEN3_1_7B_SHAPES = (
    (512, 2048, 2048, "q_proj/o_proj (K=N=hidden)"),
    (512, 2048, 6144, "gate_proj/up_proj"),
    (512, 6144, 2048, "down_proj"),
    (512, 6144, 6144, "K=N=6144 (bound case)"),
)
INTERPRETER_SHAPE = (64, 512, 256, "reduced shape (interpreter)")


def gmacs(m: int, k: int, n: int, seconds: float) -> float:
    """Throughput in GMAC/s: ``m*k*n / seconds / 1e9`` (inf for 0 seconds)."""
    return float("inf") if seconds <= 0 else m * k * n / seconds / 1e9


def make_operands(m: int, k: int, n: int, seed: int = 0) -> GemmOperands:
    """Random full-range int8 operands, real (non-pow2) float32 scales, bf16 bias."""
    g = torch.Generator().manual_seed(seed)
    return GemmOperands(
        torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
        torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g),
        torch.rand(m, generator=g) * 0.02 + 1e-3, torch.rand(n, generator=g) * 0.01 + 1e-4,
        (torch.randn(n, generator=g)).to(torch.bfloat16), name=f"{m}x{k}x{n}")


def time_call(fn: Callable[[], object], reps: int, cuda: bool = False) -> tuple[float, float]:
    """(median, best) wall seconds of ``fn()`` over ``reps`` calls after one warm-up."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    ts = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def _row(kernel: str, device: str, shape: tuple, t: tuple, ref_t: Optional[tuple],
         note: str = "") -> dict:
    m, k, n, label = shape
    secs, best = t
    return {"kernel": kernel, "device": device, "M": m, "K": k, "N": n, "layer": label,
            "ms": secs * 1e3, "GMAC/s": gmacs(m, k, n, secs),
            "best GMAC/s": gmacs(m, k, n, best),
            "x reference": (ref_t[0] / secs) if ref_t else float("nan"), "note": note}


def _timed_row(spec, device: str, shape: tuple, ops: GemmOperands, reps: int,
               ref_t: tuple, note: str) -> dict:
    """Time ``spec.scaled_mm`` on ``ops``; a kernel that raises gets a row with
    NaN figures and the exception in ``note`` (the bench goes on)."""
    try:
        t = time_call(lambda: spec.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b,
                                             torch.bfloat16, ops.bias), reps,
                      cuda=device == "cuda")
    except Exception as e:  # noqa: BLE001 -- report, keep benchmarking the others
        msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        row = _row(spec.name, device, shape, (float("nan"), float("nan")), ref_t,
                   f"FAILED {type(e).__name__}: {msg}")
        return row
    return _row(spec.name, device, shape, t, ref_t, note)


def run_bench(kernels: tuple = ("cpu", "int_mm", "triton"), reps: int = 3,
              shapes: tuple = QWEN3_1_7B_SHAPES,
              interpreter_shape: Optional[tuple] = INTERPRETER_SHAPE,
              cuda: Optional[bool] = None):
    """Time the reference and each kernel; one row per (kernel, device, shape).

    Noise: on a shared machine other processes inflate single timings, so
    both the median (``GMAC/s``, used for the ratio) and the best call
    (``best GMAC/s``) are reported.

    Args:
        kernels: registry names (built-ins or any ``get_kernel`` name).
        reps: timed calls per cell (median reported).
        shapes: (M, K, N, label) tuples for the CPU reference and CPU kernels.
        interpreter_shape: reduced (M, K, N, label) for kernels that run under
            the Triton interpreter on CPU; None skips them.
        cuda: also time CUDA-capable kernels on the GPU (default: if present).
    Returns:
        pandas DataFrame (a list of row dicts if pandas is missing) with columns kernel, device, M, K, N, layer, ms (median), GMAC/s
        (median), best GMAC/s,
        "x reference" (kernel GMAC/s / reference GMAC/s, same device & shape;
        CUDA rows are compared with the CPU reference), note.
    Raises:
        KernelLoadError: a kernel name that does not resolve.
    """
    from conformance.kernels.registry import get_kernel
    from conformance.kernels.runner import pick_device
    from reference.accumulate import exact_int_mm
    from reference.epilogue import reference_scaled_mm

    specs = [get_kernel(k) for k in kernels]
    cuda = torch.cuda.is_available() if cuda is None else cuda
    rows, ref_time = [], {}
    all_shapes = list(shapes) + ([interpreter_shape] if interpreter_shape else [])
    for shape in all_shapes:
        m, k, n, _ = shape
        ops = make_operands(m, k, n)
        t_acc = time_call(lambda: exact_int_mm(ops.a, ops.b), reps)
        ref_time[shape] = t_acc
        rows.append(_row("reference exact_int_mm", "cpu", shape, t_acc, t_acc,
                         "exact int64 accumulator only"))
        t_full = time_call(lambda: reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b,
                                                        CUTLASS_STYLE, ops.bias), reps)
        rows.append(_row("reference scaled_mm", "cpu", shape, t_full, t_acc,
                         "accumulator + epilogue + validation"))
    for spec in specs:
        cpu_interp = spec.name == "triton" or "interpreter" in spec.description
        if "cpu" in spec.devices:
            for shape in all_shapes:
                is_reduced = interpreter_shape is not None and shape is interpreter_shape
                if cpu_interp != is_reduced:
                    continue  # interpreter only on the reduced shape; others only on full
                ops = make_operands(*shape[:3])
                note = ("Triton interpreter (numpy); reduced shape" if cpu_interp else "")
                rows.append(_timed_row(spec, "cpu", shape, ops, reps, ref_time[shape], note))
        if cuda and "cuda" in spec.devices and pick_device(spec, "cuda")[0]:
            for shape in shapes:
                ops = make_operands(*shape[:3]).to("cuda")
                rows.append(_timed_row(spec, "cuda", shape, ops, reps, ref_time[shape],
                                       "native; ratio vs CPU reference"))
    try:
        import pandas as pd
    except ImportError:  # bare GPU boxes: plain rows
        return rows
    return pd.DataFrame(rows)


def render(df, title: str = "int8conf bench") -> None:
    """Print the table with rich (GMAC/s and ratio side by side); one JSON
    line per row when rich or pandas is not installed (bare GPU boxes)."""
    try:
        from rich.console import Console
        from rich.table import Table
        records = df.to_dict("records")
    except (ImportError, AttributeError):
        import json
        print(title)
        for r in (df if isinstance(df, list) else df.to_dict("records")):
            print(json.dumps(r))
        return

    t = Table(title=title)
    cols = ("kernel", "device", "M", "K", "N", "layer", "ms", "GMAC/s", "best GMAC/s",
            "x reference", "note")
    for col in cols:
        t.add_column(col, justify="left" if col in ("kernel", "device", "layer", "note")
                     else "right")
    for r in records:
        t.add_row(r["kernel"], r["device"], str(r["M"]), str(r["K"]), str(r["N"]), r["layer"],
                  f"{r['ms']:.2f}", f"{r['GMAC/s']:.3g}", f"{r['best GMAC/s']:.3g}",
                  f"{r['x reference']:.3g}", r["note"])
    Console(width=max(200, Console().width)).print(t)


def environment() -> dict:
    """Versions and thread count the figures were taken with."""
    import platform

    import triton

    return {"torch": torch.__version__, "triton": triton.__version__,
            "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else
            platform.processor() or platform.machine()}
