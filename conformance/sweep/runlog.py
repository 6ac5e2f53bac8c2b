"""The store's record of the runs that computed its cells (meta key ``runs``).

A run is recorded when it starts (``status: running``) and kept current as it stores
cells, so a killed run still appears; the next run marks it ``interrupted`` with
``computed = cells now - cells at its start`` (one writer at a time) and its last
recorded ``wall_s`` (at most ``HEARTBEAT_S`` stale). Entry fields: ``status``,
``computed``, ``skipped``, ``wall_s``, ``cells_per_s``, ``executor``, ``when`` (local
start time), ``cpu_count``, ``stored_before``.
"""

from __future__ import annotations

import json
import os
import time

#: at most one meta write per this many seconds while a run stores cells
HEARTBEAT_S = 1.0


def _rate(computed: int, wall_s: float) -> float:
    return round(computed / wall_s, 3) if wall_s else 0.0


def read_runs(store) -> list:
    """The ``runs`` list of ``store`` (empty when none was recorded)."""
    return json.loads(store.meta("runs") or "[]")


class RunLog:
    """One run's entry in ``store``'s ``runs`` list: ``RunLog.start(store, skipped)``, then
    :meth:`executor` (``run_cells(on_start=)``), :meth:`heartbeat` (``on_stored=``) and
    :meth:`finish`, or :meth:`interrupt` when the run stops on an exception."""

    def __init__(self, store, runs: list, entry: dict):
        self.store, self.runs, self.entry = store, runs, entry
        self._t0 = time.perf_counter()
        self._last = 0.0

    @classmethod
    def start(cls, store, skipped: int) -> RunLog:
        """Close the entries of killed runs (``interrupted``) and add this run's
        ``running`` entry, written at once (the caller holds the store for writing)."""
        runs = read_runs(store)
        now = len(store.done())
        for r in runs:
            if r.get("status") == "running":
                r["status"] = "interrupted"
                r["computed"] = max(0, now - int(r.get("stored_before", now)))
                r["cells_per_s"] = _rate(r["computed"], r.get("wall_s") or 0.0)
        # a killed run that stored nothing left no time on record either: nothing to count
        runs = [r for r in runs if r.get("status") != "interrupted" or r["computed"] or r.get("wall_s")]
        entry = dict(status="running", computed=0, skipped=skipped, wall_s=0.0, cells_per_s=0.0, executor=None)
        entry.update(when=time.strftime("%Y-%m-%d %H:%M:%S"), cpu_count=os.cpu_count(), stored_before=now)
        runs.append(entry)
        store.set_meta("runs", runs)
        return cls(store, runs, entry)

    def executor(self, description: str) -> None:
        """Record how the run computes, as soon as it is chosen; written at once."""
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
        """Close the entry from ``RunStats`` and return the whole list (a run that
        computed nothing is dropped)."""
        self._update(stats.computed, stats.elapsed_s)
        self.entry.update(status="complete", executor=stats.executor)
        if not stats.computed:
            self.runs.remove(self.entry)
        self.store.set_meta("runs", self.runs)
        return self.runs

    def interrupt(self) -> None:
        """Close the entry as ``interrupted``, cells counted from the store as for a
        killed run, wall time kept even when no cell was stored."""
        computed = max(0, len(self.store.done()) - self.entry["stored_before"])
        self._update(computed, time.perf_counter() - self._t0)
        self.entry["status"] = "interrupted"
        self.store.set_meta("runs", self.runs)

    def _update(self, computed: int, wall_s: float) -> None:
        self.entry.update(computed=computed, wall_s=round(wall_s, 2), cells_per_s=_rate(computed, wall_s))
