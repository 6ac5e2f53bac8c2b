"""Whether a report covers the whole run: the ``partial`` record of
``conformance.json`` and ``gate.json``.

A run stopped part-way (Ctrl-C, SIGTERM via ``conformance.runtime.graceful_stop``)
or one that ran only some of its cases (a pytest selection, ``-x``) still
writes its reports; its verdict then covers only what finished. This module
builds the one record that says so, :func:`partial_run`; everything else is
derived from it: the top-level ``partial`` object of both JSON reports (the
record itself), the ``partial run: ...`` line in the reports' ``notes`` and
the Markdown's **PARTIAL RUN** heading (``record["note"]``).
"""

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
    """The ``partial`` record of a run.

    Args:
        cases_ran: fixed cases that ran (suite, pytest plugin) or cases
            decided (gate); property-test examples and model-level checks
            are not counted.
        cases_total: fixed cases (or gate cases) the run was set to do.
        interrupted: the run was stopped (Ctrl-C / SIGTERM). A stop makes
            the record partial even when every case ran: the stop landed in
            a later stage (property test, C9, C7, E1), named by ``stage``.
        stage: what the run was doing when it stopped (``"fixed cases"``,
            ``"the property test"``, ``"C9"``, ``"C7"``, ``"E1"``, gate:
            ``"cases"``); None when not stopped or not known (a pytest run).
        kind: whose wording the note uses: ``"suite"`` (``run_conformance``,
            ``int8conf check``: "interrupted after N of M fixed cases"),
            ``"plugin"`` (the pytest plugin: "N of M fixed cases ran") or
            ``"gate"`` (``run_gate`` and its pytest plugin: "N of M cases
            decided").

    Returns:
        JSON-able dict ``{"partial": bool, "reason": "interrupted" | "subset"
        | None, "cases_ran": int, "cases_total": int, "stage": str | None,
        "note": str | None}``. ``partial`` is ``interrupted or cases_ran <
        cases_total``; ``reason`` / ``stage`` / ``note`` are None on a
        complete run. ``note`` is the ``partial run: ...`` line of the
        report's ``notes`` and Markdown heading.

    Raises:
        ValueError: an unknown ``kind`` (counts are not validated: the
            record is built while a stopped run writes its report, where a
            raise would lose the report).
    """
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
    """The human line of a partial record (the wording each producer's
    reports and README examples have used since partial runs were marked)."""
    why = (
        "interrupted" + (f" during {stage}" if stage not in (None, "cases") else "")
        if reason == INTERRUPTED
        else "pytest selection or early stop"
    )
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
    """The record of a run that did every one of its ``cases_total`` cases
    (``partial_run(cases_total, cases_total, kind=kind)``)."""
    return partial_run(cases_total, cases_total, kind=kind)


def is_partial(doc: dict) -> bool:
    """Whether a report document (``conformance.json`` / ``gate.json`` as a
    dict) is a partial run: its ``partial.partial`` flag, or, in a report
    written before the record existed, a ``partial run`` line in its notes."""
    rec = doc.get("partial")
    if isinstance(rec, dict) and rec.get("partial"):
        return True
    return any(str(n).startswith("partial run") for n in doc.get("notes") or [])


def partial_note(doc: dict) -> Optional[str]:
    """The ``partial run: ...`` line of a report document (its record's
    ``note``, else the first such line of its notes), or None when complete."""
    rec = doc.get("partial")
    if isinstance(rec, dict) and rec.get("partial"):
        return rec.get("note") or f"partial run ({rec.get('reason')})"
    return next((str(n) for n in doc.get("notes") or [] if str(n).startswith("partial run")), None)
