"""``int8conf bench``: throughput of the reference exact accumulator and of
each kernel on Qwen3-1.7B layer shapes (see ``conformance.bench.gemm``); with
``--gpu``, the built-in ``triton`` kernel against ``torch._int_mm`` and a plain
autotuned Triton GEMM on Qwen3-0.6B/1.7B layer shapes and squares, TOPS, µs,
ratios, fraction of peak and a bit check, written to
``reports/bench/<device>/bench.{json,md,png}``."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.kernels.registry import resolve_kernels
from conformance.runtime.output_dirs import command_root
from reference.command_line import ensure_out_dir, non_negative_int, positive_int, removed_if_refused
from reference.errors import Int8confError
from reference.fileio import atomic_write_json

#: ``--reps`` when not given (CPU benchmark)
DEFAULT_REPS = 3
#: ``--precompile-workers`` when not given (``--gpu``)
DEFAULT_PRECOMPILE_WORKERS = 8
#: ``--out`` when not given (``--gpu``)
DEFAULT_GPU_OUT = command_root("bench")
#: options of the CPU benchmark only: option -> ``args`` attribute (unset: None / False)
CPU_ONLY = {"--kernel": "kernel", "--reps": "reps", "--no-interpreter": "no_interpreter", "--json": "json"}
#: options of ``--gpu`` only: option -> ``args`` attribute (unset: None / [])
GPU_ONLY = {"--out": "out", "--precompile-workers": "precompile_workers", "--extra-kernel": "extra_kernel"}


def register(subparsers) -> None:
    """Add the ``bench`` subcommand (argparse) to ``subparsers``."""
    p = subparsers.add_parser(
        "bench",
        help="throughput (GMAC/s) of the reference and the kernels",
        description="Time reference.accumulate.exact_int_mm and each kernel's scaled_mm on "
        "Qwen3-1.7B layer shapes (M=512; K,N in {2048, 6144}); the Triton "
        "interpreter is timed on a reduced shape.",
    )
    p.add_argument(
        "--kernel",
        action="append",
        default=None,
        metavar="NAME",
        help="CPU benchmark only: kernel to time (repeatable; 'all' = every available built-in; default all)",
    )
    p.add_argument(
        "--reps",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"CPU benchmark only: timed calls per cell (median; at least 1; default {DEFAULT_REPS})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer shapes: on the CPU only 512x2048x2048 (plus the interpreter's "
        "reduced shape); with --gpu three shapes: 1x2048x6144 and 512x2048x6144 "
        "(Qwen3-1.7B gate/up) and 4096^3",
    )
    p.add_argument(
        "--no-interpreter",
        action="store_true",
        help="CPU benchmark only: skip kernels that run under the Triton interpreter",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="CPU benchmark only: also write the rows and environment as JSON "
        "(atomic write; --gpu always writes reports/bench/<device>/bench.json)",
    )
    g = p.add_argument_group("GPU benchmark (--gpu)")
    g.add_argument(
        "--gpu",
        action="store_true",
        help="benchmark triton vs torch._int_mm vs a plain autotuned Triton GEMM on "
        "the GPU (Qwen3-0.6B/1.7B layers at M in 1,16,128,512,4096; 4096^3, "
        "8192^3, 16384x8192x8192), check bits, write reports/bench/<device>/; "
        "first compiles each TMA/Gluon candidate in its own process and drops "
        "those that fail or hang (always)",
    )
    g.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help=f"--gpu only: report root (default {DEFAULT_GPU_OUT})"
    )
    g.add_argument(
        "--precompile-workers",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"--gpu only: compile all candidate kernels in N processes first "
        f"(0 = no pre-compile; the hang probe still runs; "
        f"default {DEFAULT_PRECOMPILE_WORKERS})",
    )
    g.add_argument(
        "--extra-kernel",
        action="append",
        default=[],
        metavar="NAME",
        help="--gpu only: also time this kernel (registry name or "
        "pkg.module:function?contract=..) in the same run, bits checked against "
        "its declared contract",
    )
    p.set_defaults(func=_run)


def other_mode_options(args: argparse.Namespace) -> list[str]:
    """The options given in ``args`` that belong to the other benchmark mode:
    with ``--gpu`` the CPU benchmark's (``--kernel``, ``--reps``,
    ``--no-interpreter``, ``--json``), without it the GPU benchmark's
    (``--out``, ``--precompile-workers``, ``--extra-kernel``). An option counts
    as given when its value differs from the parser's unset value (``None``,
    ``False`` or ``[]``), so an explicit ``--reps 3`` with ``--gpu`` counts."""
    table = CPU_ONLY if args.gpu else GPU_ONLY
    # not ``in (None, False, [])``: 0 == False, and --precompile-workers 0 is given
    return [
        opt
        for opt, attr in table.items()
        if getattr(args, attr) is not None and getattr(args, attr) is not False and getattr(args, attr) != []
    ]


def _refuse_other_mode_options(args: argparse.Namespace) -> None:
    """Raise a one-line usage error (exit 2) naming the options of the other
    mode, before any work (the mode would otherwise silently ignore them)."""
    bad = ", ".join(other_mode_options(args))
    if bad and args.gpu:
        raise Int8confError(
            f"bench --gpu: {bad}: option(s) of the CPU benchmark (bench "
            f"without --gpu), which --gpu would ignore; drop them"
        )
    if bad:
        raise Int8confError(
            f"bench: {bad}: option(s) of the GPU benchmark (bench --gpu), "
            f"which the CPU benchmark would ignore; add --gpu or drop them"
        )


def _run(args: argparse.Namespace) -> int:
    from conformance.bench import gemm as bench

    _refuse_other_mode_options(args)
    if args.gpu:
        return _run_gpu(args)
    # resolved once and passed on as specs: a user kernel's declared name= or a
    # ?contract= query would not resolve a second time by its name alone
    specs = resolve_kernels(args.kernel or ["all"])
    if args.json is not None:  # refused before any timing, not after it
        if args.json.name in ("", ".", ".."):
            raise Int8confError(f"--json {str(args.json)!r}: give the path of a file, e.g. --json bench.json")
        with removed_if_refused(args.json.parent):
            ensure_out_dir(args.json.parent, "--json", "directory of the JSON file", files=[args.json.name])
    shapes = bench.QWEN3_1_7B_SHAPES[:1] if args.quick else bench.QWEN3_1_7B_SHAPES
    interp = None if args.no_interpreter else bench.INTERPRETER_SHAPE
    if args.no_interpreter and not _cuda():
        specs = [s for s in specs if s.name != "triton"]
    df = bench.run_bench(tuple(specs), reps=args.reps or DEFAULT_REPS, shapes=shapes, interpreter_shape=interp)
    env = bench.environment()
    bench.render(
        df,
        title=f"int8conf bench  (torch {env['torch']}, triton {env['triton']}, "
        f"{env['threads']} threads, {env['device']})",
    )
    if args.json:
        rows = df if isinstance(df, list) else df.to_dict("records")
        atomic_write_json(args.json, {"environment": env, "rows": rows}, indent=1)
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _run_gpu(args: argparse.Namespace) -> int:
    from conformance.bench import gemm as bench

    if not _cuda():
        raise Int8confError("bench --gpu: no CUDA device (torch.cuda.is_available() is False)")
    workers = DEFAULT_PRECOMPILE_WORKERS if args.precompile_workers is None else args.precompile_workers
    res = bench.run_gpu_bench(
        bench.gpu_shapes(quick=args.quick),
        extra_kernels=tuple(args.extra_kernel),
        precompile_workers=workers,
        probe=True,
    )
    paths = bench.write_gpu_reports(res, args.out or DEFAULT_GPU_OUT)
    print(bench.render_gpu_markdown(res))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
