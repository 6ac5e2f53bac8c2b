"""Whether a report covers the whole run: :func:`partial_run` builds the ``partial`` record of
``conformance.json`` and ``gate.json``; its ``note`` is the reports' ``partial run: ...`` line."""

from __future__ import annotations

from typing import Optional

#: ``reason`` of a run stopped by Ctrl-C or SIGTERM.
INTERRUPTED = "interrupted"
#: ``reason`` of a run that was not stopped but did not reach every case
#: (pytest selection, ``-x`` / ``--maxfail``, a lost xdist worker).
SUBSET = "subset"
#: Producers of the record; each keeps the wording its reports always had.
_KINDS = ("suite", "plugin", "gate")


def partial_run(
    cases_ran: int, cases_total: int, *, interrupted: bool = False, stage: Optional[str] = None, kind: str = "suite"
) -> dict:
    """The ``partial`` record: ``{"partial", "reason" ("interrupted" | "subset" | None), "cases_ran",
    "cases_total", "stage", "note"}``; partial when ``interrupted`` or ``cases_ran < cases_total``.
    ``cases_ran``: fixed cases run (gate: cases decided); ``stage``: what a stopped run was doing (None:
    unknown); ``kind`` suite | plugin | gate picks the note's wording. Raises ValueError for an unknown
    ``kind`` only (counts are not validated: a raise would lose the report)."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    ran, total = int(cases_ran), int(cases_total)
    partial = bool(interrupted) or ran < total
    reason = (INTERRUPTED if interrupted else SUBSET) if partial else None
    stage = stage if interrupted else None  # a run that was not stopped has no stop stage
    return {
        "partial": partial,
        "reason": reason,
        "cases_ran": ran,
        "cases_total": total,
        "stage": stage,
        "note": _note(kind, ran, total, reason, stage) if partial else None,
    }


def _note(kind: str, ran: int, total: int, reason: str, stage: Optional[str]) -> str:
    """The human line of a partial record, in each producer's own wording."""
    during = f" during {stage}" if stage not in (None, "cases") else ""
    why = f"interrupted{during}" if reason == INTERRUPTED else "pytest selection or early stop"
    if kind == "gate":
        return f"partial run: {ran} of {total} cases decided ({why})"
    if kind == "suite" and reason == INTERRUPTED:
        return (
            f"partial run: interrupted after {ran} of {total} fixed cases"
            + ("" if stage in (None, "fixed cases") else f", during {stage}")
            + "; the verdict covers only what finished"
        )
    return f"partial run: {ran} of {total} fixed cases ran ({why}); the verdict covers only those"


def complete_run(cases_total: int, kind: str = "suite") -> dict:
    """The record of a run that did every one of its ``cases_total`` cases."""
    return partial_run(cases_total, cases_total, kind=kind)


def is_partial(doc: dict) -> bool:
    """Whether a report document (``conformance.json`` / ``gate.json``) is a partial run: its ``partial.partial``
    flag, or, in a report written before the record existed, a ``partial run`` line in its notes."""
    rec = doc.get("partial")
    if isinstance(rec, dict) and rec.get("partial"):
        return True
    return any(str(n).startswith("partial run") for n in doc.get("notes") or [])


def partial_note(doc: dict) -> Optional[str]:
    """The ``partial run: ...`` line of a report document (its record's ``note``, else the first such line of
    its notes), or None when complete."""
    rec = doc.get("partial")
    if isinstance(rec, dict) and rec.get("partial"):
        return rec.get("note") or f"partial run ({rec.get('reason')})"
    return next((str(n) for n in doc.get("notes") or [] if str(n).startswith("partial run")), None)
