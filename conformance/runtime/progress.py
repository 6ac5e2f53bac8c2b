"""Progress of a long command (``int8conf check``): rich live status on a terminal; elsewhere
(CI logs, pipes) :class:`PlainProgress` prints self-contained lines ``int8conf check: <label>:
<done>/<total> cases, <elapsed> s elapsed: <latest step>`` at every non-case step, every
``every_cases`` cases or ``every_s`` seconds (heartbeat thread); nothing with ``--quiet``.
A finished case is the suite's line :data:`CASE_LINE`."""

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
    """Periodic plain progress lines for a stream that is not a terminal.

    Use as a context manager (starts / stops the heartbeat thread); the
    instance is the ``progress`` callback of ``run_conformance`` (one text
    line per step). Thread-safe: the heartbeat and the caller share a lock.

    Args:
        label: what runs (e.g. ``"triton"``), the prefix of every line.
        stream: where lines go (default ``sys.stderr`` at print time); flushed
            after each line.
        every_cases: print after this many finished cases (>= 1).
        every_s: print after this many seconds without a line (> 0); also the
            heartbeat period.
        clock: monotonic seconds (tests pass a fake one).
        heartbeat: start the heartbeat thread in ``__enter__``.

    Raises:
        ValueError: ``every_cases < 1`` or ``every_s <= 0``.
    """

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

    # -- the suite's callback
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
            if (
                self.done - self._last_done >= self.every_cases
                or self.done == self.total
                or self._clock() - self._last_t >= self.every_s
            ):
                self._print()

    def _print(self) -> None:
        """Write the status line (caller holds the lock)."""
        now = self._clock()
        cases = "" if self.total is None else f"{self.done}/{self.total} cases, "
        stream = self._stream if self._stream is not None else sys.stderr
        print(
            f"int8conf check: {self.label}: {cases}{now - self._t0:.1f} s elapsed: {self.step}", file=stream, flush=True
        )
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

    # -- context manager: the heartbeat thread
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
    """The ``progress`` callback for one suite run, as a context manager.

    Args:
        label: kernel name shown in the display.
        console: the ``rich.console.Console`` progress goes to (the CLI's
            stderr console); its ``is_terminal`` picks the display (rich
            honours ``FORCE_COLOR`` / ``TTY_COMPATIBLE`` / ``TERM=dumb``).
        quiet: no display at all (yields None).
        every_cases, every_s: :class:`PlainProgress` periods (non-terminal).

    Yields:
        None (quiet), ``rich`` status ``update`` (terminal: a spinner showing
        the latest line), or a :class:`PlainProgress` writing to
        ``console.file`` (anything else).
    """
    if quiet:
        yield None
    elif console.is_terminal:
        with console.status(f"checking {label}") as status:
            yield status.update
    else:
        with PlainProgress(label, console.file, every_cases=every_cases, every_s=every_s) as plain:
            yield plain
