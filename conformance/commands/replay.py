"""``int8conf replay DIR [--kernel K] [--inject F] [--device D] [--check CID]``: re-judge a saved reproducer (a
triage minimal case ``<report>/repro/triage-<check>-<case>/``, a case that crashed) with the suite's checks, the
kernel called in a child process (``conformance.suite.replay``). One line per check, the named one first; exit 0 when
the named check (none named: every check) passes, 1 when it fails, 2 on bad input, 3 when the kernel crashed, hung,
raised or could not be called here. The reproducer's ``command.sh`` re-runs the kernel alone, without isolation
(for a debugger)."""

from __future__ import annotations

import argparse
import sys

from reference.command_line import positive_seconds

#: lines of the child's faulthandler stack printed after a crash / timeout
STACK_LINES = 20


def register(subparsers) -> None:
    """Add the ``replay`` subcommand."""
    p = subparsers.add_parser(
        "replay",
        help="re-judge a saved reproducer: does its check still fail?",
        description="Re-judge a reproducer directory with the suite's checks, the kernel called in a child "
        "process; exit 0 the named check passes, 1 it fails, 2 bad input, 3 the kernel crashed, hung or raised.",
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
        type=positive_seconds,
        default=None,
        metavar="S",
        help="seconds before the kernel's process is killed as hung (default: check --timeout's)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the lines; the exit code of ``suite.replay.replay_exit``. Bad input: Int8confError (exit 2)."""
    from conformance.suite.replay import replay, replay_exit, replay_lines, replay_verdict_line

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
    return code
