"""The store's record of the runs that computed its cells (meta key ``runs``).

A run is written into the store when it starts (``status: running``) and kept
current as its cells are stored, so a run that is killed -- SIGKILL, out of
memory, a lost machine -- still appears in the record. The next run over the
same store marks it ``interrupted`` and counts its cells exactly: every cell
stored between its start and the next run's start is its own (a store has one
writer at a time, ``SweepStore``), so ``computed`` of an interrupted run is
``cells now - cells at its start``; its ``wall_s`` is the time of its last
stored unit (at most ``HEARTBEAT_S`` stale). The scorecard's timing line sums
every run, interrupted ones included.

Entry fields: ``status`` (running / complete / interrupted), ``computed``,
``skipped``, ``wall_s`` (seconds), ``cells_per_s``, ``executor``, ``when``
(local start time), ``cpu_count``, ``stored_before`` (cells in the store when
the run started).
"""

from __future__ import annotations

import json
import os
import time

#: at most one meta write per this many seconds while a run stores cells
HEARTBEAT_S = 1.0


def _rate(computed: int, wall_s: float) -> float:
    """Cells per second, 0 for no wall time."""
    return round(computed / wall_s, 3) if wall_s else 0.0


def read_runs(store) -> list:
    """The ``runs`` list of ``store`` (empty when none was recorded)."""
    return json.loads(store.meta("runs") or "[]")


class RunLog:
    """One run's entry in ``store``'s ``runs`` list.

    Usage: ``log = RunLog.start(store, skipped)``; ``log.executor(text)`` when
    the executor is chosen (``run_cells(on_start=...)``); ``log.heartbeat(n)``
    after each stored unit (``run_cells(on_stored=...)``); ``log.finish(stats)``
    at the end, or ``log.interrupt()`` when the run stops on an exception.
    """

    def __init__(self, store, runs: list, entry: dict):
        self.store, self.runs, self.entry = store, runs, entry
        self._t0 = time.perf_counter()
        self._last = 0.0

    @classmethod
    def start(cls, store, skipped: int) -> RunLog:
        """Close the entries of killed runs (``interrupted``, exact cell
        counts) and add this run's ``running`` entry; written at once. The
        caller holds the store for writing (``SweepStore.claim_writer``)."""
        runs = read_runs(store)
        now = len(store.done())
        for r in runs:
            if r.get("status") == "running":
                r["status"] = "interrupted"
                r["computed"] = max(0, now - int(r.get("stored_before", now)))
                r["cells_per_s"] = _rate(r["computed"], r.get("wall_s") or 0.0)
        # a killed run that stored nothing left no time on record either: nothing to count
        runs = [r for r in runs if r.get("status") != "interrupted" or r["computed"] or r.get("wall_s")]
        entry = {
            "status": "running",
            "computed": 0,
            "skipped": skipped,
            "wall_s": 0.0,
            "cells_per_s": 0.0,
            "executor": None,
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "cpu_count": os.cpu_count(),
            "stored_before": now,
        }
        runs.append(entry)
        store.set_meta("runs", runs)
        return cls(store, runs, entry)

    def executor(self, description: str) -> None:
        """Record how the run computes (``RunStats.executor``), as soon as it is
        chosen, so that an interrupted run says it too; written at once."""
        self.entry["executor"] = description
        self.store.set_meta("runs", self.runs)

    def heartbeat(self, computed: int) -> None:
        """Record ``computed`` cells so far (at most one write per ``HEARTBEAT_S``)."""
        t = time.perf_counter()
        if t - self._last < HEARTBEAT_S:
            return
        self._last = t
        self._update(computed, t - self._t0)
        self.store.set_meta("runs", self.runs)

    def finish(self, stats) -> list:
        """Close the entry from ``stats`` (``conformance.sweep.distributed.RunStats``)
        and return the whole list; a run that computed nothing is dropped from it."""
        self._update(stats.computed, stats.elapsed_s)
        self.entry.update(status="complete", executor=stats.executor)
        if not stats.computed:
            self.runs.remove(self.entry)
        self.store.set_meta("runs", self.runs)
        return self.runs

    def interrupt(self) -> None:
        """Close the entry as ``interrupted`` (the run stopped on an exception),
        its cells counted from the store as for a killed run (exact even when
        the stop lands between a unit's commit and the caller's count), its wall
        time kept even when it stored no cell."""
        computed = max(0, len(self.store.done()) - self.entry["stored_before"])
        self._update(computed, time.perf_counter() - self._t0)
        # kept even with no cell stored: its wall time (start-up, a first unit cut short)
        # belongs in the timing line
        self.entry["status"] = "interrupted"
        self.store.set_meta("runs", self.runs)

    def _update(self, computed: int, wall_s: float) -> None:
        self.entry.update(computed=computed, wall_s=round(wall_s, 2), cells_per_s=_rate(computed, wall_s))
