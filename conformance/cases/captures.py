"""Replay of real layer captures (``meta["source"] == "capture"``) and case ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from reference.errors import CaptureError
from reference.operands import GemmOperands

NO_CAPTURES = "no captures available: synthetic only"


@dataclass
class CaptureReplay:
    """Layer captures loaded for replay: ``cases`` (per layer and scale mode),
    ``available``, ``note`` (one line for the report), ``source`` (directory or "")."""

    cases: list = field(default_factory=list)
    available: bool = False
    note: str = NO_CAPTURES
    source: str = ""


def capture_cases(
    scale_modes: Iterable[str] = ("own", "pow2"), capture_set=None, max_layers: Optional[int] = None
) -> CaptureReplay:
    """Replay layer captures (default: the shipped set) in ``scale_modes``
    (``own``: the checkpoint's scales; ``pow2``: requantized, rule ``nearest``),
    the first ``max_layers`` per mode. ``available=False`` with a note when there
    are none; CaptureError when the set is inconsistent."""
    try:
        from reference.model.capture import default_capture_set, iter_layer_operands
    except ImportError as e:
        return CaptureReplay(note=f"{NO_CAPTURES} (reference.model.capture not importable: {e})")
    cs = capture_set if capture_set is not None else default_capture_set()
    if cs is None:
        return CaptureReplay(note=f"{NO_CAPTURES} (no capture set has been built)")
    cases = []
    modes = list(scale_modes)
    for mode in modes:
        for i, ops in enumerate(iter_layer_operands(cs, mode)):
            if max_layers is not None and i >= max_layers:
                break
            ops.meta = dict(ops.meta or {})
            ops.meta["source"] = "capture"
            ops.scale_mode = mode
            cases.append(ops)
    src = str(getattr(cs, "dir", "") or "")
    layers = len({c.name for c in cases})
    return CaptureReplay(
        cases=cases,
        available=True,
        source=src,
        note=f"{layers} captured layers replayed in scale modes "
        f"{', '.join(modes)} ({len(cases)} cases) from {src or 'capture set'}",
    )


#: the line a capture directory that is not there gets (``{}``: the path)
NO_CAPTURE_DIR = (
    "{}: no such directory (a capture directory holds manifest.json and the layers; int8conf capture writes one)"
)


def require_capture_dir(capture_dir) -> None:
    """CaptureError (one line) unless ``capture_dir`` is a directory (:data:`NO_CAPTURE_DIR`; a file: "not a
    directory") holding a valid capture manifest (``reference.model.capture.check_capture_dir``: the manifest only)."""
    from reference.model.capture import check_capture_dir

    path = Path(capture_dir)
    if not path.exists():
        raise CaptureError(NO_CAPTURE_DIR.format(path))
    if not path.is_dir():
        raise CaptureError(f"{path}: not a directory (give the capture directory, not a file in it)")
    check_capture_dir(path)


def load_capture_dir(capture_dir) -> object:
    """``reference.model.capture.load_capture_set(capture_dir)`` after :func:`require_capture_dir`; CaptureError
    when missing or inconsistent."""
    from reference.model.capture import load_capture_set

    require_capture_dir(capture_dir)
    return load_capture_set(capture_dir)


def case_id(ops: GemmOperands) -> str:
    """A case's unique id: ``<layer>[<scale mode>]`` for captures, else its name."""
    if (ops.meta or {}).get("source") == "capture":
        return f"{ops.name}[{ops.scale_mode}]"
    return ops.name or f"M{ops.m}xK{ops.k}xN{ops.n}"


def by_case_id(cases) -> dict[str, GemmOperands]:
    """``{case_id(ops): ops}`` for an iterable of cases (a later case of one id replaces an earlier one)."""
    return {case_id(ops): ops for ops in cases}
