"""Re-judging a saved reproducer (``int8conf replay DIR``): the case of a ``runtime.repro.save_reproducer`` directory
(a triage minimal case, a case that crashed in ``int8conf check`` or the gate) through the suite's own judgement
(``evaluate.evaluate_fixed``, every per-case check), the kernel called in a child process
(``runtime.pool.IsolatedKernel``, handed ``workers.SUITE_REQUESTS``), so a segfault or a hang is a verdict, not a
dead process. The kernel: case.json's ``kernel`` ref (its injection included) unless another is named; the check
named: ``--check``, else case.json's ``what_happened["check"]`` (a triage reproducer), else none (every check).

Exit codes (:func:`replay_exit`): 0 the named check (none named: every check) passes; 1 it fails again (or the
kernel returned no valid output); 3 the kernel crashed, hung, raised or could not be called here; bad input (no such
directory, no kernel to call, an unknown check id) is an ``Int8confError``, exit 2. :func:`replay_command` spells the
command for a reproducer (the triage's ``replay``).
"""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from conformance.checks.result import CALL_ID, CHECK_NAMES, INTERFACE_ID, CheckResult, Verdict
from conformance.runtime import exit_codes
from conformance.runtime.forking import start_method
from conformance.runtime.pool import CRASHED, OK, TIMED_OUT, IsolatedKernel, KernelRef
from conformance.runtime.repro import load_reproducer
from conformance.suite.evaluate import OWNERSHIP_CHECK, CaseResult, crashed_case, per_case_checks
from conformance.suite.workers import CASE_TIMEOUT_S, SUITE_REQUESTS, outcome_record
from faults.spec import parse_injection
from reference.errors import Int8confError

#: the command a reproducer is replayed with
COMMAND = "int8conf replay"


@dataclass
class Replay:
    """One replayed reproducer: the kernel's ``label``, the ``case`` as case.json names it, the ``check`` named
    (None: every check), the suite's :class:`CaseResult` of it (a crashed case when the child died or hung), the
    resolved kernel ``spec`` and the case's operands ``ops``."""

    label: str
    case: str
    check: Optional[str]
    result: CaseResult
    spec: Any = None
    ops: Any = None


def replay_kernel(info: dict, kernel: Optional[str] = None, inject: Optional[str] = None) -> KernelRef:
    """The kernel to replay with: ``kernel`` (a name ``int8conf check --kernel`` takes) else case.json's ``kernel``
    ref; ``inject`` (``FAULT[:COVERAGE[:SEED]]``) replaces the ref's injection. Raises Int8confError: no kernel (an
    in-memory one was saved and none is named), a bad injection."""
    saved = info.get("kernel")
    if kernel is None and not saved:
        raise Int8confError("this reproducer's kernel was in-memory (no name saved): name one with --kernel")
    ref = KernelRef(kernel) if kernel is not None else KernelRef.from_dict(dict(saved or {}))
    return ref if inject is None else KernelRef(ref.name, parse_injection(inject))


def judged_check(info: dict, spec, check: Optional[str] = None) -> Optional[str]:
    """The check id the replay answers for: ``check`` (any case), else case.json's ``what_happened["check"]``, else
    None (every check). Raises Int8confError for an id that is not one of ``spec``'s per-case checks."""
    cid = check if check is not None else (info.get("what_happened") or {}).get("check")
    if cid is None:
        return None
    known = [CALL_ID, INTERFACE_ID] + [c for c, _ in per_case_checks(spec) + (OWNERSHIP_CHECK,)]
    cid = str(cid).strip().upper()
    if cid not in known:
        what = f"not a per-case check of {spec.name}" if cid in CHECK_NAMES else "no such check"
        src = "--check" if check is not None else "case.json's check"
        raise Int8confError(f"{src} {cid}: {what}; a replay judges {', '.join(known)}")
    return cid


def replay(
    directory,
    kernel: Optional[str] = None,
    device: Optional[str] = None,
    check: Optional[str] = None,
    inject: Optional[str] = None,
    timeout_s: Optional[float] = None,
) -> Replay:
    """Replay reproducer ``directory`` (module docstring): the kernel resolved here (:func:`replay_kernel`), the
    case evaluated in one child forked from this process (a fresh interpreter resolving the ref where this process
    may not fork), killed after ``timeout_s`` seconds (None: ``workers.CASE_TIMEOUT_S``). Never raises for the kernel's failure (a crash or hang is a
    ``crash`` / ``timeout`` CaseResult). Raises Int8confError: no such directory or not a reproducer, no kernel, an
    unknown kernel or check, an evaluation that failed in the harness (e.g. int8 operands for an e4m3 kernel)."""
    d = Path(directory)
    if not d.is_dir():
        what = (
            "not a directory (a reproducer is one: <report>/repro/<case>/)"
            if d.exists()
            else "no such reproducer directory"
        )
        raise Int8confError(f"{directory}: {what}")
    ops, info = load_reproducer(d)
    ref = replay_kernel(info, kernel, inject)
    spec = ref.resolve()
    cid = judged_check(info, spec, check)
    method, timeout_s = start_method(), CASE_TIMEOUT_S if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="int8conf-replay-") as logs:
        target = spec if method == "fork" else ref
        with IsolatedKernel(
            target, [ops], timeout_s, logs, device=device, method=method, handlers=SUITE_REQUESTS
        ) as iso:
            oc = iso.request("evaluate", 0)
    if oc.kind in (CRASHED, TIMED_OUT):
        cr = crashed_case(spec, ops, outcome_record(oc, timeout_s))
    elif oc.kind == OK and isinstance(oc.value, CaseResult):
        cr = oc.value
    else:
        raise Int8confError(f"the case could not be evaluated ({spec.name}): {oc.error}")
    return Replay(ref.label(), str(info.get("case") or cr.case), cid, cr, spec, ops)


def _line(r: CheckResult) -> str:
    return f"{r.check_id} {r.name}: {r.verdict} - {r.summary}"


def replay_lines(rp: Replay) -> list[str]:
    """One line per check, ``C8 declared_contract: fail - <summary>``: the kernel-call / interface failure first
    (when the kernel gave no valid output), then the named check, then the others in report order."""
    checks = rp.result.checks
    first = [c for c in dict.fromkeys((CALL_ID, INTERFACE_ID, rp.check)) if c is not None and c in checks]
    return [_line(checks[c]) for c in first] + [_line(r) for c, r in checks.items() if c not in first]


def replay_exit(rp: Replay) -> int:
    """0 / 1 / 3 (module docstring): 1 when the named check is ``CALL`` (the call itself) and the kernel raised,
    crashed or hung again; else 3 when the case's verdict is ``crash`` / ``timeout`` / ``not run`` or the call
    raised; 1 when the kernel's output failed its interface, the named check failed as the kernel's failure, or
    (none named) any check did; else 0 (a named check ``n/a`` here does not fail)."""
    cr = rp.result
    if rp.check == CALL_ID and (cr.crash is not None or cr.raised is not None):  # the call's failure, again
        return exit_codes.FAILED
    if cr.crash is not None or cr.raised is not None or cr.verdict == Verdict.NOT_RUN:
        return exit_codes.NOT_RUN
    if rp.check == CALL_ID:
        return exit_codes.OK
    if cr.interface is not None:
        return exit_codes.FAILED
    if rp.check is None:
        return exit_codes.FAILED if cr.kernel_failures else exit_codes.OK
    r = cr.checks.get(rp.check)
    return exit_codes.FAILED if r is not None and r.is_kernel_failure else exit_codes.OK


def replay_verdict_line(rp: Replay, code: int) -> str:
    """The closing line: what exit code ``code`` (:func:`replay_exit`) says about the named check (or every one)."""
    cr = rp.result
    if code == exit_codes.NOT_RUN:
        why = cr.crash["line"] if cr.crash is not None else (cr.raised or cr.not_run_reason or cr.error)
        return f"replay: no verdict: {why} (exit {code})"
    if code == exit_codes.FAILED and cr.interface is not None:
        return f"replay: the kernel returned no valid output ({cr.interface}) (exit {code})"
    if rp.check is None:
        return f"replay: {'a check fails' if code == exit_codes.FAILED else 'every check passes'} (exit {code})"
    return f"replay: {rp.check} {'fails' if code == exit_codes.FAILED else 'does not fail'} (exit {code})"


def replay_command(repro_dir, kernel_ref: Optional[dict], check: Optional[str] = None) -> str:
    """The one-line, shell-quoted ``int8conf replay DIR --kernel NAME [--inject F:COV:SEED] [--check CID]`` of
    reproducer ``repro_dir``; ``kernel_ref``: ``KernelRef.to_dict()`` of its kernel (None, an in-memory kernel:
    ``--kernel KERNEL``, for the reader to fill in)."""
    words = [str(repro_dir), "--kernel", str(kernel_ref["name"]) if kernel_ref else "KERNEL"]
    ref = kernel_ref or {}
    if ref.get("fault"):
        words += ["--inject", f"{ref['fault']}:{ref.get('coverage', 'all')}:{ref.get('seed', 0)}"]
    if check:
        words += ["--check", check]
    return f"{COMMAND} {shlex.join(words)}"
