"""The one range every user-given seed of int8conf must lie in.

Seeds pick faulted elements (``faults.mask``), seed bootstrap resampling
(``conformance.study``) and co-prompts (``detllm demo``), and the sweep
stores them in SQLite ``INTEGER`` columns, which hold signed 64-bit
integers. So a seed is an integer in ``[0, MAX_SEED]`` = ``[0, 2**63 - 1]``;
anything else (negative, 2**63 and beyond, not an integer) is refused with
one line naming the seed, before any work starts, instead of failing deep
inside a store or a generator.
"""

from __future__ import annotations

from reference.errors import SeedError

#: Largest accepted seed: the largest SQLite INTEGER (signed 64-bit).
MAX_SEED = 2**63 - 1


def check_seed(value, what: str = "seed") -> int:
    """``value`` as a seed (an int in ``[0, MAX_SEED]``).

    Args:
        value: an int, or text holding a decimal integer (surrounding blanks
            allowed); ``bool`` is refused.
        what: how the message names the seed (e.g. ``"--fault-seed"``).

    Returns:
        The seed as an int.

    Raises:
        SeedError: one line naming ``what`` and the value: not an integer,
            negative, or above ``MAX_SEED``.
    """
    if isinstance(value, bool):
        raise SeedError(f"{what} {value!r} is not an integer")
    if isinstance(value, str):
        try:
            v = int(value.strip())
        except ValueError:
            raise SeedError(f"{what} {value!r} is not an integer") from None
    elif isinstance(value, int):
        v = int(value)
    else:
        raise SeedError(f"{what} {value!r} is not an integer")
    if not 0 <= v <= MAX_SEED:
        raise SeedError(f"{what} {v} is out of range: seeds are integers in [0, 2**63 - 1]")
    return v
