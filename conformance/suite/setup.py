"""One run set-up for every front door (``int8conf check``, ``pytest --kernel``, the gate): the kernels named and
the injection each carries, the cases a kernel runs, and the report folders made before any case runs.

A kernel's cases are its operand type's default cases (:func:`conformance.suite.plan.suite_cases`; full-size FP8
paper layers where it runs on a GPU), captured from ``--model DIR`` when that is given without captures, and, for a
precondition fault (F6 / F7), prepared within the kernel's shape constraints (``faults.prepare_injection``) and then
counted as an explicit case list. Every error is one line (Int8confError and its subclasses).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import faults  # noqa: F401 -- registers the resolver of injected names (cpu+F4@all#s0)
from conformance.kernels.registry import get_kernel, resolve_kernels
from conformance.kernels.runner import cuda_device
from conformance.kernels.spec import KernelSpec
from conformance.runtime.output_dirs import kernel_dirname
from conformance.suite.plan import given_cases, suite_cases
from conformance.suite.report import REPORT_FILES
from faults import Injection, inject_injection, injection_of, parse_injection, prepare_injection
from faults.spec import PRECONDITION_FAULTS
from reference.command_line import ensure_out_dir, removed_if_refused
from reference.errors import Int8confError
from reference.model import capture as model_capture


@dataclass(frozen=True)
class CaseSource:
    """What a run's cases are built from: ``captures`` / ``tile_edges`` (the tile-edge shapes and case families; False: left out), ``capture_dir`` (None: the
    bundled captures, or those of ``model_dir`` when it is given), ``model_dir`` (a HF Qwen3 checkpoint), ``seeds``
    of the synthetic cases, ``max_capture_layers`` (None: all)."""

    captures: bool = True
    tile_edges: bool = True
    capture_dir: Optional[Path] = None
    model_dir: Optional[Path] = None
    seeds: tuple = (0, 1)
    max_capture_layers: Optional[int] = None


def kernel_runs(names: Sequence[str], injections: Sequence[str] = ()) -> list[tuple[KernelSpec, Optional[Injection]]]:
    """``(spec, Injection or None)`` per kernel name and ``--inject`` text (every pair), or per name alone where no
    injection is given (a name such as ``cpu+F7@one#s0`` carries its own). Raises KernelLoadError / FaultError."""
    specs = resolve_kernels(list(names))
    if not injections:
        return [(s, injection_of(s)) for s in specs]
    parsed = [parse_injection(t) for t in injections]
    return [(inject_injection(s, i), i) for s in specs for i in parsed]


def against_kernel(name: Optional[str], specs: Sequence[KernelSpec]) -> Optional[KernelSpec]:
    """The ``--against`` kernel (None when not given); refused when its operand type differs from a kernel's."""
    if not name:
        return None
    other = get_kernel(name, "--against")
    mixed = [f"{s.name} takes {s.operands}" for s in specs if s.operands != other.operands]
    if mixed:
        raise Int8confError(
            f"--against {other.name} takes {other.operands} operands, {'; '.join(mixed)}: compare kernels of one "
            "operand type (e.g. --against fp8-cpu for an e4m3 kernel)"
        )
    return other


class RunCases:
    """The cases of each kernel of a run (module docstring), the default cases built once per operand type and
    place (CPU / GPU) and shared by every kernel of that kind. ``full_size``: the FP8 paper layers at full size
    where the kernel runs on a GPU (GBs of operands: a front door whose every worker process builds its own cases,
    as pytest-xdist's do, passes False and keeps their narrow shapes)."""

    def __init__(
        self,
        source: CaseSource,
        device: Optional[str] = None,
        progress: Optional[Callable[[str], None]] = None,
        full_size: bool = True,
    ) -> None:
        self.source, self.device, self.progress, self.full_size = source, device, progress, full_size
        self._built: dict = {}

    def for_kernel(self, spec: KernelSpec, inj: Optional[Injection] = None) -> tuple[list, object]:
        """``(cases, CaptureReplay)`` of ``spec`` carrying ``inj``. Raises CaptureError (one line)."""
        dev = cuda_device(spec, self.device)
        sizes = spec.block.sizes if spec.block is not None else None
        key = (spec.operands, dev is not None and self.full_size, sizes, spec.is_azp)
        if key not in self._built:
            src = self.source
            captures = src.capture_dir
            if src.model_dir is not None and captures is None and src.captures:
                captures = model_capture.cached_capture(src.model_dir, device=dev or "cpu", progress=self.progress).dir
            self._built[key] = suite_cases(
                src.captures,
                src.tile_edges,
                captures,
                src.model_dir,
                seeds=src.seeds,
                max_capture_layers=src.max_capture_layers,
                operands=spec.operands,
                native=key[1],
                block_sizes=sizes,
                azp=spec.is_azp,
            )
        cases, cap = self._built[key]
        if inj is not None and inj.fault in PRECONDITION_FAULTS:
            cases = [prepare_injection(c, inj, spec.constraints) for c in cases]
            cap = given_cases(cases)
        return list(cases), cap


def report_root(out: Union[str, os.PathLike], kernel_name: str) -> Path:
    """The root reports are written under (``<root>/<kernel dir>/``): ``out``, or its parent when ``out``'s last
    component already is the kernel's folder name."""
    p = Path(out)
    return p.parent if p.name == kernel_dirname(kernel_name) else p


def kernel_report_dir(out: Union[str, os.PathLike], kernel_name: str) -> Path:
    """The folder a run writes ``kernel_name``'s report into (:func:`report_root`)."""
    return report_root(out, kernel_name) / kernel_dirname(kernel_name)


def make_report_dirs(out: Union[str, os.PathLike], kernel_names: Sequence[str], option: str = "--out") -> list[Path]:
    """Make ``out`` and every kernel's report folder and check them writable before any case runs; on a refusal
    the folders made here that are still empty are removed again. Returns the folders made, deepest first.
    Raises Int8confError naming ``option`` and the path."""
    dirs = list(dict.fromkeys(kernel_report_dir(out, n) for n in kernel_names))
    with removed_if_refused(Path(out), *dirs) as made:
        ensure_out_dir(Path(out), option)
        for d in dirs:
            ensure_out_dir(d, option, files=REPORT_FILES)
    return made
