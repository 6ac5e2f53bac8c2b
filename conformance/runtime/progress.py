"""Progress of a long command (``int8conf check``): rich live status on a terminal; elsewhere
(CI logs, pipes) :class:`PlainProgress` prints self-contained lines ``int8conf check: <label>:
<done>/<total> fixed cases, <elapsed> s elapsed: <latest step>`` at every non-case step, every
``every_cases`` cases or ``every_s`` seconds (heartbeat thread); nothing with ``--quiet``.
A finished fixed case is the suite's line :data:`CASE_LINE` (the property examples have none: the summary table
counts them beside the fixed cases, ``suite.report.case_count``)."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from typing import Callable, Iterator, Optional, TextIO

#: a finished case in the suite's progress lines: ``[i/n] <case>: <verdict>``
CASE_LINE = re.compile(r"^\[(\d+)/(\d+)\] ")
#: default: a line at least every this many finished cases ...
EVERY_CASES = 25
#: ... or after this many seconds (heartbeat too)
EVERY_S = 15.0


class PlainProgress:
    """Periodic plain progress lines for a stream that is not a terminal; the instance is the ``progress``
    callback of ``run_conformance``, a context manager around the heartbeat thread (thread-safe: one lock).
    ``label`` prefixes every line; ``stream``: default ``sys.stderr`` at print time; a line after
    ``every_cases`` (>= 1) finished cases or ``every_s`` (> 0, also the heartbeat period) seconds without one;
    ``clock``: monotonic seconds. Raises ValueError for a bad period."""

    def __init__(
        self,
        label: str,
        stream: Optional[TextIO] = None,
        *,
        every_cases: int = EVERY_CASES,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: bool = True,
    ):
        if every_cases < 1 or not every_s > 0:
            raise ValueError(f"every_cases must be >= 1 and every_s > 0, got {every_cases} and {every_s}")
        self.label, self._stream = label, stream
        self.every_cases, self.every_s, self._clock = every_cases, float(every_s), clock
        self._heartbeat = heartbeat
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._t0 = self._last_t = clock()
        self.done, self.total, self._last_done = 0, None, 0
        self.step = "starting"
        self.lines = 0  # lines printed (tests, and the closing line's decision)

    def __call__(self, line: str) -> None:
        """Take one progress line of the suite; print when due (module docstring)."""
        line = str(line)
        with self._lock:
            m = CASE_LINE.match(line)
            if m is None:  # a step: always worth a line
                self.step = line
                self._print()
                return
            self.done, self.total = int(m.group(1)), int(m.group(2))
            self.step = f"last case {line[m.end() :]}"
            cases_due = self.done - self._last_done >= self.every_cases or self.done == self.total
            if cases_due or self._clock() - self._last_t >= self.every_s:
                self._print()

    def _print(self) -> None:
        """Write the status line (caller holds the lock)."""
        now = self._clock()
        cases = "" if self.total is None else f"{self.done}/{self.total} fixed cases, "
        line = f"int8conf check: {self.label}: {cases}{now - self._t0:.1f} s elapsed: {self.step}"
        print(line, file=self._stream if self._stream is not None else sys.stderr, flush=True)
        self._last_t, self._last_done = now, self.done
        self.lines += 1

    def beat(self) -> bool:
        """Print the status line if ``every_s`` passed without one; True if it printed.
        (What the heartbeat thread calls.)"""
        with self._lock:
            if self._clock() - self._last_t < self.every_s:
                return False
            self._print()
            return True

    def _run(self) -> None:
        while not self._stop.wait(min(self.every_s, 1.0)):
            self.beat()

    def __enter__(self) -> "PlainProgress":
        if self._heartbeat and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="int8conf-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


@contextlib.contextmanager
def suite_progress(
    label: str, console, *, quiet: bool = False, every_cases: int = EVERY_CASES, every_s: float = EVERY_S
) -> Iterator[Optional[Callable[[str], None]]]:
    """The ``progress`` callback for one suite run, as a context manager: None (``quiet``), a rich status
    ``update`` when ``console`` (the CLI's stderr ``rich`` Console) ``is_terminal``, else a
    :class:`PlainProgress` on ``console.file`` with periods ``every_cases`` / ``every_s``."""
    if quiet:
        yield None
    elif console.is_terminal:
        with console.status(f"checking {label}") as status:
            yield status.update
    else:
        with PlainProgress(label, console.file, every_cases=every_cases, every_s=every_s) as plain:
            yield plain
