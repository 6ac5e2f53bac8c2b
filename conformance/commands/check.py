"""``int8conf check``: the conformance suite from the command line.

Same suite as ``pytest --kernel=NAME`` (``conformance.suite.run_conformance``):
synthetic cases, the shape sweep, layer captures in both scale modes, the
hypothesis property test, C7 / E1 when available, optional pairwise
comparison. Prints a summary table per kernel and the report paths; exit 0
when every kernel is conformant, 1 otherwise.
"""

from __future__ import annotations

import argparse
import warnings


def register(subparsers) -> None:
    """Add the ``check`` subcommand."""
    p = subparsers.add_parser(
        "check", help="run the conformance suite for a kernel and write its report",
        description="Run checks C1-C8 (and the engine-hash oracle when available) for a kernel; "
                    "write <out>/<kernel>/conformance.json and .md.")
    p.add_argument("--kernel", action="append", required=True, metavar="NAME",
                   help="kernel: built-in (cpu, int_mm, triton), 'all', pkg.module:function, "
                        "or an int8conf.kernels entry point (repeatable)")
    p.add_argument("--against", metavar="OTHER", default=None,
                   help="also compare outputs bit for bit with kernel OTHER (interchangeability)")
    p.add_argument("--out", default="reports", metavar="DIR",
                   help="reports directory (default: reports)")
    p.add_argument("--examples", type=int, default=25, metavar="N",
                   help="hypothesis examples in the property test (default 25; 0 = none)")
    p.add_argument("--no-model", action="store_true",
                   help="skip model-level checks (C7 token_flip, E1 engine_hash)")
    p.add_argument("--no-sweep", action="store_true", help="skip the shape sweep")
    p.add_argument("--no-captures", action="store_true", help="skip layer-capture replay")
    p.add_argument("--captures", metavar="DIR", default=None,
                   help="replay this capture directory (default: the default model's captures)")
    p.add_argument("--device", default=None, help="device for kernel runs (default: auto)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the suite for every requested kernel; returns the exit code."""
    from rich.console import Console
    from rich.table import Table

    from conformance.kernels.registry import get_kernel, resolve_kernels
    from conformance.report import write_reports
    from conformance.suite import run_conformance

    specs = resolve_kernels(args.kernel)
    other = get_kernel(args.against) if args.against else None
    con = Console()
    err = Console(stderr=True)
    ok = True
    for spec in specs:
        with err.status(f"checking {spec.name}") as status, warnings.catch_warnings():
            # numpy overflow warnings from inside the Triton interpreter (huge
            # scales in the property test); the outputs are compared anyway
            warnings.filterwarnings("ignore", category=RuntimeWarning,
                                    module=r"triton\.runtime\.interpreter")
            res = run_conformance(
                spec, other, include_captures=not args.no_captures,
                include_sweep=not args.no_sweep, property_examples=args.examples,
                model_checks=not args.no_model, capture_dir=args.captures, device=args.device,
                progress=None if args.quiet else status.update)
        jp, mp = write_reports(res, args.out)
        t = Table(title=f"{spec.name}: overall {res.verdict.upper()} "
                        f"({res.environment.get('execution')}, {len(res.cases)} cases, "
                        f"{res.elapsed_s:.1f} s)")
        t.add_column("id")
        t.add_column("check")
        t.add_column("verdict")
        t.add_column("summary", overflow="fold")
        style = {"pass": "green", "fail": "bold red", "n/a": "dim"}
        for c in res.checks:
            t.add_row(c.check_id, c.name, f"[{style[c.verdict]}]{c.verdict}[/]", c.summary)
        con.print(t)
        con.print(res.overall["summary"], markup=False)
        con.print(f"captures: {res.captures['note']}", markup=False)
        if res.pairwise:
            con.print(f"pairwise vs {res.pairwise['other']}: {res.pairwise['summary']}",
                      markup=False)
        con.print(f"report: {jp}\nreport: {mp}", markup=False)
        ok = ok and res.conformant
    return 0 if ok else 1
