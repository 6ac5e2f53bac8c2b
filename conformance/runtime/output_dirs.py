"""Default output folders of every command, in one place.

The rule: ``reports/<command>/<label>/``, where ``<command>`` is ``check``,
``sweep``, ``gate``, ``scoreboard``, ``bench`` or, for ``study pow2``, the
study (``pow2``), and ``<label>`` names what was run:

* one kernel (check, sweep): :func:`kernel_label` of its name, which carries
  an injected fault (``cpu`` -> ``cpu``; ``cpu`` with ``--inject F4`` ->
  ``cpu_F4_all_s0``; ``mypkg.gemm:scaled_mm`` -> ``mypkg.gemm_scaled_mm``);
* two kernels (gate, study): :func:`pair_label`, ``<first>-vs-<second>``
  (the gate: candidate, with its fault, vs the incumbent, or the kernel
  named in ``--baseline``'s report);
* the scoreboard of every available kernel: no label (``reports/scoreboard``);
  a selection (``--kernel`` / ``--device``): :func:`selection_label`;
* ``bench --gpu``: the device (``reports/bench/<device>``).

So a run replaces only an earlier run of the same kernel(s) and options'
label; ``--out`` still chooses any folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

#: the root of every default output folder (relative to the current directory)
REPORTS = Path("reports")


def command_root(command: str) -> Path:
    """``reports/<command>``."""
    return REPORTS / command


def kernel_label(name: str, fault: Optional[str] = None, coverage: str = "all", seed: int = 0) -> str:
    """A kernel's folder name: its name (``KernelSpec.name``, with an injected
    fault's suffix ``+F4@all#s0`` when ``fault`` is given) made a folder name
    (``conformance.suite.report.kernel_dirname``).

    Raises:
        FaultError: ``fault`` / ``coverage`` unknown (one line).
    """
    from conformance.suite.report import kernel_dirname

    if fault:
        from faults.spec import make_injection

        name += make_injection(fault, coverage, seed).suffix()
    return kernel_dirname(name)


def pair_label(first: str, second: str) -> str:
    """``<first>-vs-<second>`` of two :func:`kernel_label` values."""
    return f"{first}-vs-{second}"


def selection_label(kernels: Sequence[str] = (), devices: Sequence[str] = ()) -> str:
    """A selection of kernels and devices: ``a+b`` and/or ``@cpu+cuda``
    (empty for every kernel on every device)."""
    label = "+".join(kernel_label(k) for k in kernels)
    return label + ("@" + "+".join(devices) if devices else "")


def default_out(command: str, label: str = "") -> Path:
    """``reports/<command>/<label>`` (``reports/<command>`` for no label)."""
    return command_root(command) / label if label else command_root(command)
