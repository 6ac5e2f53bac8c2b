"""``int8conf perplexity``: held-out perplexity, bf16 or W8A8 through a kernel.

``int8conf perplexity [--model DIR] [--kernel NAME[,NAME...]|all] [--scale-mode MODE]
                      [--checkpoint DIR] [--windows N] [--window-len L] [--track-acc] [--json]``
    Held-out perplexity (``reference.model.forward.perplexity``) on the fixed
    evaluation windows (``reference.model.assets.eval_windows`` with the model's
    tokenizer): ``exp`` of the mean next-token NLL over every window position
    but the first. MODE ``bf16`` runs the float model as is (no kernel);
    ``own`` quantizes every decoder linear with the reference quantizer
    (llm-compressor's per-channel absmax/127.5 rule, == the committed
    compressed-tensors checkpoint); ``pow2-nearest`` / ``pow2-ceiling``
    requantize from the parent weights with power-of-two per-channel scales.
    ``--checkpoint`` takes the int8 weights and scales from a compressed-tensors
    W8A8 checkpoint instead (ours or another tool's; embeddings and norms
    still come from ``--model``); its scale mode is read from the checkpoint
    (our ``int8conf.scale_rule``, else ``pow2`` when every weight_scale is an
    exact power of two), not from ``--scale-mode``. Activations are always
    quantized per token dynamically; ``lm_head`` stays bf16. A window longer
    than the model's context (``max_position_embeddings``) is an error.

``--model`` defaults to the shipped default model, ``--kernel`` to ``cpu``.
Errors are one line (Int8confError, printed by ``conformance.cli.main``).

"""

from __future__ import annotations

import argparse
import json
import time

from conformance.commands.options import add_model_run_options, default_model_dir_arg
from reference.command_line import positive_int
from reference.model.weights import check_checkpoint_mode, checkpoint_weights, load_weights


def _run_perplexity(args: argparse.Namespace) -> int:
    from conformance.study.model_run import build_model, resolve_kernel_list
    from reference.model import forward as wf
    from reference.model.corpus import eval_windows
    from reference.model.tokenizer import load_tokenizer

    mdir = default_model_dir_arg(args.model)
    check_checkpoint_mode(args.checkpoint, args.scale_mode)
    kernels = [None] if args.scale_mode == "bf16" else resolve_kernel_list(args.kernel)
    base = wf.load_model(mdir)
    wf.check_context(args.window_len, base.config, f"--window-len {args.window_len}")
    windows = eval_windows(load_tokenizer(mdir), args.windows, args.window_len)
    mode, label = args.scale_mode, f"{args.scale_mode} scales"
    weights = None
    if args.checkpoint is not None:
        weights, mode, label = checkpoint_weights(base, args.checkpoint)
    elif args.scale_mode != "bf16":
        weights = load_weights(base, args.scale_mode)
    records = []
    for spec in kernels:
        model, stats, man = build_model(
            mdir,
            args.scale_mode,
            spec,
            args.checkpoint,
            args.track_acc,
            base_model=base,
            weights=weights,
            kernel_scale_mode=mode,
        )
        t0 = time.perf_counter()
        ppl = wf.perplexity(model, windows, args.batch_size)
        rec = {
            "perplexity": ppl,
            "model": str(mdir),
            "scale_mode": mode,
            "scale_label": label,
            "kernel": None if spec is None else spec.name,
            "kernel_path": man.get("path"),
            "checkpoint": args.checkpoint,
            "windows": args.windows,
            "window_len": args.window_len,
            "predicted_tokens": args.windows * (args.window_len - 1),
            "elapsed_s": round(time.perf_counter() - t0, 2),
        }
        if stats is not None:
            rec["max_abs_acc"] = stats.max_abs_acc
            rec["layers_acc_ge_2_24"] = stats.layers_at_or_above(wf.FP32_EXACT_INT)
        records.append(rec)
        if not args.json:
            what = (
                "bf16 model"
                if spec is None
                else (f"W8A8 {label}, kernel {spec.name}" + (f" ({rec['kernel_path']})" if rec["kernel_path"] else ""))
            )
            print(
                f"perplexity {ppl:.4f}  [{what}; {args.windows} windows x {args.window_len} "
                f"tokens, {rec['predicted_tokens']} predicted; {rec['elapsed_s']} s]"
            )
            if stats is not None:
                big = rec["layers_acc_ge_2_24"]
                top = max(stats.max_abs_acc.items(), key=lambda kv: kv[1])
                print(
                    f"  layers with max |acc| >= 2^24: {len(big)} of {len(stats.max_abs_acc)}"
                    f"{(': ' + ', '.join(big)) if big else ''}; largest {top[1]} in {top[0]}"
                )
    if args.json:
        print(json.dumps(records if len(records) > 1 else records[0], indent=2))
    return 0


def register(subparsers) -> None:
    """Add the ``perplexity`` subcommand (sets ``func(args) -> exit code``)."""
    p = subparsers.add_parser(
        "perplexity",
        help="held-out perplexity, bf16 or W8A8 through a kernel",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_run_options(p)
    p.add_argument("--windows", type=int, default=8, help="evaluation windows (default 8)")
    p.add_argument("--window-len", type=int, default=256, help="tokens per window (default 256)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="windows per forward pass (>= 1)")
    p.add_argument(
        "--track-acc", action="store_true", help="also report per-layer max |acc| and the layers at or above 2^24"
    )
    p.set_defaults(func=_run_perplexity)
