"""``int8conf quantize`` and ``int8conf pow2``: W8A8 checkpoints of a Qwen3 model.

``int8conf quantize [--model DIR] [--out DIR] [--scales own|pow2-nearest|pow2-ceiling]``
    Quantize a float Qwen3 checkpoint to a compressed-tensors W8A8 checkpoint
    (int8 per-channel weights, dynamic per-token activations). Without
    ``--out`` the result goes to the artifact cache (``$INT8CONF_CACHE`` or
    ``~/.cache/int8conf``) and its path is printed. ``pow2-*`` scales run the
    reconstruction gate first.

``int8conf pow2 --committed DIR --rule nearest|ceiling [--model DIR] [--out DIR] [--gate-only]``
    Rebuild the committed own-scale checkpoint from the parent and require a
    byte-for-byte match (reconstruction gate); then requantize every weight
    from the parent with power-of-two per-channel scales and write it.

``--model`` defaults to the shipped default model. Errors are one line
(Int8confError, printed by ``conformance.cli.main``).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _model_dir(arg):
    if arg is not None:
        return Path(arg)
    from reference.artifacts import default_parent_dir
    return default_parent_dir()


def _describe(ck) -> str:
    n = len(ck.weights)
    return f"{ck.dir}  ({n} int8 linears, state digest {ck.digest[:16]}, scales {ck.meta.get('scale_rule', '?')})"


def _run_quantize(args: argparse.Namespace) -> int:
    from reference.artifacts import derived_checkpoint
    from reference.compressed_tensors import build_w8a8_checkpoint
    from reference.pow2 import build_pow2_checkpoint

    model = _model_dir(args.model)
    if args.out is None:
        ck = derived_checkpoint(model, args.scales, args.cache)
    elif args.scales == "own":
        ck = build_w8a8_checkpoint(model, args.out)
    else:
        committed = derived_checkpoint(model, "own", args.cache).dir
        ck = build_pow2_checkpoint(model, committed, args.out, rule=args.scales.split("-", 1)[1])
    print(_describe(ck))
    return 0


def _run_pow2(args: argparse.Namespace) -> int:
    from reference.artifacts import derived_checkpoint
    from reference.pow2 import build_pow2_checkpoint, reconstruction_gate

    model = _model_dir(args.model)
    gate = reconstruction_gate(model, args.committed)
    print(f"reconstruction gate passed: {gate['tensors']} tensors of {args.committed} rebuilt byte for byte "
          f"(state digest {gate['state_digest'][:16]})")
    if args.gate_only:
        return 0
    if args.out is None:
        ck = derived_checkpoint(model, f"pow2-{args.rule}", args.cache)
    else:
        ck = build_pow2_checkpoint(model, args.committed, args.out, rule=args.rule)
    print(_describe(ck))
    return 0


def register(subparsers) -> None:
    """Add the ``quantize`` and ``pow2`` subcommands to an argparse
    subparsers object; each sets ``func(args) -> exit code``."""
    p = subparsers.add_parser("quantize", help="write a compressed-tensors W8A8 checkpoint of a Qwen3 model",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("--model", help="float Qwen3 checkpoint directory (default: the shipped default model)")
    p.add_argument("--out", help="output directory (default: the artifact cache)")
    p.add_argument("--scales", default="own", choices=("own", "pow2-nearest", "pow2-ceiling"),
                   help="per-channel weight scales (default: own = llm-compressor's absmax/127.5)")
    p.add_argument("--cache", help="artifact cache directory (default: $INT8CONF_CACHE or ~/.cache/int8conf)")
    p.set_defaults(func=_run_quantize)

    q = subparsers.add_parser("pow2", help="reconstruction gate, then a power-of-two-scale W8A8 checkpoint",
                              description=__doc__.split("\n\n")[2])
    q.add_argument("--model", help="float parent Qwen3 directory (default: the shipped default model)")
    q.add_argument("--committed", required=True, help="the committed own-scale W8A8 checkpoint of that parent")
    q.add_argument("--rule", default="nearest", choices=("nearest", "ceiling"))
    q.add_argument("--out", help="output directory (default: the artifact cache)")
    q.add_argument("--gate-only", action="store_true", help="run the reconstruction gate only")
    q.add_argument("--cache", help="artifact cache directory")
    q.set_defaults(func=_run_pow2)
