"""Prediction matrices (DESIGN.md section 7): YAML files read with ``yaml.safe_load`` only
(layout: ``conformance/sweep/README.md``). A cell (fault, check, scale mode) takes the
prediction (``fire`` | ``silent`` | ``n/a``) of row ``F@mode`` when the matrix splits that
fault, else of row ``F``. An amendment repeats the whole matrix and lists every changed
cell with its reason (:func:`check_amendment` proves the list exact). A matrix predicts for
kernels of one operand dtype (``operands``: ``int8`` default, or ``e4m3``, DESIGN.md 3b),
whose faults, scale modes and checks it covers (:data:`DOMAINS`); an ``e4m3`` matrix may amend
an ``int8`` one: it extends the predictions to e4m3 kernels and changes none of its parent's.
``operands: block`` predicts for block-scaled kernels of either dtype (issue 46; :func:`matrix_domain`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from faults.catalogue import FAULTS, OPERANDS, faults_for
from reference.errors import PredictionError
from reference.model.capture import BLOCK_SCALE_MODES

PREDICTIONS = ("fire", "silent", "n/a")
CORE_CHECKS = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")
EXTRA_CHECKS = ("C8", "E1")
CAPTURE_SCALE_MODES = ("own", "pow2")


@dataclass(frozen=True)
class Domain:
    """What a matrix for kernels of one operand dtype covers: its ``core_checks`` (exactly), the ``extra_checks``
    it may add, the ``scale_modes`` of its cells (rows split by them)."""

    core_checks: tuple
    extra_checks: tuple
    scale_modes: tuple


#: ``operands`` -> Domain. e4m3 kernels: the layer checks of the published suite (C7 is a model check of the int8
#: forward, not run), C8 and the FP8 checks C11 / C12; scale modes: the activation scale (per token, per tensor).
#: ``block``: block-scaled kernels, int8 or e4m3 (issue 46): the same layer checks, C8, C12 (e4m3) and the block
#: accumulation probe C16; scale modes: ``reference.model.capture.BLOCK_SCALE_MODES``.
DOMAINS = {
    "int8": Domain(CORE_CHECKS, EXTRA_CHECKS, CAPTURE_SCALE_MODES),
    "e4m3": Domain(("C1", "C2", "C3", "C4", "C5", "C6"), ("C8", "C11", "C12"), ("per_token", "per_tensor")),
    "block": Domain(("C1", "C2", "C3", "C4", "C5", "C6"), ("C8", "C12", "C16"), tuple(BLOCK_SCALE_MODES)),
}
#: the matrix domain of block-scaled kernels (any operand dtype)
BLOCK_DOMAIN = "block"
_ROW = re.compile(r"^(F[1-9][0-9]?)(?:@([a-z0-9_]+))?$")


def matrix_domain(spec) -> str:
    """The :data:`DOMAINS` key a kernel's sweep is scored in: ``block`` for a block-scaled kernel
    (``KernelSpec.is_block``), else its operand dtype."""
    return BLOCK_DOMAIN if getattr(spec, "is_block", False) else spec.operands


def domain_faults(domain: str) -> tuple:
    """The fault ids a matrix of ``domain`` must predict, in catalogue order (``block``: those of a block-scaled
    kernel of either dtype, ``faults.catalogue.faults_for(..., "block")``)."""
    if domain == BLOCK_DOMAIN:
        ids = {f.id for o in OPERANDS for f in faults_for(o, "block")}
        return tuple(f.id for f in FAULTS if f.id in ids)
    return tuple(f.id for f in faults_for(domain))


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Cell:
    """One predicted cell: ``prediction`` in :data:`PREDICTIONS` and its one-line ``rationale``."""

    prediction: str
    rationale: str


@dataclass
class PredictionMatrix:
    """A parsed, validated prediction matrix: ``sha256`` of the file's bytes (what its
    lock records), ``amends`` None or ``{"file", "sha256"}``, ``rows`` row key (``F1`` or
    ``F3@pow2``) -> check id -> :class:`Cell`, ``changes`` the amendment's change list,
    ``operands`` the kernels' operand dtype it predicts for (:data:`DOMAINS`)."""

    id: str
    path: Path
    sha256: str
    amends: Optional[dict]
    description: str
    core_checks: tuple
    extra_checks: tuple
    rows: dict
    changes: list = field(default_factory=list)
    operands: str = "int8"

    @property
    def scale_modes(self) -> tuple:
        return DOMAINS[self.operands].scale_modes

    @property
    def checks(self) -> tuple:
        return tuple(self.core_checks) + tuple(self.extra_checks)

    def n_core_cells(self) -> int:
        """Rows x core checks (int8: 63 unsplit; 77 with two faults split by scale mode)."""
        return len(self.rows) * len(self.core_checks)

    def row_key(self, fault: str, scale_mode: str) -> str:
        """The row governing (fault, scale mode): ``F@mode`` if split, else ``F``."""
        k = f"{fault}@{scale_mode}"
        return k if k in self.rows else fault

    def cell(self, fault: str, check: str, scale_mode: str) -> Cell:
        """Prediction for one (fault, check, scale mode); PredictionError when absent."""
        key = self.row_key(fault, scale_mode)
        if key not in self.rows:
            raise PredictionError(f"{self.path.name}: no row for fault {fault!r}")
        if check not in self.rows[key]:
            raise PredictionError(f"{self.path.name}: row {key} has no column {check!r}")
        return self.rows[key][check]

    def predict(self, fault: str, check: str, scale_mode: str) -> str:
        """``fire`` | ``silent`` | ``n/a`` for one (fault, check, scale mode)."""
        return self.cell(fault, check, scale_mode).prediction


def _fail(path: Path, msg: str) -> PredictionError:
    return PredictionError(f"{path.name}: {msg}")


def _one_line(path: Path, where: str, text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise _fail(path, f"{where}: rationale/reason must be a non-empty string")
    if "\n" in text.strip():
        raise _fail(path, f"{where}: rationale/reason must be one line")
    return text.strip()


def parse_matrix(path, data: bytes) -> PredictionMatrix:
    """The PredictionMatrix of ``data``, the bytes of ``path`` (``yaml.safe_load`` only; the
    digest is of exactly these bytes). PredictionError (one line): YAML error, missing
    key, unknown operands / fault / check / scale mode / prediction, missing cell or fault
    row (every fault that applies to the operands), a row of a fault that does not apply
    with a prediction other than n/a, a split row without every scale mode, a multi-line
    rationale."""
    path = Path(path)
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise _fail(path, f"not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise _fail(path, "top level must be a mapping")
    for key in ("matrix", "core_checks", "extra_checks", "rows"):
        if key not in doc:
            raise _fail(path, f"missing key {key!r}")
    operands = doc.get("operands", "int8")
    if operands not in DOMAINS:
        raise _fail(path, f"operands must be one of {list(DOMAINS)}, got {operands!r}")
    dom = DOMAINS[operands]
    core, extra = tuple(doc["core_checks"] or ()), tuple(doc["extra_checks"] or ())
    if core != dom.core_checks:
        raise _fail(path, f"core_checks must be {list(dom.core_checks)}, got {list(core)}")
    if not set(extra) <= set(dom.extra_checks):
        raise _fail(path, f"extra_checks must be among {list(dom.extra_checks)}, got {list(extra)}")
    amends = doc.get("amends")
    if amends is not None:
        if (
            not isinstance(amends, dict)
            or not isinstance(amends.get("file"), str)
            or not _HEX64.match(str(amends.get("sha256", "")))
        ):
            raise _fail(path, "amends must be {file: NAME.yaml, sha256: <64 lowercase hex>}")
    rows_in = doc["rows"]
    if not isinstance(rows_in, dict):
        raise _fail(path, "rows must be a mapping")
    rows: dict = {}
    for key, row in rows_in.items():
        m = _ROW.match(str(key))
        if not m or (m.group(2) is not None and m.group(2) not in dom.scale_modes):
            modes = " / ".join(f"F<n>@{x}" for x in dom.scale_modes)
            raise _fail(path, f"row {key!r} is not F<n> or {modes}")
        if not isinstance(row, dict):
            raise _fail(path, f"row {key}: must map check ids to cells")
        cells = {}
        for cid in core + extra:
            c = row.get(cid)
            if not isinstance(c, dict):
                raise _fail(path, f"row {key}: missing cell {cid}")
            pred = c.get("prediction")
            if pred not in PREDICTIONS:
                raise _fail(path, f"row {key} {cid}: prediction {pred!r} is not one of {list(PREDICTIONS)}")
            cells[cid] = Cell(pred, _one_line(path, f"row {key} {cid}", c.get("rationale")))
        unknown = set(row) - set(core + extra)
        if unknown:
            raise _fail(path, f"row {key}: unknown column(s) {sorted(unknown)}")
        rows[str(key)] = cells
    ids = domain_faults(operands)
    for fid in [f.id for f in FAULTS]:
        whole, split = fid in rows, [f"{fid}@{s}" for s in dom.scale_modes]
        has_split = [s in rows for s in split]
        if whole and any(has_split):
            raise _fail(path, f"fault {fid} has both an unsplit row and scale-mode rows")
        if fid not in ids:
            if (whole or any(has_split)) and any(
                c.prediction != "n/a" for k in [fid] + split if k in rows for c in rows[k].values()
            ):
                raise _fail(path, f"fault {fid} does not apply to {operands} kernels: every cell of its row is n/a")
            continue
        if not whole and not all(has_split):
            raise _fail(path, f"fault {fid} needs row {fid} or all of {', '.join(split)}")
    extra_rows = {k.split("@")[0] for k in rows} - {f.id for f in FAULTS}
    if extra_rows:
        raise _fail(path, f"rows for unknown faults {sorted(extra_rows)}")
    changes = doc.get("changes") or []
    if not isinstance(changes, list):
        raise _fail(path, "changes must be a list")
    for i, ch in enumerate(changes):
        if not isinstance(ch, dict) or not {"row", "check", "from", "to", "reason"} <= set(ch):
            raise _fail(path, f"changes[{i}] needs row, check, from, to, reason")
        _one_line(path, f"changes[{i}]", ch["reason"])
    if changes and amends is None:
        raise _fail(path, "lists changes but amends nothing")
    return PredictionMatrix(
        id=str(doc["matrix"]),
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        amends=dict(amends) if amends else None,
        description=str(doc.get("description", "")),
        core_checks=core,
        extra_checks=extra,
        rows=rows,
        changes=list(changes),
        operands=operands,
    )


def check_amendment(parent: PredictionMatrix, child: PredictionMatrix) -> list[dict]:
    """The effective change list, proved to be exactly the difference between ``child``
    and ``parent`` per (fault, check, scale mode) (splitting a row is not itself a
    change; a split row that differs is, as ``row: F@mode``). An amendment for other
    operands than its parent's (an e4m3 matrix amending an int8 one) extends the
    predictions to those kernels and changes none: its change list must be empty.
    PredictionError: an unlisted change, a listed one that changes nothing or has the
    wrong ``from``, or a dropped column."""
    if child.operands != parent.operands:
        if child.changes:
            raise _fail(
                child.path,
                f"predicts for {child.operands} kernels, {parent.path.name} for {parent.operands} ones: "
                f"it changes none of its cells, so it lists no changes",
            )
        return []
    if not set(parent.checks) <= set(child.checks):
        raise _fail(
            child.path, f"drops column(s) {sorted(set(parent.checks) - set(child.checks))} of {parent.path.name}"
        )
    listed = {(str(ch["row"]), str(ch["check"])): ch for ch in child.changes}
    actual = {}
    for fid in domain_faults(parent.operands):
        for mode in parent.scale_modes:
            for cid in parent.checks:
                was, now = parent.predict(fid, cid, mode), child.predict(fid, cid, mode)
                if was != now:
                    actual[(child.row_key(fid, mode), cid)] = (was, now)
    for key, (was, now) in actual.items():
        ch = listed.get(key)
        if ch is None:
            raise _fail(
                child.path, f"cell {key[0]} {key[1]} changed {was} -> {now} without a listed reason (add it to changes)"
            )
        if ch["from"] != was or ch["to"] != now:
            raise _fail(
                child.path,
                f"changes entry {key[0]} {key[1]} says {ch['from']} -> "
                f"{ch['to']}, but {parent.path.name} -> {child.path.name} "
                f"is {was} -> {now}",
            )
    for key, ch in listed.items():
        if key not in actual:
            raise _fail(
                child.path,
                f"changes entry {key[0]} {key[1]} ({ch['from']} -> {ch['to']}) "
                f"does not change anything against {parent.path.name}",
            )
    return [dict(listed[k]) for k in actual]
