"""``int8conf capture``: capture every decoder linear's operands of a Qwen3 model.

``int8conf capture [--model DIR] [--out DIR] [--w8a8 DIR] [--windows N]
[--window-len L] [--tokens-per-window P] [--engine f64|hf] [--device D] [--no-raw] [--fresh]``

Runs the float model on held-out evaluation windows and writes, per layer,
the per-token-quantized input activations (plus the raw bf16 rows) and a
manifest that references the weight operands (own scales and power-of-two
scales) by digest. Re-running the same command resumes an interrupted
capture. ``--model`` defaults to the shipped default model and ``--out`` to
``<cache>/captures/<model digest[:16]>``. To rebuild the shipped captures:
``int8conf capture --fresh --out reference/model/assets/captures``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.kernels.runner import validate_device
from reference.model.artifacts import cache_dir, default_parent_dir, parent_digest


def _run_capture(args: argparse.Namespace) -> int:
    from reference.model.capture import capture_model, remove_capture

    validate_device(args.device)
    model = Path(args.model) if args.model else default_parent_dir()
    out = Path(args.out) if args.out else cache_dir(args.cache) / "captures" / parent_digest(model)[:16]
    if args.fresh:
        removed = remove_capture(out)
        if removed:
            print(f"removed the previous capture in {out} ({removed} files)")
    cs = capture_model(
        model,
        out,
        windows=args.windows,
        window_len=args.window_len,
        tokens_per_window=args.tokens_per_window,
        w8a8_dir=args.w8a8,
        cache=args.cache,
        engine=args.engine,
        store_raw=not args.no_raw,
        progress=None if args.quiet else print,
        device=args.device or "cpu",
    )
    s = cs.manifest["summary"]
    print(f"captured {s['layers']} layers of {model} into {out}")
    print(
        "layers with observed |acc| >= 2^24: "
        + ", ".join(f"{k} {v}" for k, v in s["layers_acc_ge_2p24"].items())
        + "; max |acc|: "
        + ", ".join(f"{k} {v}" for k, v in s["max_acc_absmax"].items())
    )
    return 0


def register(subparsers) -> None:
    """Add the ``capture`` subcommand (sets ``func(args) -> exit code``)."""
    from reference.model.capture import DEFAULT_SETTINGS

    p = subparsers.add_parser(
        "capture", help="capture real W8A8 layer operands of a Qwen3 model", description=__doc__.split("\n\n")[2]
    )
    p.add_argument("--model", help="float Qwen3 checkpoint directory (default: the shipped default model)")
    p.add_argument("--out", help="capture directory (default: <cache>/captures/<model digest>)")
    p.add_argument("--w8a8", help="existing compressed-tensors W8A8 checkpoint to use for the own scales")
    p.add_argument(
        "--windows",
        type=int,
        default=DEFAULT_SETTINGS["windows"],
        metavar="N",
        help=f"held-out windows run through the model (default {DEFAULT_SETTINGS['windows']})",
    )
    p.add_argument(
        "--window-len",
        type=int,
        default=DEFAULT_SETTINGS["window_len"],
        metavar="L",
        help=f"tokens per window (default {DEFAULT_SETTINGS['window_len']})",
    )
    p.add_argument(
        "--tokens-per-window",
        type=int,
        default=DEFAULT_SETTINGS["tokens_per_window"],
        metavar="P",
        help="token positions per window whose activation rows are "
        f"kept as the capture's M rows (default "
        f"{DEFAULT_SETTINGS['tokens_per_window']})",
    )
    p.add_argument(
        "--engine",
        default="f64",
        choices=("f64", "hf"),
        help="f64: machine-independent float64 forward (default); hf: transformers bf16 forward",
    )
    p.add_argument(
        "--device",
        default=None,
        help="where the f64 forward and the derived checkpoints' quantizers run: cpu (default), cuda, cuda:N "
        "(the same capture on any device)",
    )
    p.add_argument("--no-raw", action="store_true", help="do not store the raw bf16 input rows")
    p.add_argument("--cache", help="artifact cache directory")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="first delete the capture already in --out (only the files its manifest lists)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-layer lines")
    p.set_defaults(func=_run_capture)
