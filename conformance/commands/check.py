"""``int8conf check``: the conformance suite (``conformance.suite.run.run_suite``, the same plan as
``pytest --kernel=NAME``) for each kernel, a summary table per kernel and the report paths.
Progress goes to stderr (``conformance.runtime.progress``); ``--quiet`` silences it.

Every kernel call runs in a forked child (``conformance.suite.workers.Containment``, ``--timeout``): a crash or
a hang fails its case (``crash`` / ``timeout``, a reproducer in ``<report>/repro/``) and the run goes on.

Exit codes (:data:`EXIT_CODES`): 0 conformant; 1 not conformant (a crash, a timeout or a raise included, on every
case too); 2 bad input; 3 not run / inconclusive (the kernel could not be called here on any case); 130 interrupted (the report of what
finished is written first, noted "partial run"). ``--inject FAULT[:COVERAGE[:SEED]]`` checks
``faults.inject(kernel, ...)`` instead (exit 1 = the suite caught the fault); for F6 / F7 the cases
are prepared first (``faults.prepare_case``); reports go to ``<kernel>_<fault>_<coverage>_s<seed>``.

After every kernel ran, for each failing run (an ``--inject`` one too: the fault's own class should lead the
minimal case's consistent classes), unless ``--no-triage``:
``conformance.triage.run.triage_result`` on the first failing case of each failing per-case check (each search in
a child process, a crash or hang of it a ``skipped`` entry; at most about 10 % of the run's time), its result in ``ConformanceResult.triage`` and the report (rewritten) under
"Where the bug lives", a line per check on stdout, the minimal case's reproducer in
``<report>/repro/triage-<check>-<case>/``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from rich.table import Table

from conformance.commands.options import add_deprecated_alias
from conformance.runtime import exit_codes
from conformance.runtime.output_dirs import command_root
from reference.command_line import call_seconds, make_console, non_negative_int, positive_int, remove_empty_dirs
from reference.errors import CaptureError, Int8confError

#: ``int8conf check`` exit codes: the names of ``conformance.runtime.exit_codes`` in check's words.
EXIT_CONFORMANT, EXIT_NOT_CONFORMANT = exit_codes.OK, exit_codes.FAILED
EXIT_BAD_INPUT, EXIT_NOT_RUN = exit_codes.BAD_INPUT, exit_codes.NOT_RUN
EXIT_CODES = {
    EXIT_CONFORMANT: "conformant",
    EXIT_NOT_CONFORMANT: "not conformant",
    EXIT_BAD_INPUT: "bad input",
    EXIT_NOT_RUN: "not run / inconclusive",
}


def register(subparsers) -> None:
    """Add the ``check`` subcommand."""
    from faults.spec import fault_choices

    p = subparsers.add_parser(
        "check",
        help="run the conformance suite for a kernel and write its report",
        description="Run the conformance checks (C1-C17 as the kernel's kind takes them, the serving checks C13-C15 "
        "on CUDA, and the engine-hash oracle E1 when available) for a kernel; "
        "write int8conf-reports/check/<kernel label>/conformance.json and .md (with --out DIR "
        "ending in the kernel's label, DIR itself: --out reports/h200/triton -> "
        "reports/h200/triton/conformance.json).",
        epilog="exit codes: 0 conformant; 1 not conformant; 2 bad input (unknown kernel, bad "
        "option, unavailable device, unusable captures or --out); 3 not run / "
        "inconclusive (the kernel could not be called here on any case: its devices, its shape constraints)",
    )
    p.add_argument(
        "--kernel",
        action="append",
        required=True,
        metavar="NAME",
        help="kernel: built-in (cpu, int_mm, triton; FP8: fp8-cpu, torch-fp8, torch-fp8-fast, triton-fp8), 'all', pkg.module:function, "
        "or an int8conf.kernels entry point (repeatable)",
    )
    p.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT[:COVERAGE[:SEED]]",
        help=f"check the kernel with a fault injected (repeatable): FAULT is {fault_choices()}, "
        "COVERAGE one, 1%% or all (default all), SEED an integer (default 0); "
        "e.g. F4:all, output_truncation:1%%; exit 1 = the suite caught it",
    )
    p.add_argument(
        "--against",
        metavar="OTHER",
        default=None,
        help="also compare outputs bit for bit with kernel OTHER (interchangeability)",
    )
    p.add_argument(
        "--out",
        default=str(command_root("check")),
        metavar="DIR",
        help="reports root: each kernel's report goes to DIR/<kernel label>/ "
        "(cpu, cpu_F4_all_s0 with --inject F4), or to DIR itself when DIR's "
        "last component already is that label (default: int8conf-reports/check; the committed "
        "examples: --out reports/check)",
    )
    p.add_argument(
        "--examples",
        type=non_negative_int,
        default=25,
        metavar="N",
        help="hypothesis examples in the property test (default 25; 0 = none)",
    )
    p.add_argument("--no-model", action="store_true", help="skip model-level checks (C7 token_flip, E1 engine_hash)")
    p.add_argument(
        "--no-tile-edges",
        action="store_true",
        help="skip the tile-edge shapes and the trigger-condition case families "
        "(quick runs; the default suite includes both)",
    )
    add_deprecated_alias(p, "--no-sweep", "--no-tile-edges", "no_tile_edges", flag=True)
    p.add_argument(
        "--no-large-cases",
        action="store_true",
        help="skip the large native-only cases (outputs past 2^23 elements, the largest covering rows); a CPU-only "
        "kernel runs them by default, a GPU kernel on its GPU; quick runs",
    )
    p.add_argument("--no-captures", action="store_true", help="skip layer-capture replay")
    p.add_argument(
        "--no-serving",
        action="store_true",
        help="skip the serving checks C13 graph_replay, C14 compile, C15 streams_devices (CUDA kernels; the "
        "default suite includes them)",
    )
    p.add_argument(
        "--no-triage",
        action="store_true",
        help="after a failing run, do not search where each failing check's first failing case switches on "
        "(by default: M / N / K boundaries, categorical flips, the minimal case and its reproducer, in the "
        "report's 'Where the bug lives'; about 10%% of the run's time at most)",
    )
    p.add_argument(
        "--captures",
        metavar="DIR",
        default=None,
        help="replay this capture directory (default: the default model's captures)",
    )
    p.add_argument(
        "--model",
        metavar="DIR",
        default=None,
        help="a Qwen3 model directory: without --captures, its layers are captured into the artifact cache (shared "
        "with sweep --model; built once) and replayed; with --captures, the captures' parent when it moved",
    )
    p.add_argument("--device", default=None, help="device for kernel runs: cpu, cuda, cuda:N (default: auto)")
    p.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
        default=None,
        metavar="N",
        help="worker processes for the fixed cases, forked from this one (same results; default: one per core, "
        "at most 8, or 6 with --device cuda; 1 = one child process for every step; --against: one child process)",
    )
    p.add_argument(
        "--timeout",
        type=call_seconds,
        default=600.0,
        metavar="S",
        help="seconds a case, a property example, C9 or C11 may take before its process is killed (C7, E1: at "
        "least 1800); every kernel call runs in a child process, so a crash or a hang fails that case (crash / "
        "timeout, with the signal or the stack and a reproducer in <report>/repro/) and the run goes on; after a "
        "first hung case each later case gets max(60, 20 x the slowest case answered) seconds, at most S "
        "(default 600)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="torch CPU threads for the kernel runs, at most the cores this process "
        "may use (default: those cores, or torch's own choice when "
        "OMP_NUM_THREADS is set; INT8CONF_WORKER_THREADS=N sets it too)",
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress display (by default a live status on a terminal, "
        "plain progress lines on stderr otherwise: CI logs, pipes)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the suite for every requested kernel; returns the exit code. A run refused for bad input part-way (a
    model or capture directory found unusable) leaves no empty report folder behind."""
    made: list = []
    try:
        return _run(args, made)
    except Int8confError:
        remove_empty_dirs(made)
        raise


def _run(args: argparse.Namespace, made: list) -> int:
    """:func:`run`'s body; ``made``: filled with the report folders it creates (deepest first)."""
    # the command's body (the suite stack, faults) loads here, not when the CLI starts
    from conformance.cases.captures import require_capture_dir
    from conformance.checks.result import Verdict
    from conformance.kernels.runner import validate_device
    from conformance.runtime.progress import suite_progress
    from conformance.runtime.threads import set_torch_threads
    from conformance.suite.coverage import invocation
    from conformance.suite.report import triage_summary
    from conformance.suite.run import SuiteInterrupted, cli_capture_message, run_suite
    from conformance.suite.setup import (
        CaseSource,
        RunCases,
        against_kernel,
        kernel_report_dir,
        kernel_runs,
        make_report_dirs,
        report_root,
    )
    from conformance.suite.workers import default_jobs
    from faults import annotate_result

    validate_device(args.device)
    set_torch_threads(args.threads)
    if not str(args.out).strip():  # Path("") is ".": reports would land in the cwd unasked
        raise Int8confError(f"--out {args.out!r} is empty: give a reports directory")
    if args.captures is not None and args.no_captures:
        raise Int8confError("--captures DIR and --no-captures contradict each other: give one of them")
    if args.captures is not None:  # refused before any folder is made
        require_capture_dir(args.captures)
    runs = kernel_runs(args.kernel, args.inject)
    other = against_kernel(args.against, [s for s, _ in runs])
    made += make_report_dirs(args.out, [s.name for s, _ in runs])  # every report folder, before any case runs
    source = CaseSource(not args.no_captures, not args.no_tile_edges, args.captures, args.model)
    cases_of = RunCases(source, args.device, progress=None if args.quiet else print)
    con, err = make_console(), make_console(stderr=True)
    ok, not_run = True, False
    pending: list = []  # (spec, result, cases, report dir) of the failing runs to triage
    for spec, inj in runs:
        with suite_progress(spec.name, err, quiet=args.quiet) as progress:
            try:
                jobs = args.jobs or default_jobs(args.device)
                kdir = kernel_report_dir(args.out, spec.name)
                state = _state(args, spec, inj, other, cases_of)
                res = run_suite(
                    state,
                    args.examples,
                    not args.no_model,
                    progress,
                    invocation(args),
                    jobs,
                    timeout_s=args.timeout,
                    repro_dir=kdir / "repro",
                )
            except CaptureError as e:
                raise CaptureError(cli_capture_message(e)) from None
            except SuiteInterrupted as stop:  # write what finished, then stop (exit 130)
                jp, mp = _write(stop.result, report_root(args.out, spec.name))
                r = stop.result
                so_far = r.overall.get("summary") if r.verdict == Verdict.FAIL else "no failure yet (not a PASS)"
                err.print(
                    f"{spec.name}: {r.partial['note']}\n{spec.name}: so far: {so_far}\nreport: {jp}\nreport: {mp}",
                    markup=False,
                    soft_wrap=True,
                )
                raise
        if inj is not None:
            annotate_result(res, spec)
            con.print(res.notes[0], markup=False)
        jp, mp = _write(res, report_root(args.out, spec.name))
        if not args.no_triage and res.verdict == Verdict.FAIL:
            pending.append((spec, res, state.cases, kdir, (jp, mp)))
        _print_summary(con, spec.name, res)
        con.print(f"report: {jp}\nreport: {mp}", markup=False, soft_wrap=True)
        if res.verdict == Verdict.NOT_RUN:
            not_run = True
        else:
            ok = ok and res.conformant
    # after every kernel's run (each report already on disk): triage's searches run in children of this process,
    # which stays fit to fork the next kernel's contained children (no CUDA context of a kernel here)
    for spec, res, cases, kdir, paths in pending:
        res.triage = _triage(spec, res, cases, kdir / "repro", args.device, err, args.quiet)
        if res.triage:
            _add_triage(paths, res.triage)
            for line in triage_summary(res.triage):
                con.print(f"{spec.name}: {line}", markup=False, soft_wrap=True)
    if not ok:
        return EXIT_NOT_CONFORMANT
    return EXIT_NOT_RUN if not_run else EXIT_CONFORMANT


def _state(args, spec, inj, other, cases_of):
    """The suite's ``SuiteState`` for one kernel run (its cases from the run's ``RunCases``)."""
    from conformance.suite.plan import reduced_suite
    from conformance.suite.run import SuiteState

    t0 = time.perf_counter()
    cases, cap = cases_of.for_kernel(spec, inj)
    serving = not args.no_serving
    skipped = reduced_suite(
        not args.no_captures,
        not args.no_tile_edges,
        args.examples,
        not args.no_model,
        spec.operands,
        serving_checks=serving,
        kind=spec.kind,
    )
    return SuiteState(
        spec,
        cases,
        cap,
        other,
        args.device,
        t0=t0,
        skipped=skipped,
        serving_checks=serving,
        large_cases=not args.no_large_cases,
    )


def _triage(spec, res, cases, repro_dir, device, err, quiet: bool) -> dict:
    """``conformance.triage.run.triage_result`` of a failing run (a line on stderr unless ``quiet``)."""
    from conformance.triage.run import triage_result

    if not quiet:
        err.print(f"{spec.name}: triage: where the failing checks switch on", markup=False)
    tri = triage_result(spec, res, cases, repro_dir=repro_dir, device=device)
    if not tri and not quiet:  # every failure a hang or a crash (their reproducers), or nothing triage searches
        err.print(f"{spec.name}: triage: nothing to search (the failures are hangs, crashes or run-level checks)")
    return tri


def _print_summary(con, name: str, res) -> None:
    from conformance.checks.result import Verdict
    from conformance.suite.report import (
        CONSOLE_CRASHES,
        accumulator_lines,
        block_lines,
        case_count,
        crash_lines,
        fault_signatures,
        pair_difference_line,
    )

    head = res.overall.get("headline") or res.verdict.upper()
    t = Table(title=f"{name} ({res.environment.get('execution')}, {res.elapsed_s:.1f} s): {case_count(res.cases)}")
    for col in ("id", "check", "verdict"):
        t.add_column(col)
    t.add_column("summary", overflow="fold")
    for c in res.checks:
        t.add_row(c.check_id, c.name, verdict_markup(c.verdict, c.evidence), c.summary)
    con.print(t)
    if res.verdict == Verdict.NOT_RUN:
        con.print(f"{name}: NOT RUN - inconclusive, nothing was verified", style="bold yellow")
    for line in crash_lines(res.overall, CONSOLE_CRASHES):
        con.print(line, markup=False, soft_wrap=True, style="bold red")
    con.print(res.overall["summary"], markup=False)
    # the verdict line, once (below the table, where a long table leaves it in view)
    style = "bold yellow" if res.overall.get("reduced_suite") else None
    con.print(f"{name}: overall {head}", markup=False, soft_wrap=True, style=style)
    for line in signature_summary(fault_signatures(res)):
        con.print(line, markup=False, soft_wrap=True)
    con.print(f"captures: {res.captures['note']}", markup=False)
    for line in block_lines(res.kernel) + accumulator_lines(getattr(res, "fp8", None)):
        con.print(line, markup=False, soft_wrap=True)
    if res.pairwise:
        con.print(f"pairwise vs {res.pairwise['other']}: {res.pairwise['summary']}", markup=False)
        line = pair_difference_line(res.pairwise)
        if line:
            con.print(line.replace("`", ""), markup=False)


def _add_triage(paths, triage: dict) -> None:
    """``add_triage(*paths, triage)`` (the written report gains its triage); an OSError becomes an Int8confError."""
    from conformance.suite.report import add_triage

    try:
        add_triage(*paths, triage)
    except OSError as e:
        raise Int8confError(f"cannot add the triage to {paths[0]}: {e.strerror or type(e).__name__}") from None


def _write(res, out):
    """``write_reports(res, out)``. Where ``out`` became unwritable during the run, the reports go to a fresh
    ``int8conf-reports-*`` folder of the temporary directory instead and an Int8confError names both (the run's
    work is kept); one that fails there too names the first path only."""
    from conformance.suite.report import write_reports

    try:
        return write_reports(res, out)
    except OSError as e:
        why = f"{e.strerror or type(e).__name__}{' (' + str(e.filename) + ')' if e.filename else ''}"
    try:
        kept = write_reports(res, tempfile.mkdtemp(prefix="int8conf-reports-"))
    except OSError:
        raise Int8confError(f"cannot write report under {out}: {why}") from None
    raise Int8confError(
        f"cannot write report under {out}: {why}; the run's reports were written to {kept[0]} and {kept[1]} instead"
    )


#: at most this many signature lines in the terminal summary (conformance.md has all)
MAX_SIGNATURE_LINES = 4


def signature_summary(lines: list, limit: int = MAX_SIGNATURE_LINES) -> list[str]:
    """``failure signature: <line>`` for at most ``limit`` fault-signature lines, then one line
    counting the rest."""
    out = [f"failure signature: {x}" for x in lines[:limit]]
    if len(lines) > limit:
        out.append(f"failure signature: {len(lines) - limit} more in conformance.md")
    return out


def verdict_markup(verdict: str, evidence: dict) -> str:
    """The console table's verdict cell (rich markup), labelled as in conformance.md."""
    from conformance.checks.result import Verdict
    from conformance.suite.report import is_precondition_case, is_precondition_failure, verdict_label

    if is_precondition_failure(verdict, evidence):
        style = "cyan" if is_precondition_case(verdict, evidence) else "yellow"
        return f"[{style}]{verdict_label(verdict, evidence)}[/]"
    style = {
        Verdict.PASS: "green",
        Verdict.FAIL: "bold red",
        Verdict.NOT_APPLICABLE: "dim",
        Verdict.NOT_RUN: "bold yellow",
    }
    return f"[{style.get(verdict, 'bold')}]{verdict}[/]"
