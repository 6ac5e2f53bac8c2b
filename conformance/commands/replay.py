"""``int8conf replay DIR [--kernel K] [--inject F] [--device D] [--check CID] [--triage]``: re-judge a saved
reproducer (a triage minimal case ``<report>/repro/triage-<check>-<case>/``, a case that crashed) with the suite's
checks, the kernel called in a child process (``conformance.suite.replay``). One line per check, the named one first; exit 0 when
the named check (none named: every check) passes, 1 when it fails, 2 on bad input, 3 when the kernel crashed, hung,
raised or could not be called here. The reproducer's ``command.sh`` re-runs the kernel alone, without isolation
(for a debugger). ``--triage``: when it fails, the boundary search of ``int8conf check`` on this case, on demand
(``conformance.triage.run.triage_cases``; the record in ``DIR/triage/triage.json``)."""

from __future__ import annotations

import argparse
import sys

from reference.command_line import call_seconds

#: lines of the child's faulthandler stack printed after a crash / timeout
STACK_LINES = 20


def register(subparsers) -> None:
    """Add the ``replay`` subcommand."""
    p = subparsers.add_parser(
        "replay",
        help="re-judge a saved reproducer: does its check still fail?",
        description="Re-judge a reproducer directory with the suite's checks, the kernel called in a child "
        "process; exit 0 the named check passes, 1 it fails, 2 bad input, 3 the kernel crashed, hung or raised "
        "(with --check CALL, the call's own check: 1).",
    )
    p.add_argument("dir", metavar="DIR", help="a reproducer directory (operands.safetensors, case.json)")
    p.add_argument(
        "--kernel",
        default=None,
        metavar="NAME",
        help="replay with this kernel, no fault injected unless --inject (default: the one case.json names)",
    )
    p.add_argument(
        "--inject", default=None, metavar="FAULT[:COVERAGE[:SEED]]", help="with this fault injected into the kernel"
    )
    p.add_argument("--device", default=None, help="device for the kernel call: cpu, cuda, cuda:N (default: auto)")
    p.add_argument(
        "--check", default=None, metavar="CID", help="the check the exit code answers for (default: case.json's)"
    )
    p.add_argument(
        "--timeout",
        type=call_seconds,
        default=None,
        metavar="S",
        help="seconds before the kernel's process is killed as hung (default: check --timeout's)",
    )
    p.add_argument(
        "--triage",
        action="store_true",
        help="when it fails, also search where: M / N / K boundaries, flips, the minimal case (as check's "
        "'Where the bug lives'; its reproducer under DIR/triage/)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the lines; the exit code of ``suite.replay.replay_exit``. Bad input: Int8confError (exit 2)."""
    from conformance.kernels.runner import validate_device
    from conformance.suite.replay import replay, replay_exit, replay_lines, replay_verdict_line

    validate_device(args.device)  # CUDA asked for where there is none: bad input (exit 2), as check and gate say
    rp = replay(args.dir, args.kernel, args.device, args.check, args.inject, args.timeout)
    print(f"replay: {rp.label} on {rp.case} (M,K,N={rp.result.shape})", flush=True)
    for line in replay_lines(rp):
        print(line)
    code = replay_exit(rp)
    crash = rp.result.crash
    if crash is not None:
        for line in crash.get("log_tail", [])[:STACK_LINES]:
            print(f"  | {line}", file=sys.stderr)
    print(replay_verdict_line(rp, code), flush=True)
    if args.triage and code == 1:
        _triage(rp, args)
    return code


def _triage(rp, args: argparse.Namespace) -> None:
    """The boundary search on the replayed case for the check it answers for (else its first failing one), at
    the most calls per dimension; a line per check (``suite.report.triage_summary``), the record in
    ``DIR/triage/triage.json``."""
    from pathlib import Path

    from conformance.cases import by_case_id
    from conformance.suite.report import triage_summary
    from conformance.triage.run import ON_DEMAND_RUN_S, first_failing, triage_cases
    from reference.fileio import atomic_write_json

    failed = [cid for cid, r in rp.result.checks.items() if r.is_kernel_failure]
    todo = first_failing([(rp.result.case, [rp.check] if rp.check in failed else failed)])
    if not todo:
        print("replay: triage: no triaged check failed (a kernel-level check?)")
        return
    out = Path(args.dir) / "triage"
    tri = triage_cases(rp.spec, todo, by_case_id([rp.ops]), ON_DEMAND_RUN_S, {}, out, args.device, share=1.0)
    atomic_write_json(out / "triage.json", tri)
    for line in triage_summary(tri):
        print(f"replay: {line}")
    print(f"replay: triage record: {out / 'triage.json'}", flush=True)
