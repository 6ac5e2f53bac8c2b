"""Shared argparse pieces of the ``int8conf`` (and ``detllm``) subcommands:
integer types with one-line errors and the options every model-run command
takes."""

from __future__ import annotations

import argparse
from pathlib import Path

from reference.model.artifacts import default_parent_dir
from reference.model.assets import default_model_dir
from reference.model.weights import SCALE_MODES


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
        choices=SCALE_MODES,
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
