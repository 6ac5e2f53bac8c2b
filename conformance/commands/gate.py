"""``int8conf gate``: may a candidate kernel replace an incumbent? (CLI)

Thin wrapper over ``conformance.gate.run.run_gate``: parses options, loads
the policy, runs the gate, writes ``<out>/gate.json``, ``gate.md`` (a
pull-request comment) and ``junit.xml`` (``<out>`` by default
``int8conf-reports/gate/<candidate>-vs-<incumbent>``), prints the summary. A blocked candidate's failing
checks are triaged (``GateSession.triage``, unless ``--no-triage``): a line per check on stdout.

Exit codes (``conformance.gate.status``): 0 pass (warnings the policy allows
included); 1 blocked by the policy; 2 not comparable / bad input (unknown
kernel, bad policy file, stale or incomparable baseline -- with the reasons);
4 internal error of int8conf (``conformance.runtime.exit_codes``: one table for every command).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from conformance.commands.options import add_deprecated_alias
from conformance.gate.status import EXIT_BLOCKED, EXIT_INTERNAL, EXIT_NOT_COMPARABLE, EXIT_PASS
from conformance.runtime.output_dirs import default_out, pair_label
from reference.command_line import call_seconds, positive_int, positive_seconds, removed_if_refused, seed_int
from reference.errors import Int8confError, first_line


def register(subparsers) -> None:
    """Add the ``gate`` subcommand."""
    from faults.spec import fault_choices

    p = subparsers.add_parser(
        "gate",
        help="decide whether a candidate kernel may replace an incumbent (CI gate)",
        description="Run a candidate kernel and an incumbent (or read the incumbent's stored "
        "conformance report) on the same cases, each kernel isolated in a child "
        "process with a timeout, and decide per case under a YAML policy: pass, "
        "warn, fail, not-supported, crash, timeout. Writes gate.json, gate.md and "
        "junit.xml.",
        epilog="exit codes (the same table for every command, README.md): 0 pass; 1 blocked by policy; "
        "2 not comparable / bad input; 4 internal error; 130 stopped",
    )
    p.add_argument(
        "--candidate",
        required=True,
        metavar="KERNEL",
        help="the new kernel: built-in, pkg.module:function, or entry point",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--incumbent", metavar="KERNEL", help="the kernel it replaces (run now)")
    src.add_argument(
        "--baseline", metavar="REPORT", help="the incumbent's stored conformance.json instead of re-running it"
    )
    p.add_argument(
        "--policy",
        metavar="FILE|NAME",
        help="policy YAML, or a shipped policy by name: bit-identity, one-spacing, one-spacing-everywhere, "
        "with-expectations (conformance/gate/policies/; allow: [contract_difference] accepts "
        "a difference of any size where both kernels are bit-exact to their own "
        "declared contracts, C8; default: bit identity everywhere, no token "
        "flips, engine hash must not move)",
    )
    p.add_argument(
        "--inject",
        metavar="FAULT[:COVERAGE[:SEED]]",
        default=None,
        help=f"wrap the candidate with a fault (faults.inject; self-tests, demos): FAULT {fault_choices()}, "
        "COVERAGE one, 1%% or all (default all), SEED 0 .. 2**63-1 (default 0); as check --inject",
    )
    add_deprecated_alias(p, "--fault", "--inject", "fault", metavar="F")
    add_deprecated_alias(p, "--fault-coverage", "--inject F:COVERAGE", "fault_coverage", choices=("one", "1%", "all"))
    add_deprecated_alias(p, "--fault-seed", "--inject F:COVERAGE:SEED", "fault_seed", type=seed_int)
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where gate.json, gate.md, junit.xml, repro/ and logs/ go (default "
        f"{default_out('gate', pair_label('<candidate>', '<incumbent>'))}, the candidate's label with "
        "its --inject, the incumbent's or --baseline report's kernel)",
    )
    p.add_argument(
        "--timeout",
        type=call_seconds,
        default=60.0,
        metavar="S",
        help="seconds one case may take per kernel before its process is killed (default 60)",
    )
    p.add_argument(
        "--model-timeout",
        type=positive_seconds,
        default=1800.0,
        metavar="S",
        help="the same for one model-level check C7 / E1 (default 1800)",
    )
    p.add_argument("--no-model", action="store_true", help="skip C7 token_flip and E1 engine_hash")
    p.add_argument(
        "--no-serving",
        action="store_true",
        help="skip the serving checks C13 graph_replay, C14 compile, C15 streams_devices (by default run on both "
        "kernels; a candidate failing one blocks unless the incumbent fails it too; n/a, e.g. without CUDA, never "
        "blocks)",
    )
    p.add_argument(
        "--no-tile-edges", action="store_true", help="skip the tile-edge shapes and the trigger-condition case families"
    )
    add_deprecated_alias(p, "--no-sweep", "--no-tile-edges", "no_tile_edges", flag=True)
    p.add_argument("--no-captures", action="store_true", help="skip layer-capture replay")
    p.add_argument(
        "--no-triage",
        action="store_true",
        help="for a blocked candidate, do not search where each check it fails switches on (by default, as check "
        "does: M / N / K boundaries, categorical flips, the minimal case and its reproducer, in gate.json's "
        "candidate.triage and gate.md's 'Where the bug lives'; about 10%% of the gate's time at most)",
    )
    p.add_argument(
        "--captures", metavar="DIR", default=None, help="replay this capture directory (default: the default model's)"
    )
    p.add_argument(
        "--model", metavar="DIR", default=None, help="parent model of --captures, when it moved since capture"
    )
    p.add_argument(
        "--max-capture-layers",
        type=positive_int,
        default=None,
        metavar="N",
        help="replay only the first N layers per scale mode",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the gate; returns the exit code (module docstring)."""
    try:
        return _run(args)
    except Int8confError:
        raise  # the CLI prints the line and exits 2 (not comparable / bad input)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 -- anything else is int8conf's own bug: exit 4
        line = first_line(e, None)
        print(
            f"int8conf: internal error: {type(e).__name__}: {line} (please report it; traceback below)", file=sys.stderr
        )
        traceback.print_exc()
        return EXIT_INTERNAL


def _run(args: argparse.Namespace) -> int:
    if args.captures is not None and args.no_captures:
        raise Int8confError("--captures DIR and --no-captures contradict each other: give one of them")
    if args.model is not None and args.captures is None:
        raise Int8confError("--model DIR applies to --captures DIR; give --captures too")
    if args.out is not None and not str(args.out).strip():
        raise Int8confError(f"--out {args.out!r} is empty: give a directory")
    from conformance.gate.options import check_out_dir

    out = out_dir(args)
    # a refusal (unusable --out, bad policy, unknown kernel, ...) leaves no folder behind
    with removed_if_refused(out / "logs"):
        check_out_dir(out)
        return _gate(args, out)


def injection_args(args: argparse.Namespace):
    """The candidate's ``Injection`` or None (``gate.options.candidate_injection``): ``--inject``, else the
    deprecated ``--fault`` / ``--fault-coverage`` / ``--fault-seed``. Raises FaultError (one line)."""
    from conformance.gate.options import candidate_injection

    return candidate_injection(
        getattr(args, "inject", None),
        getattr(args, "fault", None),
        getattr(args, "fault_coverage", "all"),
        getattr(args, "fault_seed", 0),
    )


def out_dir(args: argparse.Namespace) -> Path:
    """``--out``, else ``int8conf-reports/gate/<candidate>-vs-<incumbent>`` (with ``--baseline``, the kernel
    its report names). Raises Int8confError: unknown ``--inject``, unreadable ``--baseline``."""
    from conformance.gate.options import default_gate_out

    if args.out is not None:
        return Path(args.out)
    return default_gate_out(args.candidate, injection_args(args), args.incumbent, args.baseline)


def _gate(args: argparse.Namespace, out: Path) -> int:
    """Load the policy, run the gate into ``out``, write and print the reports."""
    from conformance.gate.policy import default_policy, load_policy
    from conformance.gate.report import not_comparable_doc, to_json_dict, write_gate_reports
    from conformance.gate.run import GateInterrupted, GateOptions, NotComparable, run_gate
    from conformance.runtime.pool import KernelRef
    from conformance.suite.report import triage_summary

    policy = load_policy(args.policy) if args.policy else default_policy()
    cand = KernelRef(args.candidate, injection_args(args))
    inc = KernelRef(args.incumbent) if args.incumbent else None
    opts = GateOptions(
        include_captures=not args.no_captures,
        include_tile_edges=not args.no_tile_edges,
        max_capture_layers=args.max_capture_layers,
        capture_dir=args.captures,
        model_dir=args.model,
        model_checks=not args.no_model,
        serving_checks=not args.no_serving,
        device=args.device,
        timeout_s=args.timeout,
        model_timeout_s=args.model_timeout,
        triage=not args.no_triage,
    )
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    try:
        res = run_gate(cand, inc, args.baseline, policy, opts, out, progress=say)
    except GateInterrupted as stop:  # write what was decided, then stop (exit 130)
        paths = write_gate_reports(to_json_dict(stop.result), out)
        # a stop after the last decision (while the children shut down) leaves a complete report
        note = stop.result.partial.get("note") or "interrupted after every case was decided"
        print(f"int8conf gate: {note}\nreport: {paths['md']}\nreport: {paths['json']}", file=sys.stderr)
        raise
    except NotComparable as e:
        doc = not_comparable_doc(cand.label(), e.path, e.reasons, policy.to_dict())
        paths = write_gate_reports(doc, out)
        head = f"int8conf gate: NOT COMPARABLE: baseline {e.path}"
        if len(e.reasons) == 1:  # one reason: one line
            print(f"{head}: {e.reasons[0]}", file=sys.stderr)
        else:
            print(head, file=sys.stderr)
            for r in e.reasons:
                print(f"  - {r}", file=sys.stderr)
        print(f"report: {paths['md']}", file=sys.stderr)
        return EXIT_NOT_COMPARABLE
    doc = to_json_dict(res)
    paths = write_gate_reports(doc, out)
    print(doc["overall"]["summary"])
    for d in res.cases + res.serving + res.model:
        if d.blocking:
            why = "; ".join(r["text"] for r in d.reasons if r["blocking"])
            print(f"  {d.status.upper():13} {d.item}: {why[:240]}")
    for line in triage_summary(res.candidate.get("triage") or {}):
        print(f"  {line}")
    for e in doc["overall"].get("unused_expectations") or []:
        print(f"  unused expectation: {e['check']} on {e.get('case') or e.get('layer') or 'model'} ({e['owner']})")
    print(f"report: {paths['md']}\nreport: {paths['json']}\nreport: {paths['junit']}")
    return EXIT_BLOCKED if res.overall["verdict"] == "blocked" else EXIT_PASS
