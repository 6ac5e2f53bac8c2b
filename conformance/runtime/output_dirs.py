"""Default output folders of every command: ``int8conf-reports/<command>/<label>/`` under the current
directory (:data:`REPORTS`: a folder no committed file lives in, ignored by the repository's ``.gitignore``;
the committed examples under ``reports/`` are regenerated only by an explicit ``--out``); ``<label>`` is
:func:`kernel_label` for one kernel (with its fault: ``cpu_F4_all_s0``), :func:`pair_label`
``<first>-vs-<second>`` for two, nothing for the whole scoreboard (:func:`selection_label` for a
selection), the device for ``bench --gpu``. ``--out`` chooses any folder."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from faults.spec import Injection

#: the root of every default output folder (relative to the current directory)
REPORTS = Path("int8conf-reports")


def command_root(command: str) -> Path:
    """``int8conf-reports/<command>``."""
    return REPORTS / command


def kernel_dirname(name: str) -> str:
    """Directory name for a kernel's reports (``pkg.mod:fn?x=1`` -> ``pkg.mod_fn_x_1``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "kernel"


def kernel_label(name: str, injection: Optional[Injection] = None) -> str:
    """A kernel's folder name: its name (``KernelSpec.name``, with the injection's suffix ``+F4@all#s0`` when
    one is given) made a folder name (:func:`kernel_dirname`)."""
    return kernel_dirname(name + (injection.suffix() if injection else ""))


def pair_label(first: str, second: str) -> str:
    """``<first>-vs-<second>`` of two :func:`kernel_label` values."""
    return f"{first}-vs-{second}"


def selection_label(kernels: Sequence[str] = (), devices: Sequence[str] = ()) -> str:
    """A selection of kernels and devices: ``a+b`` and/or ``@cpu+cuda``
    (empty for every kernel on every device)."""
    label = "+".join(kernel_label(k) for k in kernels)
    return label + ("@" + "+".join(devices) if devices else "")


def default_out(command: str, label: str = "") -> Path:
    """``int8conf-reports/<command>/<label>`` (``int8conf-reports/<command>`` for no label)."""
    return command_root(command) / label if label else command_root(command)
