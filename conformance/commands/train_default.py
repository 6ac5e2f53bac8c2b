"""``int8conf train-default [--tokenizer-only] [--out DIR] [--device D] ...``:
train the shipped default Qwen3 model.

Trains the byte-level BPE tokenizer on the train works, then (unless
``--tokenizer-only``) the small Qwen3 model (a GPU is expected; on an H200
training takes ~25 s). Writing into the shipped dirs refreshes
``reference/model/assets/assets_manifest.json``. The work is done by
``reference.model.train``.
"""

from __future__ import annotations

import argparse

from reference.model import train as job


def _run(args: argparse.Namespace) -> int:
    return job.run(args)


def register(subparsers) -> None:
    """Add the ``train-default`` subcommand (sets ``func(args) -> exit code``)."""
    p = subparsers.add_parser(
        "train-default",
        help="train the shipped default Qwen3 model (and tokenizer)",
        description=job.__doc__.split("\n\n")[0],
    )
    job.add_arguments(p)
    p.set_defaults(func=_run)
