"""``int8conf study pow2``: the power-of-two study in one command.

``int8conf study pow2 [--kernels A,B] [--model DIR] [--committed DIR] [--device cpu|cuda] [--out DIR]
                      [--tokens N] [--windows N] [--window-len L] [--flip-windows N]
                      [--prompts N] [--new-tokens N] [--resamples R] [--seed S] [--fresh-process none|a|both]
                      [--time-budget S] [--report-only]``
    Reconstruction gate (which quantization rule reproduces the committed
    checkpoint), layer-level agreement of kernels A and B on every captured
    layer (own vs power-of-two scales), end-to-end greedy agreement (A vs B,
    across fresh processes, prefill vs decode), the accuracy cost (perplexity
    of bf16 / own / pow2-nearest / pow2-ceiling / the wrong arm, paired window
    bootstrap) and teacher-forced flips per margin decile; writes
    ``study.json``, ``study.md`` and three PNGs to ``--out`` (default
    ``int8conf-reports/pow2/<A>-vs-<B>``). Finished parts are kept under ``--out``/.parts and
    reused by a rerun with the same settings.

The default pair ``cpu,triton`` has different declared contracts (``cpu``:
``w_then_a``, CUTLASS style; ``triton``: ``a_then_w``). Size defaults depend
on ``--device``: both generate 8 prompts x 64 new tokens; on ``cpu`` (Triton
interpreted, with larger tiles: same bits) the other sizes keep the study
within 15 minutes on 2 cores. Errors are one line (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.commands.options import parent_model_dir_arg
from conformance.runtime.output_dirs import default_out, kernel_label, pair_label
from reference.command_line import (
    ensure_out_dir,
    int_between,
    positive_int,
    positive_seconds,
    removed_if_refused,
    seed_int,
)
from reference.errors import Int8confError
from reference.model.corpus import prompts

DEFAULT_KERNELS = "cpu,triton"


def _run_study(args: argparse.Namespace) -> int:
    from conformance.study.report import headline
    from conformance.study.run import DEFAULTS, StudySettings, run_study

    if args.study != "pow2":  # pragma: no cover - argparse choices
        raise Int8confError(f"unknown study {args.study!r}")
    d = DEFAULTS[args.device]
    kernels = tuple(k.strip() for k in args.kernels.split(","))
    model = parent_model_dir_arg(args.model)
    s = StudySettings(
        model_dir=str(model),
        kernels=kernels,
        device=args.device,
        committed_dir=args.committed,
        tokens=args.tokens or d["tokens"],
        windows=args.windows or d["windows"],
        window_len=args.window_len or d["window_len"],
        flip_windows=args.flip_windows or d["flip_windows"],
        prompts=args.prompts or d["prompts"],
        new_tokens=args.new_tokens or d["new_tokens"],
        resamples=args.resamples,
        seed=args.seed,
        level=args.level,
        fresh_process=args.fresh_process or d["fresh_process"],
    )
    if args.committed is not None and not Path(args.committed).is_dir():
        raise Int8confError(f"--committed {args.committed}: not a directory (expected the W8A8 checkpoint of --model)")
    args.out = str(out_dir(args))
    out = Path(args.out)
    quiet = args.quiet
    with removed_if_refused(out):  # refused input: no empty report directory left behind
        if not args.report_only:  # a bad --out fails here, before the gate's minutes of work
            ensure_out_dir(out)
        report = run_study(
            s,
            args.out,
            cache=args.cache,
            progress=None if quiet else (lambda m: print(f"[study] {m}", file=sys.stderr, flush=True)),
            time_budget_s=args.time_budget,
            report_only=args.report_only,
        )
    for line in headline(report):
        print(line)
    print(f"report: {args.out}/study.md")
    return 0


def out_dir(args: argparse.Namespace) -> Path:
    """``--out``, else ``int8conf-reports/pow2/<A>-vs-<B>`` (``conformance.runtime.output_dirs``).

    Raises:
        Int8confError: ``--kernels`` is not two kernels (one line).
    """
    if args.out is not None:
        return Path(args.out)
    ks = [k.strip() for k in args.kernels.split(",")]
    if len(ks) != 2:
        raise Int8confError(f"--kernels needs exactly two kernels A,B, got {','.join(ks)!r}")
    return default_out(args.study, pair_label(kernel_label(ks[0]), kernel_label(ks[1])))


def register(subparsers) -> None:
    """Add the ``study`` subcommand (sets ``func(args) -> exit code``)."""
    p = subparsers.add_parser(
        "study",
        help="the power-of-two study: kernel agreement and accuracy cost",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("study", choices=("pow2",), help="which study (pow2)")
    p.add_argument(
        "--kernels",
        default=DEFAULT_KERNELS,
        help=f"the two kernels A,B (built-in, pkg.module:function or entry point; default "
        f"{DEFAULT_KERNELS}); accuracy arms run through A",
    )
    p.add_argument("--model", help="float parent Qwen3 directory (default: the shipped default model)")
    p.add_argument(
        "--committed",
        help="committed own-scale compressed-tensors W8A8 checkpoint of --model "
        "(default: built by the reference quantizer)",
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the kernels run")
    p.add_argument("--out", default=None, help="report directory (default int8conf-reports/pow2/<A>-vs-<B>)")
    p.add_argument("--cache", help="artifact cache directory")
    p.add_argument("--tokens", type=positive_int, help="captured token rows per layer (default cpu 512, cuda 2048)")
    p.add_argument("--windows", type=positive_int, help="held-out windows for perplexity (default cpu 32, cuda 64)")
    p.add_argument("--window-len", type=positive_int, help="tokens per window (default cpu 128, cuda 256)")
    p.add_argument("--flip-windows", type=positive_int, help="windows for the flip analysis (default cpu 4, cuda 16)")
    p.add_argument(
        "--prompts", type=int_between(1, len(prompts())), help="fixed prompts for generation, 1-8 (default 8)"
    )
    p.add_argument("--new-tokens", type=positive_int, help="greedy new tokens per prompt (default 64)")
    p.add_argument("--resamples", type=positive_int, default=10_000, help="bootstrap resamples (>= 10000)")
    p.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed, 0 .. 2**63-1 (default 0)")
    p.add_argument("--level", type=float, default=0.9, help="confidence level (default 0.9)")
    p.add_argument(
        "--fresh-process",
        choices=("none", "a", "both"),
        help="kernels that repeat their generation in a fresh process (default cpu a, cuda both)",
    )
    p.add_argument(
        "--time-budget",
        type=positive_seconds,
        metavar="SECONDS",
        help="start no new part after this many seconds (the report lists the parts not run; rerun to resume them)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="render the report from the parts already finished under --out (after the gate)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=_run_study)
