"""``int8conf quantize``: a compressed-tensors W8A8 checkpoint of a Qwen3 model.

``int8conf quantize [--model DIR] [--out DIR] [--scales own|pow2-nearest|pow2-ceiling]``
    Quantize a float Qwen3 checkpoint to a compressed-tensors W8A8 checkpoint
    (int8 per-channel weights, dynamic per-token activations). Without
    ``--out`` the result goes to the artifact cache (``$INT8CONF_CACHE`` or
    ``~/.cache/int8conf``) and its path is printed. ``pow2-*`` scales run the
    reconstruction gate first.

``--model`` defaults to the shipped default model. Errors are one line
(Int8confError, printed by ``conformance.cli.main``).
"""

from __future__ import annotations

import argparse

from conformance.commands.options import describe_checkpoint, parent_model_dir_arg
from reference.model.artifacts import derived_checkpoint


def _run_quantize(args: argparse.Namespace) -> int:
    from reference.model.compressed_tensors import build_w8a8_checkpoint
    from reference.model.pow2 import build_pow2_checkpoint

    model = parent_model_dir_arg(args.model)
    if args.out is None:
        ck = derived_checkpoint(model, args.scales, args.cache)
    elif args.scales == "own":
        ck = build_w8a8_checkpoint(model, args.out)
    else:
        committed = derived_checkpoint(model, "own", args.cache).dir
        ck = build_pow2_checkpoint(model, committed, args.out, rule=args.scales.split("-", 1)[1])
    print(describe_checkpoint(ck))
    return 0


def register(subparsers) -> None:
    """Add the ``quantize`` subcommand (sets ``func(args) -> exit code``)."""
    p = subparsers.add_parser(
        "quantize",
        help="write a compressed-tensors W8A8 checkpoint of a Qwen3 model",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("--model", help="float Qwen3 checkpoint directory (default: the shipped default model)")
    p.add_argument("--out", help="output directory (default: the artifact cache)")
    p.add_argument(
        "--scales",
        default="own",
        choices=("own", "pow2-nearest", "pow2-ceiling"),
        help="per-channel weight scales (default: own = llm-compressor's absmax/127.5)",
    )
    p.add_argument("--cache", help="artifact cache directory (default: $INT8CONF_CACHE or ~/.cache/int8conf)")
    p.set_defaults(func=_run_quantize)
