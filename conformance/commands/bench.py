"""``int8conf bench``: throughput of the reference exact accumulator and of
each kernel on Qwen3-1.7B layer shapes (see ``conformance.bench.gemm``); with
``--gpu``, the built-in ``triton`` kernel against ``torch._int_mm`` and a plain
autotuned Triton GEMM on Qwen3-0.6B/1.7B layer shapes and squares, TOPS, µs,
ratios, fraction of peak and a bit check, written to
``int8conf-reports/bench/<device>/bench.{json,md,png}``; with ``--main-job``, the wall seconds of the jobs a user
runs first (check, pytest plugin, paper-scale sweep), each as a subprocess, written to
``int8conf-reports/bench/<device>/main_job.{json,md}`` (``conformance.bench.main_job``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.kernels.registry import resolve_kernels
from conformance.runtime.output_dirs import command_root
from reference.command_line import (
    ensure_out_dir,
    name_list,
    non_negative_int,
    positive_int,
    positive_seconds,
    removed_if_refused,
)
from reference.errors import Int8confError
from reference.fileio import atomic_write_json

#: ``--reps`` when not given (CPU benchmark)
DEFAULT_REPS = 3
#: ``--precompile-workers`` when not given (``--gpu``)
DEFAULT_PRECOMPILE_WORKERS = 8
#: ``--out`` when not given (``--gpu``, ``--main-job``)
DEFAULT_GPU_OUT = command_root("bench")
#: ``--timeout`` when not given (``--main-job``), seconds per row
DEFAULT_MAIN_JOB_TIMEOUT_S = 600.0
#: the modes: mode -> (how its error lines start, how a message names it, how it is chosen)
MODES = {
    "cpu": ("bench", "the CPU benchmark (bench without --gpu)", None),
    "gpu": ("bench --gpu", "the GPU benchmark (bench --gpu)", "--gpu"),
    "main-job": ("bench --main-job", "the main-job benchmark (bench --main-job)", "--main-job"),
}
#: options of some modes only: option -> (``args`` attribute, the modes taking it); unset: None / False / []
MODE_OPTIONS = {
    "--kernel": ("kernel", ("cpu",)),
    "--reps": ("reps", ("cpu",)),
    "--quick": ("quick", ("cpu", "gpu")),
    "--no-interpreter": ("no_interpreter", ("cpu",)),
    "--json": ("json", ("cpu",)),
    "--out": ("out", ("gpu", "main-job")),
    "--precompile-workers": ("precompile_workers", ("gpu",)),
    "--extra-kernel": ("extra_kernel", ("gpu",)),
    "--rows": ("rows", ("main-job",)),
    "--timeout": ("timeout", ("main-job",)),
    "--cold-artifacts": ("cold_artifacts", ("main-job",)),
}


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
        f"(atomic write; --gpu always writes <--out, default {DEFAULT_GPU_OUT}>/<device>/bench.json)",
    )
    g = p.add_argument_group("GPU benchmark (--gpu)")
    g.add_argument(
        "--gpu",
        action="store_true",
        help="benchmark triton vs torch._int_mm vs a plain autotuned Triton GEMM on "
        "the GPU (Qwen3-0.6B/1.7B layers at M in 1,16,128,512,4096; 4096^3, "
        f"8192^3, 16384x8192x8192), check bits, write <--out, default {DEFAULT_GPU_OUT}>/<device>/; "
        "first compiles each TMA/Gluon candidate in its own process and drops "
        "those that fail or hang (always)",
    )
    g.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"--gpu and --main-job only: report root (default {DEFAULT_GPU_OUT})",
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
    j = p.add_argument_group("main-job benchmark (--main-job)")
    j.add_argument(
        "--main-job",
        action="store_true",
        help="time, each as a subprocess, the jobs a user runs first and write "
        f"<--out, default {DEFAULT_GPU_OUT}>/<device>/main_job.{{json,md}}: with CUDA a) int8conf check --kernel triton "
        "--device cuda with an empty Triton cache (target <= 60 s), b) the same again warm (<= 20 s), "
        "c) python -m pytest -q -n auto --kernel=triton with an empty Triton cache (<= 60 s), d) the "
        "paper-scale model write + sweep from a fresh store (<= 60 s; the sweep alone <= 30 s); "
        "without CUDA e) int8conf check --kernel triton under the interpreter (<= 120 s on 2 idle cores)",
    )
    j.add_argument(
        "--rows",
        type=name_list,
        default=None,
        metavar="a,b,..",
        help="--main-job only: the rows to time, in this order (default: a,b,c,d with CUDA, e without; "
        "b needs a before it)",
    )
    j.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        metavar="S",
        help=f"--main-job only: seconds per row; a row past it is stopped and recorded as timed out, "
        f"the others still run (default {DEFAULT_MAIN_JOB_TIMEOUT_S:g})",
    )
    j.add_argument(
        "--cold-artifacts",
        action="store_true",
        help="--main-job only: a fresh artifact cache (INT8CONF_CACHE) for each row but b (default: "
        "the cache is kept; the Triton cache is empty for a and c either way)",
    )
    p.set_defaults(func=_run)


def mode(args: argparse.Namespace) -> str:
    """The benchmark mode of ``args``: ``main-job``, ``gpu`` or ``cpu`` (a key of :data:`MODES`)."""
    return "main-job" if args.main_job else ("gpu" if args.gpu else "cpu")


def other_mode_options(args: argparse.Namespace) -> list[str]:
    """The options given in ``args`` (:data:`MODE_OPTIONS` order) that the mode of ``args`` does not take.
    An option counts as given when its value differs from the parser's unset value (``None``, ``False``
    or ``[]``), so an explicit ``--reps 3`` with ``--gpu`` counts."""
    m = mode(args)
    # not ``in (None, False, [])``: 0 == False, and --precompile-workers 0 is given
    return [
        opt
        for opt, (attr, modes) in MODE_OPTIONS.items()
        if m not in modes and (v := getattr(args, attr)) is not None and v is not False and v != []
    ]


def _refuse_other_mode_options(args: argparse.Namespace) -> None:
    """Raise a one-line usage error (exit 2) naming the options of the other
    modes, before any work (the mode would otherwise silently ignore them)."""
    if args.gpu and args.main_job:
        raise Int8confError("bench: --gpu and --main-job are two modes; give one of them")
    bad = other_mode_options(args)
    if not bad:
        return
    m = mode(args)
    owners = [o for o in MODES if any(o in MODE_OPTIONS[b][1] for b in bad)]
    takers = [o for o in MODES if all(o in MODE_OPTIONS[b][1] for b in bad)]
    start, _, flag = MODES[m]
    this = "the CPU benchmark" if flag is None else flag
    hint = "drop them"
    if flag is None and takers:
        hint = f"add {' or '.join(MODES[o][2] for o in takers)} or drop them"
    raise Int8confError(
        f"{start}: {', '.join(bad)}: option(s) of {' or '.join(MODES[o][1] for o in owners)}, "
        f"which {this} would ignore; {hint}"
    )


def _run(args: argparse.Namespace) -> int:
    from conformance.bench import gemm as bench

    _refuse_other_mode_options(args)
    if args.main_job:
        return _run_main_job(args)
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


def _run_main_job(args: argparse.Namespace) -> int:
    from conformance.bench import main_job

    timeout = DEFAULT_MAIN_JOB_TIMEOUT_S if args.timeout is None else args.timeout
    doc, paths = main_job.run_main_job(args.rows, args.out or DEFAULT_GPU_OUT, timeout, args.cold_artifacts)
    print(main_job.render_markdown(doc))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0 if all(r["status"] == "ok" for r in doc["rows"]) else 1
