"""``int8conf scoreboard``: every available kernel (built-in and adapted) on
the same cases (FP8 kernels on FP8 cases, in rows of their own with the
accumulator each declares and the one C11 measures); writes ``int8conf-reports/scoreboard/`` (JSON, Markdown, PNG,
reproducers; a ``--kernel`` / ``--device`` selection
``int8conf-reports/scoreboard/<kernels>@<devices>/``). ``--repro FILE`` re-runs one saved failure alone (exit 1 when
it reproduces, 0 when it does not)."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.kernels.registry import get_kernel
from conformance.runtime.output_dirs import default_out, selection_label
from reference.command_line import positive_seconds
from reference.errors import Int8confError


def register(subparsers) -> None:
    """Add the ``scoreboard`` subcommand."""
    p = subparsers.add_parser(
        "scoreboard",
        help="run every available kernel on the same cases; write a scoreboard",
        description="Run built-in and adapted kernels (torchao, bitsandbytes, vLLM-family when "
        "installed) on one case set; write <out>/scoreboard.{json,md,png} and "
        "reproducers for every failure.",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory (default: int8conf-reports/scoreboard, or "
        "int8conf-reports/scoreboard/<kernels>@<devices> for a --kernel / --device "
        "selection, e.g. int8conf-reports/scoreboard/torchao@cpu)",
    )
    p.add_argument(
        "--kernel",
        action="append",
        metavar="NAME",
        help="only these kernels (repeatable; default: every available one)",
    )
    p.add_argument(
        "--device",
        action="append",
        choices=("cpu", "cuda"),
        help="only these devices (default: cpu, plus cuda when present)",
    )
    p.add_argument("--quick", action="store_true", help="four small synthetic cases only")
    p.add_argument(
        "--captures",
        type=int,
        default=2,
        metavar="N",
        help="captured layers of the default model per scale mode (default 2)",
    )
    p.add_argument(
        "--case-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="seconds per case before the worker is killed (default 60)",
    )
    p.add_argument(
        "--warmup-timeout",
        type=positive_seconds,
        default=300.0,
        metavar="S",
        help="seconds for a row's worker start + warm-up call (default 300)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        metavar="N",
        help="rows run concurrently, each in its own worker process (default 1)",
    )
    p.add_argument(
        "--save-outputs", action="store_true", help="also write raw.json + outputs.safetensors (for --merge elsewhere)"
    )
    p.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="DIR",
        help="add the rows of a scoreboard written with --save-outputs on another "
        "machine (same case options), e.g. the CUDA rows (repeatable)",
    )
    p.add_argument(
        "--report-root", metavar="DIR", default=None, help="directory named in reproducer commands (default: --out)"
    )
    p.add_argument(
        "--repro",
        metavar="FILE",
        default=None,
        help="re-run one saved reproducer alone and report whether it still fails",
    )
    p.add_argument(
        "--from-checks",
        action="append",
        default=[],
        metavar="DIR",
        help="instead of running cases: the full-suite scoreboard from the `int8conf check` reports "
        "(conformance.json) under DIR (repeatable); writes <out>/suite.{json,md}",
    )
    p.add_argument(
        "--throughput",
        action="store_true",
        help="with --from-checks, on CUDA: also time each CUDA row's kernel at three shapes beside a baseline",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def out_dir(args: argparse.Namespace):
    """``--out``, else ``int8conf-reports/scoreboard[/<selection>]`` (``conformance.runtime.output_dirs``)."""
    if args.out is not None:
        return Path(args.out)
    return default_out("scoreboard", selection_label(args.kernel or (), args.device or ()))


def run(args: argparse.Namespace) -> int:
    """Run the scoreboard (exit 0) or one reproducer (exit 1 reproduced, 0 not)."""
    from conformance.scoreboard import board as sb

    if args.from_checks:
        return _from_checks(args)
    if args.throughput:
        raise Int8confError("--throughput: only with --from-checks DIR")
    if args.repro:
        ok, line = sb.rerun_repro(args.repro)
        print(("REPRODUCED " if ok else "NOT REPRODUCED ") + line)
        return 1 if ok else 0
    if args.captures < 0:
        raise Int8confError(f"--captures {args.captures}: expected an integer >= 0")
    if args.jobs < 1:
        raise Int8confError(f"--jobs {args.jobs}: expected an integer >= 1")
    args.out = str(out_dir(args))
    cases = sb.scoreboard_cases(quick=args.quick, captures=args.captures)
    names = args.kernel if args.kernel is not None else sb.default_kernels() + sb.default_fp8_kernels()
    fp8 = any(get_kernel(n).is_fp8 for n in names)
    fp8_cases = sb.scoreboard_fp8_cases(quick=args.quick, captures=args.captures) if fp8 else []
    doc = sb.run_scoreboard(
        args.out,
        kernels=args.kernel,
        devices=args.device,
        cases=cases,
        case_timeout=args.case_timeout,
        warmup_timeout=args.warmup_timeout,
        quiet=args.quiet,
        jobs=args.jobs,
        merge=args.merge,
        save_outputs=args.save_outputs,
        report_root=args.report_root,
        fp8_cases=fp8_cases,
    )
    for r in doc["rows"] + (doc.get("fp8") or {}).get("rows", []):
        acc = r.get("accumulator")
        acc_text = f"  accumulator declared {acc.get('declared')!r}, measured {acc.get('measured')!r}" if acc else ""
        print(
            f"{r['kernel']:>18}@{r['device']:<4} {r['overall']:<15} "
            f"failed: {', '.join(c for c, v in r['checks'].items() if v == 'fail') or '-'}{acc_text}"
        )
    print(f"wrote {args.out}/scoreboard.json, scoreboard.md, scoreboard.png")
    return 0


def _from_checks(args: argparse.Namespace) -> int:
    """The full-suite scoreboard of ``--from-checks`` reports (exit 0)."""
    from conformance.bench.throughput import kernel_throughput
    from conformance.scoreboard import suite

    timer = (lambda name: kernel_throughput(get_kernel(name))) if args.throughput else None
    if timer is not None:
        import torch

        if not torch.cuda.is_available():
            raise Int8confError("--throughput needs CUDA: none is available here")
    doc = suite.build(args.from_checks, timer)
    out = Path(args.out) if args.out is not None else default_out("scoreboard", "")
    suite.write(doc, out)
    for r in doc["rows"]:
        print(f"{r['kernel']:>22} {r['verdict']:<6} failed: {', '.join(r['failed_checks']) or '-'}")
    print(f"wrote {out}/suite.json, suite.md")
    return 0
