"""The range of every user-given seed: an integer in ``[0, MAX_SEED]`` = ``[0, 2**63 - 1]`` (the sweep stores seeds in
SQLite ``INTEGER`` columns); anything else is refused with one line before any work starts."""

from __future__ import annotations

from reference.errors import SeedError

#: Largest accepted seed: the largest SQLite INTEGER (signed 64-bit).
MAX_SEED = 2**63 - 1


def check_seed(value, what: str = "seed") -> int:
    """``value`` (an int, or text of a decimal integer; not a bool) as an int seed; SeedError naming ``what`` (e.g.
    ``"--fault-seed"``) when not an integer, negative or above ``MAX_SEED``."""
    try:
        v = int(value.strip()) if isinstance(value, str) else value
    except ValueError:
        v = None
    if isinstance(v, bool) or not isinstance(v, int):
        raise SeedError(f"{what} {value!r} is not an integer")
    v = int(v)
    if not 0 <= v <= MAX_SEED:
        raise SeedError(f"{what} {v} is out of range: seeds are integers in [0, 2**63 - 1]")
    return v
