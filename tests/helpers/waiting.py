"""Waits for an event (a file or row appearing, a pid dying, a line on a pipe), never for a fixed
time: a loaded machine only makes a wait longer. :data:`CEILING` ends a wait that would never end
(a hang) with a failure naming what was awaited."""

from __future__ import annotations

import select
import time

#: seconds before a wait gives up: only a hang, never a slow machine, gets this far
CEILING = 300.0


def wait_until(found, what: str, ceiling: float = CEILING):
    """The first truthy value of ``found()``, asked every 10 ms. Raises AssertionError naming
    ``what`` after ``ceiling`` seconds."""
    end = time.monotonic() + ceiling
    while True:
        x = found()
        if x:
            return x
        if time.monotonic() > end:
            raise AssertionError(f"waited {ceiling:g} s for {what}")
        time.sleep(0.01)


def read_line(pipe, what: str, ceiling: float = CEILING) -> str:
    """The next line of an unbuffered binary pipe (``Popen(..., bufsize=0)``), decoded and
    stripped; ``""`` at its end (every writer gone). Raises AssertionError naming ``what`` after
    ``ceiling`` seconds without a line."""
    if not select.select([pipe], [], [], ceiling)[0]:
        raise AssertionError(f"waited {ceiling:g} s for {what}")
    return pipe.readline().decode().strip()
