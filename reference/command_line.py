"""What both command lines (``int8conf`` and ``detllm``) share: the rich
console factory :func:`make_console`, argparse value types that fail with one
line, and output folders created up front (removed again when refused).

On a terminal a table fits the terminal's width (rich folds long cells).
Anywhere else (a pipe, a file, a CI log) nothing is wrapped: the console is
:data:`WIDE` columns wide with ``soft_wrap``, so every table row and every
line stays one line, whatever the length of its cells, and no colour codes
are written.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Iterable

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


def int_at_least(lo: int):
    """argparse ``type`` factory: an integer >= ``lo`` (argparse prints one
    error line and exits 2 otherwise; e.g. ``int_at_least(-1)`` for ``detllm
    demo --context-tokens``, where -1 means "the maximum")."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {v}")
        return v

    return parse


def int_between(lo: int, hi: int):
    """argparse ``type`` factory: an integer in [``lo``, ``hi``] (one error
    line, exit 2, before any work; e.g. ``study pow2 --prompts``, 1-8)."""
    at_least = int_at_least(lo)

    def parse(text: str) -> int:
        v = at_least(text)
        if v > hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {v}")
        return v

    return parse


#: argparse ``type`` for counts that may be 0 (e.g. ``--examples``);
#: raises argparse.ArgumentTypeError for a non-integer or a negative value.
non_negative_int = int_at_least(0)


#: argparse ``type`` for counts that must be at least 1 (e.g. ``--reps``).
positive_int = int_at_least(1)


def positive_int_list(text: str) -> list[int]:
    """argparse ``type`` for a comma-separated list of integers >= 1
    (e.g. ``detllm bench --batches 1,8``).

    Raises:
        argparse.ArgumentTypeError: empty, an empty item (``1,,2``), a
            non-integer or a value < 1 (argparse prints one line, exit 2).
    """
    items = [t.strip() for t in text.split(",")]
    try:
        vals = [int(t) for t in items]
    except ValueError:
        vals = None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return vals


def name_list(text: str) -> str:
    """argparse ``type`` for a comma-separated list of names (e.g. kernels):
    returns ``text`` with the blanks around each name removed (``"a, b"`` ->
    ``"a,b"``).

    Raises:
        argparse.ArgumentTypeError: empty or with an empty item (``a,,b``).
    """
    if not all(t.strip() for t in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return ",".join(t.strip() for t in text.split(","))


def unit_interval_float(text: str) -> float:
    """argparse ``type`` for a number in [0, 1] (e.g. SmoothQuant's migration
    strength alpha).

    Raises:
        argparse.ArgumentTypeError: not a number, NaN or outside [0, 1].
    """
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:  # also False for NaN
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return v


def seed_int(text: str) -> int:
    """argparse ``type`` for a seed: an integer in [0, 2**63 - 1]
    (``reference.seeds.check_seed``).

    Raises:
        argparse.ArgumentTypeError: not an integer, negative or too large
            (argparse prints one error line naming the seed and exits 2).
    """
    from reference.errors import SeedError
    from reference.seeds import check_seed

    try:
        return check_seed(text)
    except SeedError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_seconds(text: str) -> float:
    """argparse ``type`` for a timeout in seconds: a finite float > 0.

    Raises:
        argparse.ArgumentTypeError: not a number, <= 0, NaN or infinite
            (argparse prints one error line and exits 2).
    """
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return v


def ensure_out_dir(
    out: Path, option: str = "--out", what: str = "reports directory", files: Iterable[str] = ()
) -> None:
    """Create an output directory now and check it is writable, so a bad
    ``--out`` fails before any work is done (check, gate, sweep, detllm
    prepare, the pytest plugin's ``--int8conf-reports``); ``what`` names the
    directory in the error. ``files`` are the names the command will later
    (re)write inside ``out`` (atomically: temp file + rename): each must not
    exist as a directory. Wrap the call in :func:`removed_if_refused` where a
    refusal must leave no directory behind.

    Raises:
        Int8confError: ``out`` (or a parent) is a file, cannot be created, or
            is not writable, or one of ``files`` is a directory (one line
            naming the option and path).
    """
    import os

    from reference.errors import Int8confError

    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise Int8confError(f"{option} {out}: exists and is not a directory") from None
    except OSError as e:
        raise Int8confError(
            f"{option} {out}: cannot create {what} "
            f"({e.strerror or type(e).__name__}"
            f"{': ' + str(e.filename) if e.filename else ''})"
        ) from None
    # creating a file in a directory takes write and search permission
    if not os.access(out, os.W_OK | os.X_OK):
        raise Int8confError(f"{option} {out}: not writable")
    for name in files:
        f = out / name
        if f.is_dir() and not f.is_symlink():  # a rename cannot replace a directory
            raise Int8confError(f"{option} {out}: {name} is a directory, not a file")


def missing_dirs(*paths: Path) -> list[Path]:
    """``paths`` and their parents that do not exist yet, each once, deepest first
    (what :func:`remove_empty_dirs` may take away again)."""
    missing = dict.fromkeys(d for p in paths for d in (p, *p.parents) if not d.exists())
    return sorted(missing, key=lambda d: len(d.parts), reverse=True)


def remove_empty_dirs(dirs) -> None:
    """Remove each of ``dirs`` (in order: deepest first) that is an empty directory;
    any other, or one that cannot be removed, stays."""
    for d in dirs:
        try:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        except OSError:
            pass


@contextlib.contextmanager
def removed_if_refused(*outs: Path):
    """Around the part of a command that may refuse its input after its output
    directories were made (``ensure_out_dir``): if the block raises, ``outs`` and
    the parents that did not exist before the block are removed again, deepest
    first, those that are still empty -- a refused run leaves nothing behind.
    Yields those folders (:func:`missing_dirs`)."""
    created = missing_dirs(*outs)
    try:
        yield created
    except BaseException:
        remove_empty_dirs(created)
        raise
