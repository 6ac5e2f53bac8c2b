"""Benchmark of exact int8 accumulation methods, GMAC/s (best of ``repeat``) on Qwen3-1.7B-like
shapes (M=512, K, N in {2048, 6144}): ``exact_int_mm`` (the reference), one float64 GEMM,
``int64_naive`` (``--naive``, first 8 rows only) and ``torch._int_mm`` (a kernel, for comparison).
Prints, asserts nothing; ``--check`` verifies every method against the reference.
Run: ``python -m conformance.bench.accumulate [--m 512] [--repeat 5] [--check] [--naive]``."""

from __future__ import annotations

import argparse
import time

import torch

from reference.accumulate import exact_int_mm, int_mm_int64_naive

SHAPES = [(2048, 2048), (2048, 6144), (6144, 2048), (6144, 6144)]


def _float64_gemm(a, b):
    return (a.to(torch.float64) @ b.to(torch.float64).T).to(torch.int64)


def _torch_int_mm(a, b):
    return torch._int_mm(a, b.T.contiguous()).to(torch.int64)


def _best(fn, a, b, repeat: int) -> tuple[float, float, torch.Tensor]:
    """Best wall time and best process CPU time (all threads) over ``repeat`` runs."""
    out = fn(a, b)  # warm-up
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(a, b)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def main(argv=None) -> None:
    """CLI entry: print a GMAC/s table (one row per shape, one column per method)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="verify each method's output")
    ap.add_argument("--naive", action="store_true", help="also time the int64 naive path")
    args = ap.parse_args(argv)
    methods = [("exact_int_mm", exact_int_mm), ("float64_gemm", _float64_gemm), ("torch._int_mm", _torch_int_mm)]
    if args.naive:
        methods.append(("int64_naive", lambda a, b: int_mm_int64_naive(a[:8], b)))
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, threads={threads}, M={args.m}, best of {args.repeat}")
    print(
        "GMAC/s from wall-clock time; in brackets the same from this process's CPU time x "
        "threads (only a hint of the unloaded rate when other processes compete)"
    )
    head = f"{'K':>6} {'N':>6} " + " ".join(f"{n:>22}" for n, _ in methods) + "   ref/f64"
    print(head)
    g = torch.Generator().manual_seed(0)
    for k, n in SHAPES:
        a = torch.randint(-128, 128, (args.m, k), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        rates, cpu_rates, ref = {}, {}, None
        for name, fn in methods:
            macs = (min(8, args.m) if name == "int64_naive" else args.m) * k * n
            try:
                t, tc, out = _best(fn, a, b, 1 if name == "int64_naive" else args.repeat)
                rates[name] = macs / t / 1e9
                cpu_rates[name] = macs / max(tc, 1e-9) / 1e9 * threads
                if name == "exact_int_mm":
                    ref = out
                elif args.check and ref is not None and not torch.equal(out, ref[: out.shape[0]]):
                    rates[name] = float("nan")
                    print(f"  !! {name} differs from exact_int_mm at K={k} N={n}")
            except Exception as e:  # noqa: BLE001 -- a method unavailable on this build (torch / Triton raise many types): a NaN in the table
                rates[name] = cpu_rates[name] = float("nan")
                print(f"  {name} failed: {type(e).__name__}: {e}")
        row = f"{k:>6} {n:>6} " + " ".join(
            f"{rates[nm]:>12.1f} [{cpu_rates.get(nm, float('nan')):>7.1f}]" for nm, _ in methods
        )
        print(row + f"   {rates['exact_int_mm'] / rates['float64_gemm']:>6.2f}x")


if __name__ == "__main__":
    main()
