"""Silence third-party import-time notices (torchao's "Failed to load ...so", torch pytree's Enum
deprecation, bitsandbytes' CPU gemm_4bit notice) in the CLI and worker processes; errors from those
loggers still show. Not applied for library users."""

import logging

#: logger name -> level below which its records are dropped
QUIET_LOGGERS = {
    "torchao": logging.ERROR,
    "torch.utils._pytree": logging.ERROR,
    "bitsandbytes.backends.cpu.ops": logging.ERROR,
}


def silence_import_noise() -> None:
    """Raise the level of :data:`QUIET_LOGGERS` (idempotent)."""
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
