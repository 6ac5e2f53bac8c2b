"""The cells of a sweep and its identity (DESIGN.md section 7). A layer cell is (layer
capture, injection, scale mode); a model cell (``layer ==`` :data:`MODEL_LAYER`, scale mode
``both``) runs C7 per scale mode and E1 once; a kernel cell of an e4m3 or a block sweep (``layer ==``
:data:`KERNEL_LAYER`, scale mode ``both``) runs C11 (C16 for a block-scaled kernel), whose probe operands are no
layer's, once.
A cell carries its :class:`faults.Injection`; the store holds the strings of :attr:`Cell.key`,
read back by :meth:`Cell.from_key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from faults.spec import Injection, make_injection
from predictions.matrix import DOMAINS
from reference.errors import Int8confError

#: ``layer`` of a model-level cell.
MODEL_LAYER = "*model*"
#: ``layer`` of a kernel-level cell (C11 / C16 on its probe operands; e4m3 and block-scaled kernels).
KERNEL_LAYER = "*kernel*"
#: Scale modes of the layer cells per matrix domain (``predictions.matrix.matrix_domain``: the kernel's operand
#: dtype, e4m3 the activation scale, DESIGN.md 3b; ``block`` the block scale modes of a block-scaled kernel).
SCALE_MODES_FOR = {domain: d.scale_modes for domain, d in DOMAINS.items()}


@dataclass(frozen=True)
class Cell:
    """One unit of work: ``layer`` (or :data:`MODEL_LAYER`, :data:`KERNEL_LAYER`), the
    ``injection`` (the F9 / F10 default variant in a sweep) and ``scale_mode`` (one of
    :data:`SCALE_MODES_FOR`; ``both`` for a model or kernel cell)."""

    layer: str
    injection: Injection
    scale_mode: str

    @classmethod
    def from_key(cls, layer: str, fault: str, coverage: str, scale_mode: str, seed: int) -> Cell:
        """The cell of a store key (:attr:`key`). Raises FaultError: a bad fault / coverage / seed."""
        return cls(layer, make_injection(fault, coverage, int(seed)), scale_mode)

    @property
    def fault(self) -> str:
        return self.injection.fault

    @property
    def coverage(self) -> str:
        return self.injection.coverage

    @property
    def seed(self) -> int:
        return self.injection.seed

    @property
    def is_model(self) -> bool:
        return self.layer == MODEL_LAYER

    @property
    def is_kernel(self) -> bool:
        return self.layer == KERNEL_LAYER

    @property
    def key(self) -> tuple:
        """``(layer, fault, coverage, scale_mode, seed)``: primary key of the store's ``cells`` table."""
        inj = self.injection
        return (self.layer, inj.fault, inj.coverage, self.scale_mode, inj.seed)


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep is over.

    ``kernel``: name as given; ``capture_digest``: the capture set's model digest and
    checkpoint digests; ``model_dir``: for C7 / E1 ("" when off); ``c7``: C7 / E1
    settings. ``checkpoint_dirs``: ``((kind, dir), ...)`` of the W8A8 checkpoints,
    digest-checked once by the main process so workers read single layers (empty:
    workers resolve them); not part of the identity.
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
        """What must match to resume into an existing store (not directories: captures may move)."""
        return {
            "kernel": self.kernel,
            "kernel_digest": self.kernel_digest,
            "capture_digest": self.capture_digest,
            "c7": dict(self.c7),
            "model_checks": self.model_checks,
        }


def _injections(faults: Iterable[str], coverages: Iterable[str], seeds: Iterable[int]) -> list[Injection]:
    return [make_injection(f, c, int(seed)) for f in faults for c in coverages for seed in seeds]


def layer_cells(
    layers: Sequence[str],
    faults: Sequence[str],
    coverages: Sequence[str],
    scale_modes: Sequence[str],
    seeds: Sequence[int],
    operands: str = "int8",
) -> list[Cell]:
    """Every layer cell, in a fixed order (layer, scale mode, fault, coverage, seed), for a
    kernel of matrix domain ``operands`` (:data:`SCALE_MODES_FOR`). Raises Int8confError: an
    empty axis or an unknown scale mode, fault or coverage."""
    names = ("layers", "faults", "coverages", "scale modes", "seeds")
    for name, axis in zip(names, (layers, faults, coverages, scale_modes, seeds)):
        if not axis:
            raise Int8confError(f"sweep: no {name} selected")
    known = SCALE_MODES_FOR[operands]
    bad = [s for s in scale_modes if s not in known]
    if bad:
        raise Int8confError(f"sweep: unknown scale mode(s) {bad} for {operands} kernels; known: {list(known)}")
    injs = _injections(faults, coverages, seeds)
    return [Cell(layer, inj, s) for layer in layers for s in scale_modes for inj in injs]


def model_cells(faults: Iterable[str], coverages: Iterable[str], seeds: Iterable[int]) -> list[Cell]:
    """One model cell per (fault, coverage, seed) (``scale_mode == "both"``)."""
    return [Cell(MODEL_LAYER, inj, "both") for inj in _injections(faults, coverages, seeds)]


def kernel_cells(faults: Iterable[str], coverages: Iterable[str], seeds: Iterable[int]) -> list[Cell]:
    """One kernel cell per (fault, coverage, seed) (``scale_mode == "both"``)."""
    return [Cell(KERNEL_LAYER, inj, "both") for inj in _injections(faults, coverages, seeds)]
