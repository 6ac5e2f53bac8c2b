"""``int8conf pow2``: reconstruction gate, then a power-of-two-scale W8A8 checkpoint.

``int8conf pow2 --committed DIR --rule nearest|ceiling [--model DIR] [--out DIR] [--gate-only]``
    Rebuild the committed own-scale checkpoint from the parent and require a
    byte-for-byte match (reconstruction gate); then requantize every weight
    from the parent with power-of-two per-channel scales and write it.

``--model`` defaults to the shipped default model. Errors are one line
(Int8confError, printed by ``conformance.cli.main``).
"""

from __future__ import annotations

import argparse

from conformance.commands.options import describe_checkpoint, parent_model_dir_arg
from reference.model.artifacts import derived_checkpoint


def _run_pow2(args: argparse.Namespace) -> int:
    from reference.model.pow2 import build_pow2_checkpoint, reconstruction_gate

    model = parent_model_dir_arg(args.model)
    gate = reconstruction_gate(model, args.committed)
    print(
        f"reconstruction gate passed: {gate['tensors']} tensors of {args.committed} rebuilt byte for byte "
        f"(state digest {gate['state_digest'][:16]})"
    )
    if args.gate_only:
        return 0
    if args.out is None:
        ck = derived_checkpoint(model, f"pow2-{args.rule}", args.cache)
    else:
        ck = build_pow2_checkpoint(model, args.committed, args.out, rule=args.rule)
    print(describe_checkpoint(ck))
    return 0


def register(subparsers) -> None:
    """Add the ``pow2`` subcommand (sets ``func(args) -> exit code``)."""
    q = subparsers.add_parser(
        "pow2",
        help="reconstruction gate, then a power-of-two-scale W8A8 checkpoint",
        description=__doc__.split("\n\n")[1],
    )
    q.add_argument("--model", help="float parent Qwen3 directory (default: the shipped default model)")
    q.add_argument("--committed", required=True, help="the committed own-scale W8A8 checkpoint of that parent")
    q.add_argument(
        "--rule",
        default="nearest",
        choices=("nearest", "ceiling"),
        help="power-of-two weight scale: nearest (round log2 of the own scale) or "
        "ceiling (next power of two up: no clipping) (default nearest)",
    )
    q.add_argument("--out", help="output directory (default: the artifact cache)")
    q.add_argument("--gate-only", action="store_true", help="run the reconstruction gate only")
    q.add_argument("--cache", help="artifact cache directory")
    q.set_defaults(func=_run_pow2)
