"""What both command lines (``int8conf``, ``detllm``) share: the rich console (a terminal's width on a terminal, else
:data:`WIDE` columns for tables, cells wrapped at word boundaries, text lines never wrapped, no colour), argparse value types that fail with one line (exit 2), and output
folders created up front and removed again when the command refuses its input."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Iterable

from rich.console import Console

from reference.errors import Int8confError, SeedError
from reference.seeds import check_seed

#: table width off a terminal (a CI log, a pipe): ``$COLUMNS`` when set, else this
WIDE = 120


def make_console(stderr: bool = False, file=None):
    """A ``rich.console.Console`` on ``file`` (default stdout, or stderr with ``stderr``): on a terminal its width;
    otherwise tables at most ``$COLUMNS`` or :data:`WIDE` columns (rich wraps cells at word boundaries) and text
    lines unwrapped (``soft_wrap``: a path or a command stays whole on its line)."""
    con = Console(stderr=stderr, file=file)
    if con.is_terminal:
        return con
    cols = os.environ.get("COLUMNS", "")
    width = int(cols) if cols.isdigit() and int(cols) >= 40 else WIDE
    return Console(stderr=stderr, file=file, width=width, soft_wrap=True)


def int_at_least(lo: int):
    """argparse ``type`` factory: an integer >= ``lo``."""
    return lambda text: _parsed(text, int, lambda v: v >= lo, f"an integer >= {lo}", show_value=True)


def _parsed(text: str, conv, ok, want: str, show_value: bool = False):
    """``conv(text)`` if ``ok`` of it, else ArgumentTypeError ``expected <want>, got ...``."""
    try:
        v = conv(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"expected {want}, got {v if show_value else repr(text)}")
    return v


def int_between(lo: int, hi: int):
    """argparse ``type`` factory: an integer in [``lo``, ``hi``]."""
    at_least = int_at_least(lo)

    def parse(text: str) -> int:
        v = at_least(text)
        if v > hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {v}")
        return v

    return parse


non_negative_int = int_at_least(0)
positive_int = int_at_least(1)


def positive_int_list(text: str) -> list[int]:
    """argparse ``type``: comma-separated integers >= 1 (``1,8``); no empty item."""
    items = [t.strip() for t in text.split(",")]
    try:
        vals = [int(t) for t in items]
    except ValueError:
        vals = None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return vals


def name_list(text: str) -> str:
    """argparse ``type``: comma-separated names, blanks around each removed (``"a, b"`` -> ``"a,b"``)."""
    if not all(t.strip() for t in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return ",".join(t.strip() for t in text.split(","))


def unit_interval_float(text: str) -> float:
    """argparse ``type``: a number in [0, 1] (not NaN)."""
    return _parsed(text, float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def seed_int(text: str) -> int:
    """argparse ``type``: a seed in [0, 2**63 - 1] (:func:`reference.seeds.check_seed`)."""
    try:
        return check_seed(text)
    except SeedError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


#: the most seconds any time option takes (about 11.6 days; the OS's waits refuse much more: OverflowError)
MAX_SECONDS = 1e6
#: the least seconds a kernel call may be given (``--timeout``): its child process forks, unpickles the case and answers
MIN_CALL_SECONDS = 1.0


def positive_seconds(text: str) -> float:
    """argparse ``type``: seconds, a float in (0, :data:`MAX_SECONDS`] (NaN refused)."""
    return _parsed(text, float, lambda v: 0 < v <= MAX_SECONDS, f"seconds > 0 (at most {MAX_SECONDS:g})")


def call_seconds(text: str) -> float:
    """argparse ``type``: a kernel call's time limit, seconds in [:data:`MIN_CALL_SECONDS`, :data:`MAX_SECONDS`]
    (less would fail a correct kernel as hung)."""
    want = f"seconds >= {MIN_CALL_SECONDS:g} (at most {MAX_SECONDS:g})"
    return _parsed(text, float, lambda v: MIN_CALL_SECONDS <= v <= MAX_SECONDS, want)


def ensure_out_dir(
    out: Path, option: str = "--out", what: str = "reports directory", files: Iterable[str] = ()
) -> None:
    """Create ``out`` now and check it is writable, so a bad ``--out`` fails before any work; ``files`` (to be written
    atomically inside it later) must not be directories. Raises Int8confError naming ``option`` and path."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise Int8confError(f"{option} {out}: exists and is not a directory") from None
    except OSError as e:
        raise Int8confError(
            f"{option} {out}: cannot create {what} ({e.strerror or type(e).__name__}"
            f"{': ' + str(e.filename) if e.filename else ''})"
        ) from None
    # creating a file in a directory takes write and search permission
    if not os.access(out, os.W_OK | os.X_OK):
        raise Int8confError(f"{option} {out}: not writable")
    for name in files:
        f = out / name
        if f.is_dir() and not f.is_symlink():  # a rename cannot replace a directory
            raise Int8confError(f"{option} {out}: {name} is a directory, not a file")


def remove_empty_dirs(dirs) -> None:
    """Remove each of ``dirs`` (deepest first) that is an empty directory."""
    for d in dirs:
        try:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        except OSError:
            pass


@contextlib.contextmanager
def removed_if_refused(*outs: Path):
    """If the block raises, the folders of ``outs`` it created that are still empty are removed again: a refused run
    leaves nothing behind. Yields those folders."""
    created = dict.fromkeys(d for p in outs for d in (p, *p.parents) if not d.exists())
    created = sorted(created, key=lambda d: len(d.parts), reverse=True)  # deepest first
    try:
        yield created
    except BaseException:  # noqa: BLE001 -- cleanup then re-raise: a refused run leaves no empty folders
        remove_empty_dirs(created)
        raise
