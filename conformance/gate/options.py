"""What the gate's two front doors (``int8conf gate`` and ``pytest --gate-candidate``) take from their options: the
candidate's injection, the default report folder, and the folder checks made before any kernel runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from conformance.gate.report import GATE_REPORT_FILES
from conformance.runtime.output_dirs import default_out, kernel_label, pair_label
from conformance.suite.report import read_report
from faults import parse_injection
from faults.spec import Injection, make_injection
from reference.command_line import ensure_out_dir


def candidate_injection(
    inject: Optional[str], fault: Optional[str] = None, coverage: str = "all", seed: int = 0
) -> Optional[Injection]:
    """The candidate's validated injection: ``inject`` (``FAULT[:COVERAGE[:SEED]]``), else the deprecated
    ``--fault`` / ``--fault-coverage`` / ``--fault-seed`` values; None without a fault. Raises FaultError (one
    line)."""
    if inject:
        return parse_injection(inject)
    return make_injection(fault, coverage, seed) if fault else None


def default_gate_out(candidate: str, injection: Optional[Injection], incumbent, baseline) -> Path:
    """``int8conf-reports/gate/<candidate label>-vs-<incumbent label>`` (with ``baseline``, the kernel its report
    names). Raises Int8confError: unreadable baseline."""
    if incumbent is None:
        incumbent = read_report(baseline)["kernel"]["name"]
    return default_out("gate", pair_label(kernel_label(candidate, injection), kernel_label(incumbent)))


def check_out_dir(out: Path, option: str = "--out") -> None:
    """Make and check ``out`` and ``out/logs`` (and an existing ``out/repro``) before any kernel runs; ``option``
    names the flag (``--gate-out`` in the pytest plugin). Raises Int8confError."""
    ensure_out_dir(out, option, files=GATE_REPORT_FILES.values())
    ensure_out_dir(out / "logs", option, what="log directory")
    if (out / "repro").exists() or (out / "repro").is_symlink():
        ensure_out_dir(out / "repro", option, what="reproducer directory")
