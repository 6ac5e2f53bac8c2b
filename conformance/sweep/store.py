"""The sweep's SQLite store: ``meta`` (the sweep identity, the record of runs), ``cells``
(one row per finished cell, keyed by ``Cell.key``: ground truth, case digest, elapsed
seconds, worker) and ``results`` (one row per cell x check). A cell and its rows are
written in one transaction (a killed sweep leaves all of a cell or none); primary keys
make storing a cell twice impossible; WAL keeps a reader from blocking the one writer.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from conformance.sweep.cells import KERNEL_LAYER, MODEL_LAYER, Cell
from reference.errors import Int8confError, first_line

_TABLES = {"meta", "cells", "results"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
  layer TEXT NOT NULL, fault TEXT NOT NULL, coverage TEXT NOT NULL, scale_mode TEXT NOT NULL,
  seed INTEGER NOT NULL, ground_truth TEXT NOT NULL, case_digest TEXT NOT NULL,
  elapsed_s REAL NOT NULL, worker TEXT NOT NULL,
  PRIMARY KEY (layer, fault, coverage, scale_mode, seed));
CREATE TABLE IF NOT EXISTS results (
  layer TEXT NOT NULL, fault TEXT NOT NULL, coverage TEXT NOT NULL, scale_mode TEXT NOT NULL,
  seed INTEGER NOT NULL, check_id TEXT NOT NULL, verdict TEXT NOT NULL,
  failure_kind TEXT, summary TEXT NOT NULL, evidence TEXT NOT NULL,
  PRIMARY KEY (layer, fault, coverage, scale_mode, seed, check_id));
"""


#: a result row ``r`` belongs to cell ``c`` (a model cell has scale mode 'both')
_CELL_JOIN = (
    "r.layer = c.layer AND r.fault = c.fault AND r.coverage = c.coverage AND "
    "r.seed = c.seed AND (c.scale_mode = r.scale_mode OR c.scale_mode = 'both')"
)


#: keys of a :meth:`SweepStore.rows` dict, in the order of its query's columns
_ROW_KEYS = (
    "layer fault coverage scale_mode seed check_id verdict failure_kind summary evidence ground_truth case_digest "
    "elapsed_s worker"
).split()


class StoreError(Int8confError):
    """The store belongs to another sweep, or is not a sweep store."""


class DamagedStoreError(StoreError):
    """SQLite cannot read the store (:func:`damaged`)."""


def damaged(path, e: sqlite3.DatabaseError) -> DamagedStoreError:
    """The one-line refusal of a store SQLite reports damaged, naming the file and how to
    start a fresh one (the file is left as it is)."""
    why = "".join(c if c.isprintable() else "?" for c in first_line(e, 120))
    return DamagedStoreError(
        f"sweep store {path} is damaged ({why}): give a fresh --db PATH, or delete {path} to start it over"
    )


@dataclass
class CellRows:
    """What a worker returns for one cell (picklable): ``rows``, one dict per (scale mode,
    check) with ``scale_mode, check_id, verdict, failure_kind, summary, evidence``;
    ``ground_truth`` (``GroundTruth.to_dict()``, or a model cell's summary);
    ``case_digest`` over the faulted case's operand digests ("" for model cells);
    ``elapsed_s`` worker wall time; ``worker`` host:pid."""

    cell: Cell
    rows: list
    ground_truth: dict
    case_digest: str = ""
    elapsed_s: float = 0.0
    worker: str = ""


def _json(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str, allow_nan=True)


class SweepStore:
    """A SQLite sweep store (module docstring); a context manager. One writer process.

    ``identity`` is recorded on first use and compared afterwards (None: read-only use,
    e.g. scoring); ``writer`` takes the store for writing (:meth:`claim_writer`).
    Raises StoreError: not a sweep store, another sweep's, edited outside int8conf
    (:meth:`_verify`), damaged (:class:`DamagedStoreError`), or written by another process.
    """

    def __init__(self, path, identity: Optional[dict] = None, writer: bool = False):
        self.path = Path(path)
        if identity is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # e.g. a file where a parent directory should be
                raise StoreError(
                    f"sweep store {self.path}: cannot create its directory ({e.strerror or type(e).__name__})"
                ) from None
        elif not self.path.is_file():
            raise StoreError(f"sweep store {self.path} does not exist")
        try:
            self.db = sqlite3.connect(str(self.path), timeout=60)
            # a database holding other tables and no sweep identity is someone else's:
            # adding the sweep tables to it would silently mix the two
            names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if names - _TABLES and "meta" not in names:
                self.db.close()
                raise StoreError(
                    f"{self.path} is an SQLite database of something else (tables "
                    f"{sorted(names)[:5]}), not a sweep store: give another --db"
                )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
        except sqlite3.OperationalError as e:  # e.g. a directory that cannot hold the file
            raise StoreError(f"sweep store {self.path}: cannot create or open it ({e})") from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a sweep store: {e}") from None
        try:
            if identity is not None:
                self._claim(identity)
            self._verify()
        except sqlite3.DatabaseError as e:  # a damaged page, reported when first read
            self.db.close()
            raise damaged(self.path, e) from None
        if writer:
            try:
                self.claim_writer()
            except StoreError:
                self.db.close()
                raise

    def _verify(self) -> None:
        """Refuse a store edited outside int8conf: a verdict outside pass / fail / n/a,
        result rows without their cell, or a cell with fewer rows than the others of its
        kind (cells and rows are written together, so only an outside edit does that)."""
        bad = self.db.execute(
            "SELECT layer, fault, coverage, scale_mode, seed, check_id, verdict "
            "FROM results WHERE verdict NOT IN ('pass', 'fail', 'n/a') LIMIT 1"
        ).fetchone()
        if bad is not None:
            raise StoreError(
                f"{self.path}: result row {bad[:6]} has verdict {bad[6]!r} (not pass, "
                f"fail or n/a): the store was modified outside int8conf"
            )
        orphan = self.db.execute(
            "SELECT r.layer, r.fault, r.coverage, r.scale_mode, r.seed FROM results r LEFT JOIN "
            f"cells c ON {_CELL_JOIN} WHERE c.layer IS NULL LIMIT 1"
        ).fetchone()
        if orphan is not None:
            raise StoreError(
                f"{self.path}: result rows of cell {tuple(orphan)} without the cell "
                f"itself: the store was modified outside int8conf"
            )
        counts = self.db.execute(
            "SELECT c.layer, c.fault, c.coverage, c.scale_mode, c.seed, COUNT(r.check_id) FROM cells c "
            f"LEFT JOIN results r ON {_CELL_JOIN} "
            "GROUP BY c.layer, c.fault, c.coverage, c.scale_mode, c.seed"
        ).fetchall()
        kinds = {MODEL_LAYER: "model", KERNEL_LAYER: "kernel"}
        for kind in ("layer", "model", "kernel"):
            n = [t[5] for t in counts if kinds.get(t[0], "layer") == kind]
            if not n:
                continue
            usual = max(n)  # every cell of a kind has the same checks: fewer rows = rows deleted
            short = next((t for t in counts if kinds.get(t[0], "layer") == kind and t[5] < usual), None)
            if short is not None:
                raise StoreError(
                    f"{self.path}: cell {tuple(short[:5])} has {short[5]} result rows, "
                    f"the other {kind} cells {usual}: the store "
                    f"was modified outside int8conf (use a new --db, or delete that "
                    f"cell from table cells to recompute it)"
                )

    def _claim(self, identity: dict) -> None:
        have = self.meta("identity")
        want = _json(identity)
        if have is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('identity', ?)", (want,))
        elif have != want:
            old, new = json.loads(have), json.loads(want)  # new as stored: same key order and types

            def short(v) -> str:
                return repr(v[:12]) if isinstance(v, str) and len(v) > 16 else repr(v)

            differ = "; ".join(
                f"{k}: {short(old.get(k))} there, {short(new.get(k))} here"
                for k in sorted(set(old) | set(new))
                if old.get(k) != new.get(k)
            )
            raise StoreError(
                f"{self.path} holds a sweep of kernel {old.get('kernel')!r} that differs from this "
                f"one ({differ}): use another --out DIR (or --db PATH)"
            )

    def meta(self, key: str) -> Optional[str]:
        r = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if r is None else r[0]

    def set_meta(self, key: str, value) -> None:
        """Set a meta value (JSON-encoded unless a str)."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value if isinstance(value, str) else _json(value))
            )

    def done(self) -> set:
        """``Cell.key`` of every finished cell."""
        return {tuple(r) for r in self.db.execute("SELECT layer, fault, coverage, scale_mode, seed FROM cells")}

    def _insert_cell(self, cr: CellRows) -> None:
        c = cr.cell
        self.db.execute(
            "INSERT INTO cells VALUES (?,?,?,?,?,?,?,?,?)",
            (*c.key, _json(cr.ground_truth), cr.case_digest, float(cr.elapsed_s), cr.worker),
        )

    def _insert_rows(self, cr: CellRows) -> None:
        layer, fault, coverage, _, seed = cr.cell.key
        self.db.executemany(
            "INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                (layer, fault, coverage, r["scale_mode"], seed, r["check_id"], r["verdict"])
                + (r.get("failure_kind"), r["summary"], _json(r["evidence"]))
                for r in cr.rows
            ],
        )

    def put(self, cr: CellRows) -> bool:
        """Store one finished cell and its rows atomically; False (nothing stored) when
        the cell was already finished."""
        try:
            with self.db:
                self._insert_cell(cr)
                self._insert_rows(cr)
        except sqlite3.IntegrityError:
            return False
        return True

    def put_many(self, crs) -> int:
        """Store finished cells in one transaction, each whole or absent (one already
        stored is skipped); returns how many were new."""
        new = 0
        with self.db:
            for cr in crs:
                try:
                    self._insert_cell(cr)
                except sqlite3.IntegrityError:
                    continue
                self._insert_rows(cr)
                new += 1
        return new

    def rows(self, deterministic_only: bool = False) -> list[dict]:
        """Every result row joined with its cell's ground truth, ordered by key
        (``deterministic_only``: without ``elapsed_s`` and ``worker``). A row belongs to
        the cell of its key and to the cell of its key under scale mode ``both`` (a model
        or kernel cell), as ``_CELL_JOIN``; a row without a cell is left out. Each stored
        JSON text is parsed once: a cell's rows share its ground-truth object and rows
        with equal evidence texts one evidence object, so the rows are to be read, not
        modified."""
        evidence: dict = {}

        def load(text: str):
            obj = evidence.get(text)
            if obj is None:
                obj = evidence[text] = json.loads(text)
            return obj

        q = "SELECT layer, fault, coverage, scale_mode, seed, ground_truth, case_digest, elapsed_s, worker FROM cells"
        cells = {tuple(c[:5]): (json.loads(c[5]), *c[6:]) for c in self.db.execute(q)}
        q = (
            "SELECT layer, fault, coverage, scale_mode, seed, check_id, verdict, failure_kind, summary, evidence "
            "FROM results ORDER BY layer, fault, coverage, scale_mode, seed, check_id"
        )
        out = []
        for t in self.db.execute(q):
            key = t[:5]
            both = None if key[3] == "both" else cells.get((key[0], key[1], key[2], "both", key[4]))
            for c in (cells.get(key), both):
                if c is None:
                    continue
                d = dict(zip(_ROW_KEYS, t + c))
                d["evidence"] = load(d["evidence"])
                if deterministic_only:
                    del d["elapsed_s"], d["worker"]
                out.append(d)
        return out

    def cell_times(self) -> list[tuple]:
        """``(layer, elapsed_s)`` of every finished cell."""
        return list(self.db.execute("SELECT layer, elapsed_s FROM cells"))

    def claim_writer(self) -> None:
        """Take the store for writing until :meth:`close`: an exclusive ``flock`` on
        ``<store>.lock``, which records who holds it (two writers would count each
        other's cells in the record of runs). No-op without ``fcntl``. Raises StoreError
        naming the holder."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover -- not POSIX
            return
        fh = open(self.path.with_name(self.path.name + ".lock"), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            who = fh.read().strip() or "another process"
            fh.close()
            raise StoreError(
                f"sweep store {self.path} is being written by another sweep ({who}): "
                f"wait for it to finish, or give this run another --db"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
        fh.flush()
        self._writer_lock = fh

    def close(self) -> None:
        """Close the connection (and release :meth:`claim_writer`'s lock)."""
        self.db.close()
        fh = getattr(self, "_writer_lock", None)
        if fh is not None:
            fh.close()  # closing the descriptor releases the flock
            self._writer_lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
