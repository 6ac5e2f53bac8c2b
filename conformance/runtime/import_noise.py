"""Third-party import-time notices that say nothing about a run, silenced
for the command line, the sweep's and the scoreboard's worker processes (not for library
users, whose logging is their own).

* ``torchao`` logs "Failed to load <extension>.so" for each CUDA extension
  it cannot load on a machine without that GPU architecture (it is imported
  by ``transformers`` and ``compressed-tensors``);
* ``torch.utils._pytree`` warns that torchao registers Enum subclasses the
  old way (a deprecation in torch 2.13 aimed at torchao's authors);
* ``bitsandbytes.backends.cpu.ops`` logs "Failed to load CPU
  gemm_4bit_forward from kernels-community" on an AVX512-BF16 CPU without
  the optional ``kernels`` package (a 4-bit path this project never uses).

Errors from those loggers still show.
"""

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
