"""The cells of a sweep and the identity of a sweep (DESIGN.md section 7).

A *layer cell* is (layer capture, fault, coverage, scale mode, seed): the
fault's operand transform is applied to the capture's operands
(``faults.prepare_case``), the faulty kernel (``faults.inject``) runs on
them, and every per-case check (C1-C6, C8) evaluates the output; the fault's
ground truth is recorded with it.

A *model cell* is (fault, coverage, seed) with ``layer ==`` :data:`MODEL_LAYER`:
the model-level checks run once with the fault injected into every linear
layer of the model (C7 token_flip once per scale mode; E1 engine_hash once,
since the integer engine has no scale mode: its row is stored under both
scale modes, marked ``shared_across_scale_modes``). One model cell therefore
stores rows for (fault, coverage, own, seed) and (fault, coverage, pow2, seed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from reference.errors import Int8confError

#: ``layer`` of a model-level cell.
MODEL_LAYER = "*model*"
SCALE_MODES = ("own", "pow2")
LAYER_CHECKS = ("C1", "C2", "C3", "C4", "C5", "C6", "C8")
MODEL_CHECKS = ("C7", "E1")


@dataclass(frozen=True, order=True)
class Cell:
    """One unit of work (see module docstring).

    Attributes:
        layer: capture layer name, or :data:`MODEL_LAYER`.
        fault: ``F1`` .. ``F9``.
        coverage: ``one`` | ``1%`` | ``all`` (``faults.COVERAGES``).
        scale_mode: ``own`` | ``pow2``; ``both`` for a model cell.
        seed: fault-mask seed.
    """

    layer: str
    fault: str
    coverage: str
    scale_mode: str
    seed: int

    @property
    def is_model(self) -> bool:
        """True for a model-level cell."""
        return self.layer == MODEL_LAYER

    @property
    def key(self) -> tuple:
        """Primary key of the store's ``cells`` table."""
        return (self.layer, self.fault, self.coverage, self.scale_mode, int(self.seed))

    def label(self) -> str:
        """``layer|F4|all|own|s0`` for logs."""
        return f"{self.layer}|{self.fault}|{self.coverage}|{self.scale_mode}|s{self.seed}"

    def to_dict(self) -> dict:
        """Plain dict."""
        return asdict(self)


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep is over: its identity is everything that changes results.

    Attributes:
        kernel: kernel name as given (``cpu``, ``pkg.mod:fn``).
        kernel_digest: the kernel's declared source digest.
        capture_dir: capture directory (str).
        capture_digest: the capture set's model digest + checkpoint digests.
        model_dir: model directory for C7 / E1 (str), or "" when model
            checks are off.
        c7: C7 settings (windows, window_len) as a dict.
        model_checks: whether C7 / E1 run.
        checkpoint_dirs: ``((kind, dir), ...)`` of the W8A8 checkpoints the
            captures refer to, resolved (and digest-checked) once by the
            main process, so workers read single layers from them; empty:
            workers resolve them themselves. Not part of the identity.
    """

    kernel: str
    kernel_digest: str
    capture_dir: str
    capture_digest: str
    model_dir: str
    c7: dict
    model_checks: bool = True
    checkpoint_dirs: tuple = ()

    def identity(self) -> dict:
        """The fields that must match to resume into an existing store
        (directories are not part of it: the same captures may move)."""
        return {
            "kernel": self.kernel,
            "kernel_digest": self.kernel_digest,
            "capture_digest": self.capture_digest,
            "c7": dict(self.c7),
            "model_checks": self.model_checks,
        }

    def digest(self) -> str:
        """SHA-256 of :meth:`identity` (key-sorted JSON)."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()


def layer_cells(
    layers: Sequence[str],
    faults: Sequence[str],
    coverages: Sequence[str],
    scale_modes: Sequence[str],
    seeds: Sequence[int],
) -> list[Cell]:
    """Every layer cell, in a fixed order (layer, scale mode, fault, coverage, seed).

    Raises:
        Int8confError: empty axis or unknown scale mode.
    """
    for name, axis in (
        ("layers", layers),
        ("faults", faults),
        ("coverages", coverages),
        ("scale modes", scale_modes),
        ("seeds", seeds),
    ):
        if not axis:
            raise Int8confError(f"sweep: no {name} selected")
    bad = [s for s in scale_modes if s not in SCALE_MODES]
    if bad:
        raise Int8confError(f"sweep: unknown scale mode(s) {bad}; known: {list(SCALE_MODES)}")
    return [
        Cell(layer, f, c, s, int(seed))
        for layer in layers
        for s in scale_modes
        for f in faults
        for c in coverages
        for seed in seeds
    ]


def model_cells(faults: Iterable[str], coverages: Iterable[str], seeds: Iterable[int]) -> list[Cell]:
    """One model cell per (fault, coverage, seed) (``scale_mode == "both"``)."""
    return [Cell(MODEL_LAYER, f, c, "both", int(seed)) for f in faults for c in coverages for seed in seeds]
