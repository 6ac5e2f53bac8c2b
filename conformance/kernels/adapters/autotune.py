"""Pinning a Triton ``Autotuner`` to one of its configs: Triton launches a single config without timing it
(``Autotuner.run``), so a conformance run calls the kernel the same way every time."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def one_config(autotuner: Any, config: Any) -> Iterator[Any]:
    """Inside the block ``autotuner.configs`` is ``[config]`` (yielded); the list is restored after, also on error."""
    old = autotuner.configs
    autotuner.configs = [config]
    try:
        yield config
    finally:
        autotuner.configs = old
