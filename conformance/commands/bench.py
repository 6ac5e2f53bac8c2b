"""``int8conf bench``: throughput of the reference exact accumulator and of
each kernel on Qwen3-1.7B layer shapes (see ``conformance.bench``); with
``--gpu``, the built-in ``triton`` kernel against ``torch._int_mm`` and a plain
autotuned Triton GEMM on Qwen3-0.6B/1.7B layer shapes and squares, TOPS, µs,
ratios, fraction of peak and a bit check, written to
``reports/bench/<device>/bench.{json,md,png}``."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.commands._options import non_negative_int, positive_int
from reference.fileio import atomic_write_json


def register(subparsers) -> None:
    """Add the ``bench`` subcommand (argparse) to ``subparsers``."""
    p = subparsers.add_parser(
        "bench", help="throughput (GMAC/s) of the reference and the kernels",
        description="Time reference.accumulate.exact_int_mm and each kernel's scaled_mm on "
                    "Qwen3-1.7B layer shapes (M=512; K,N in {2048, 6144}); the Triton "
                    "interpreter is timed on a reduced shape.")
    p.add_argument("--kernel", action="append", default=None, metavar="NAME",
                   help="kernel to time (repeatable; 'all' = every available built-in; "
                        "default all)")
    p.add_argument("--reps", type=positive_int, default=3,
                   help="timed calls per cell (median; at least 1)")
    p.add_argument("--quick", action="store_true",
                   help="only the 512x2048x2048 shape (plus the interpreter's reduced shape)")
    p.add_argument("--no-interpreter", action="store_true",
                   help="skip kernels that run under the Triton interpreter")
    p.add_argument("--json", type=Path, default=None, metavar="PATH",
                   help="also write the rows and environment as JSON (atomic write)")
    g = p.add_argument_group("GPU benchmark (--gpu)")
    g.add_argument("--gpu", action="store_true",
                   help="benchmark triton vs torch._int_mm vs a plain autotuned Triton GEMM on "
                        "the GPU (Qwen3-0.6B/1.7B layers at M in 1,16,128,512,4096; 4096^3, "
                        "8192^3, 16384x8192x8192), check bits, write reports/bench/<device>/")
    g.add_argument("--out", type=Path, default=Path("reports/bench"), metavar="DIR",
                   help="report root for --gpu (default reports/bench)")
    g.add_argument("--precompile-workers", type=non_negative_int, default=8, metavar="N",
                   help="compile all candidate kernels in N processes first (0 = off)")
    g.add_argument("--extra-kernel", action="append", default=[], metavar="NAME",
                   help="also time this kernel (registry name or pkg.module:function?contract=..)"
                        " in the same run, bits checked against its declared contract")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from conformance import bench

    if args.gpu:
        return _run_gpu(args)
    from conformance.kernels.registry import resolve_kernels

    names = [s.name for s in resolve_kernels(args.kernel or ["all"])]
    shapes = bench.QWEN3_1_7B_SHAPES[:1] if args.quick else bench.QWEN3_1_7B_SHAPES
    interp = None if args.no_interpreter else bench.INTERPRETER_SHAPE
    if args.no_interpreter:
        names = [n for n in names if n != "triton"] if not _cuda() else names
    df = bench.run_bench(tuple(names), reps=args.reps, shapes=shapes, interpreter_shape=interp)
    env = bench.environment()
    bench.render(df, title=f"int8conf bench  (torch {env['torch']}, triton {env['triton']}, "
                           f"{env['threads']} threads, {env['device']})")
    if args.json:
        rows = df if isinstance(df, list) else df.to_dict("records")
        atomic_write_json(args.json, {"environment": env, "rows": rows}, indent=1)
    return 0


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _run_gpu(args: argparse.Namespace) -> int:
    from conformance import bench
    from reference.errors import Int8confError

    if not _cuda():
        raise Int8confError("bench --gpu: no CUDA device (torch.cuda.is_available() is False)")
    res = bench.run_gpu_bench(bench.gpu_shapes(quick=args.quick),
                              extra_kernels=tuple(args.extra_kernel),
                              precompile_workers=args.precompile_workers)
    paths = bench.write_gpu_reports(res, args.out)
    print(bench.render_gpu_markdown(res))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
