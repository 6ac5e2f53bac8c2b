"""Shared argparse pieces of the ``int8conf`` (and ``detllm``) subcommands:
integer types with one-line errors and the options every model-run command
takes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reference.model.artifacts import default_parent_dir
from reference.model.assets import default_model_dir
from reference.model.weights import WEIGHT_SCALE_MODES


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option (``--faults`` for ``--inject``): it still works, storing into the new
    option's ``dest`` (a flag when ``nargs=0``), after a one-line note on stderr naming the new spelling.
    Hidden from ``--help``. Use :func:`add_deprecated_alias`."""

    def __init__(self, option_strings, dest, new: str = "", nargs=None, const=None, **kw):
        super().__init__(option_strings, dest, nargs=nargs, const=const, help=argparse.SUPPRESS, **kw)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_deprecated_alias(p: argparse.ArgumentParser, old: str, new: str, dest: str, flag: bool = False, **kw) -> None:
    """Register ``old`` as a deprecated spelling of ``new`` (both ``--x`` strings) storing into ``dest``;
    ``flag``: a store-true option; ``kw``: ``type`` / ``metavar`` of a valued one."""
    if flag:
        kw |= {"nargs": 0, "const": True}
    p.add_argument(old, dest=dest, action=DeprecatedAlias, new=new, default=argparse.SUPPRESS, **kw)


def default_model_dir_arg(arg) -> Path:
    """``--model`` value as a Path, or the shipped default model when None."""
    if arg is not None:
        return Path(arg)
    return default_model_dir()


def add_model_run_options(p: argparse.ArgumentParser) -> None:
    """Add ``--model --kernel --scale-mode --checkpoint --json`` (the model-run
    commands ``perplexity`` and ``generate``)."""
    p.add_argument("--model", help="Qwen3 directory (default: the shipped default model)")
    p.add_argument(
        "--kernel",
        default="cpu",
        help="kernel for every decoder linear: a built-in (cpu, int_mm, triton), "
        "pkg.module:function or entry point (default: cpu); perplexity also "
        "takes a comma list or 'all'",
    )
    p.add_argument(
        "--scale-mode",
        default="own",
        choices=WEIGHT_SCALE_MODES,
        help="weight scales: own (reference quantizer), pow2-nearest, pow2-ceiling "
        "(requantized from the parent), or bf16 (no quantization)",
    )
    p.add_argument(
        "--checkpoint",
        help="take int8 weights + scales from this compressed-tensors W8A8 checkpoint instead of quantizing --model",
    )
    p.add_argument("--json", action="store_true", help="print a JSON record")


def parent_model_dir_arg(arg) -> Path:
    """``--model`` of the checkpoint commands as a Path, or the shipped
    default model (the parent of every derived checkpoint) when None."""
    if arg is not None:
        return Path(arg)
    return default_parent_dir()


def describe_checkpoint(ck) -> str:
    """One line for a written W8A8 checkpoint: directory, linears, state
    digest and scale rule (``ck``: ``W8A8Checkpoint``)."""
    n = len(ck.weights)
    return f"{ck.dir}  ({n} int8 linears, state digest {ck.digest[:16]}, scales {ck.meta.get('scale_rule', '?')})"
