"""The one factory of the rich consoles the command lines print to
(``int8conf`` and ``detllm``): :func:`make_console`.

On a terminal a table fits the terminal's width (rich folds long cells).
Anywhere else (a pipe, a file, a CI log) nothing is wrapped: the console is
:data:`WIDE` columns wide with ``soft_wrap``, so every table row and every
line stays one line, whatever the length of its cells, and no colour codes
are written.
"""

from __future__ import annotations

#: Width of a console that is not a terminal: wider than any row we print.
WIDE = 100_000


def make_console(stderr: bool = False, file=None):
    """A ``rich.console.Console`` on ``file`` (default: ``sys.stdout``, or
    ``sys.stderr`` with ``stderr``; looked up when printing): the terminal's
    width on a terminal, else :data:`WIDE` columns with ``soft_wrap``."""
    from rich.console import Console
    con = Console(stderr=stderr, file=file)
    if con.is_terminal:
        return con
    return Console(stderr=stderr, file=file, width=WIDE, soft_wrap=True)
