"""``int8conf perplexity`` and ``int8conf generate``: the model run W8A8 through a kernel.

``int8conf perplexity [--model DIR] [--kernel NAME[,NAME...]|all] [--scale-mode MODE]
                      [--checkpoint DIR] [--windows N] [--window-len L] [--track-acc] [--json]``
    Held-out perplexity (``reference.w8a8_forward.perplexity``) on the fixed
    evaluation windows (``reference.assets.eval_windows`` with the model's
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

``int8conf generate [--prompt TEXT | --prompt-index I] [--max-new-tokens N] [same options]``
    Greedy continuation (argmax, ties -> smallest id, stops at <|endoftext|>)
    of a prompt (default: the first fixed prompt, the opening of Sonnet 18);
    prompt + N beyond the model's context is an error.

``--model`` defaults to the shipped default model, ``--kernel`` to ``cpu``.
Errors are one line (Int8confError, printed by ``conformance.cli.main``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from reference.errors import Int8confError

SCALE_MODES = ("own", "pow2-nearest", "pow2-ceiling", "bf16")


def _model_dir(arg) -> Path:
    if arg is not None:
        return Path(arg)
    from reference.assets import default_model_dir
    return default_model_dir()


def checkpoint_scale_mode(ck) -> tuple[str, str]:
    """Scale mode of a W8A8 checkpoint, read from the checkpoint itself.

    Sources, in order: our ``int8conf.scale_rule`` record (written by
    ``reference.pow2.build_pow2_checkpoint``: ``pow2-nearest`` /
    ``pow2-ceiling``; by ``reference.compressed_tensors.build_w8a8_checkpoint``:
    ``own``), checked against the stored scales; otherwise inferred: every
    ``weight_scale`` an exact power of two (float32 mantissa 0.5 in
    ``frexp``) -> ``pow2``.

    Args:
        ck: ``reference.compressed_tensors.W8A8Checkpoint``.

    Returns:
        ``(mode, label)``: mode ``pow2-nearest`` | ``pow2-ceiling`` | ``pow2``
        (rule unknown) | ``own`` (any other per-channel scales); label for
        output, e.g. ``"power-of-two scales (from checkpoint)"``.
    """
    import torch

    all_pow2 = all(bool(torch.all(torch.frexp(ck.scale_b(n)).mantissa == 0.5)) for n in ck.scales)
    rule = (ck.meta or {}).get("scale_rule")
    if all_pow2 and rule in ("pow2-nearest", "pow2-ceiling"):
        return rule, f"{rule} scales (from checkpoint)"
    if all_pow2:
        return "pow2", "power-of-two scales (from checkpoint)"
    if rule == "own":
        return "own", "own scales (from checkpoint)"
    return "own", "per-channel scales (from checkpoint)"


def checkpoint_weights(model, checkpoint) -> tuple[dict, str, str]:
    """Weights of a compressed-tensors W8A8 checkpoint plus its scale mode.

    Returns:
        ``(weights, mode, label)``: ``{layer: QuantWeight}`` and
        :func:`checkpoint_scale_mode`'s pair.

    Raises:
        CheckpointError: checkpoint unreadable or missing a layer.
    """
    from reference import w8a8_forward as wf
    from reference.checkpoint import load_w8a8_checkpoint

    ck = load_w8a8_checkpoint(checkpoint)
    tensors = {}
    for name, q in ck.weights.items():
        tensors[f"{name}.weight"] = q
        tensors[f"{name}.weight_scale"] = ck.scales[name]
    mode, label = checkpoint_scale_mode(ck)
    return wf.weights_from_tensors(tensors, model.config.num_hidden_layers), mode, label


def load_weights(model, scale_mode: str, checkpoint=None) -> dict:
    """Quantized weights for ``scale_mode`` (or from a W8A8 checkpoint dir).

    Raises:
        CheckpointError: checkpoint unreadable or missing a layer.
        Int8confError: checkpoint combined with a pow2 scale mode.
    """
    from reference import w8a8_forward as wf

    if checkpoint is None:
        return wf.weights_for_scale_mode(model, scale_mode)
    _check_checkpoint_mode(checkpoint, scale_mode)
    return checkpoint_weights(model, checkpoint)[0]


def _check_checkpoint_mode(checkpoint, scale_mode: str) -> None:
    if checkpoint is not None and scale_mode != "own":
        raise Int8confError(f"--checkpoint takes its weights and scales from {checkpoint}; "
                            f"drop --scale-mode {scale_mode}")


def build_model(model_dir, scale_mode: str, kernel=None, checkpoint=None,
                track_acc: bool = False, base_model=None, weights=None,
                kernel_scale_mode=None):
    """The model to evaluate: bf16 as is, or W8A8 through ``kernel``.

    Args:
        model_dir: Qwen3 directory.
        scale_mode: one of :data:`SCALE_MODES`.
        kernel: ``KernelSpec`` (ignored for ``bf16``).
        checkpoint: optional compressed-tensors W8A8 directory.
        track_acc: record per-layer max |acc| (``AccStats``).
        base_model / weights: reuse an already loaded model / weight map.
        kernel_scale_mode: scale mode the kernel is told (GemmOperands
            ``scale_mode``); default ``scale_mode``, or the checkpoint's
            (:func:`checkpoint_scale_mode`) when ``checkpoint`` is given and
            ``weights`` is not.

    Returns:
        ``(model, stats or None, first-call kernel manifest dict)``.
    """
    from conformance.checks.token_flip import kernel_layer_callables
    from reference import w8a8_forward as wf

    if scale_mode not in SCALE_MODES:
        raise Int8confError(f"--scale-mode {scale_mode!r} is not one of {SCALE_MODES}")
    _check_checkpoint_mode(checkpoint, scale_mode)
    base = base_model if base_model is not None else wf.load_model(model_dir)
    if scale_mode == "bf16":
        return base, None, {}
    if weights is None and checkpoint is not None:
        weights, ck_mode, _ = checkpoint_weights(base, checkpoint)
        kernel_scale_mode = kernel_scale_mode or ck_mode
    elif weights is None:
        weights = load_weights(base, scale_mode)
    manifest: dict = {}
    fns = kernel_layer_callables(kernel, wf.linear_names(base.config.num_hidden_layers),
                                 kernel_scale_mode or scale_mode, first_manifest=manifest)
    model, stats = wf.build_w8a8_model(base, weights, fns, track_acc=track_acc)
    return model, stats, manifest


def _kernels(arg: str):
    from conformance.kernels.registry import resolve_kernels
    return resolve_kernels([n.strip() for n in arg.split(",") if n.strip()])


def _run_perplexity(args: argparse.Namespace) -> int:
    from reference import w8a8_forward as wf
    from reference.assets import eval_windows, load_tokenizer

    mdir = _model_dir(args.model)
    _check_checkpoint_mode(args.checkpoint, args.scale_mode)
    kernels = [None] if args.scale_mode == "bf16" else _kernels(args.kernel)
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
        model, stats, man = build_model(mdir, args.scale_mode, spec, args.checkpoint,
                                        args.track_acc, base_model=base, weights=weights,
                                        kernel_scale_mode=mode)
        t0 = time.perf_counter()
        ppl = wf.perplexity(model, windows, args.batch_size)
        rec = {"perplexity": ppl, "model": str(mdir), "scale_mode": mode, "scale_label": label,
               "kernel": None if spec is None else spec.name,
               "kernel_path": man.get("path"), "checkpoint": args.checkpoint,
               "windows": args.windows, "window_len": args.window_len,
               "predicted_tokens": args.windows * (args.window_len - 1),
               "elapsed_s": round(time.perf_counter() - t0, 2)}
        if stats is not None:
            rec["max_abs_acc"] = stats.max_abs_acc
            rec["layers_acc_ge_2_24"] = stats.layers_at_or_above(wf.FP32_EXACT_INT)
        records.append(rec)
        if not args.json:
            what = "bf16 model" if spec is None else (
                f"W8A8 {label}, kernel {spec.name}"
                + (f" ({rec['kernel_path']})" if rec["kernel_path"] else ""))
            print(f"perplexity {ppl:.4f}  [{what}; {args.windows} windows x {args.window_len} "
                  f"tokens, {rec['predicted_tokens']} predicted; {rec['elapsed_s']} s]")
            if stats is not None:
                big = rec["layers_acc_ge_2_24"]
                top = max(stats.max_abs_acc.items(), key=lambda kv: kv[1])
                print(f"  layers with max |acc| >= 2^24: {len(big)} of {len(stats.max_abs_acc)}"
                      f"{(': ' + ', '.join(big)) if big else ''}; largest {top[1]} in {top[0]}")
    if args.json:
        print(json.dumps(records if len(records) > 1 else records[0], indent=2))
    return 0


def _run_generate(args: argparse.Namespace) -> int:
    from reference import w8a8_forward as wf
    from reference.assets import encode, eot_id, load_tokenizer, prompts

    mdir = _model_dir(args.model)
    _check_checkpoint_mode(args.checkpoint, args.scale_mode)
    spec = None if args.scale_mode == "bf16" else _kernels(args.kernel)[0]
    if args.prompt is not None and not args.prompt.strip():   # as detllm: nothing to continue
        raise Int8confError(f"--prompt {args.prompt!r} is empty or whitespace only "
                            "(need at least one non-space character)")
    tok = load_tokenizer(mdir)
    if args.prompt is not None:
        text = args.prompt
    else:
        ps = prompts()
        if not 0 <= args.prompt_index < len(ps):
            raise Int8confError(f"--prompt-index {args.prompt_index} outside [0, {len(ps)})")
        text = ps[args.prompt_index]
    ids = encode(tok, text)
    if not ids:
        raise Int8confError("--prompt encodes to 0 tokens")
    base = wf.load_model(mdir)
    wf.check_context(len(ids) + args.max_new_tokens, base.config,
                     f"prompt ({len(ids)} tokens) + --max-new-tokens ({args.max_new_tokens})")
    mode, label = args.scale_mode, f"{args.scale_mode} scales"
    weights = None
    if args.checkpoint is not None and args.scale_mode != "bf16":
        weights, mode, label = checkpoint_weights(base, args.checkpoint)
    model, _, man = build_model(mdir, args.scale_mode, spec, args.checkpoint, base_model=base,
                                weights=weights, kernel_scale_mode=mode)
    try:
        eos = eot_id(tok)
    except Int8confError:
        eos = None
    out = wf.greedy_generate(model, ids, args.max_new_tokens, eos_token_id=eos)
    body = tok.decode(out)
    if args.json:
        print(json.dumps({"prompt": text, "prompt_ids": ids, "generated_ids": out,
                          "text": body, "scale_mode": mode,
                          "kernel": None if spec is None else spec.name,
                          "kernel_path": man.get("path")}, indent=2))
    else:
        print(f"[{generate_header(spec, label, man.get('path'))}]")
        print(text + body)
    return 0


def generate_header(spec, label: str, kernel_path=None) -> str:
    """One-line description of the model arm a text-mode run used.

    Args:
        spec: ``KernelSpec`` or None (bf16 model, no kernel).
        label: scale-mode label, e.g. ``"own scales"``.
        kernel_path: kernel manifest ``path`` (e.g. ``"triton-native"``) or None.

    Returns:
        e.g. ``"bf16 model"`` or ``"W8A8 own scales, kernel cpu (cpu-ref)"``.
    """
    if spec is None:
        return "bf16 model"
    return f"W8A8 {label}, kernel {spec.name}" + (f" ({kernel_path})" if kernel_path else "")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Qwen3 directory (default: the shipped default model)")
    p.add_argument("--kernel", default="cpu",
                   help="kernel for every decoder linear: a built-in (cpu, int_mm, triton), "
                        "pkg.module:function or entry point (default: cpu); perplexity also "
                        "takes a comma list or 'all'")
    p.add_argument("--scale-mode", default="own", choices=SCALE_MODES,
                   help="weight scales: own (reference quantizer), pow2-nearest, pow2-ceiling "
                        "(requantized from the parent), or bf16 (no quantization)")
    p.add_argument("--checkpoint", help="take int8 weights + scales from this compressed-tensors "
                                        "W8A8 checkpoint instead of quantizing --model")
    p.add_argument("--json", action="store_true", help="print a JSON record")


def register(subparsers) -> None:
    """Add ``perplexity`` and ``generate`` to an argparse subparsers object;
    each sets ``func(args) -> exit code``."""
    from conformance.cli import positive_int   # lazy: conformance.cli discovers this module
    doc = __doc__.split("\n\n")
    p = subparsers.add_parser("perplexity", help="held-out perplexity, bf16 or W8A8 through a kernel",
                              description=doc[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--windows", type=int, default=8, help="evaluation windows (default 8)")
    p.add_argument("--window-len", type=int, default=256, help="tokens per window (default 256)")
    p.add_argument("--batch-size", type=positive_int, default=8,
                   help="windows per forward pass (>= 1)")
    p.add_argument("--track-acc", action="store_true",
                   help="also report per-layer max |acc| and the layers at or above 2^24")
    p.set_defaults(func=_run_perplexity)

    g = subparsers.add_parser("generate", help="greedy generation, bf16 or W8A8 through a kernel",
                              description=doc[2],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(g)
    g.add_argument("--prompt", help="prompt text (default: a fixed prompt, see --prompt-index)")
    g.add_argument("--prompt-index", type=int, default=0,
                   help="index into the 8 fixed prompts (default 0: Sonnet 18)")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.set_defaults(func=_run_generate)
