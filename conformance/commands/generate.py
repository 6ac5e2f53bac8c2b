"""``int8conf generate``: greedy generation, bf16 or W8A8 through a kernel.

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

from conformance.commands.options import add_model_run_options, default_model_dir_arg
from reference.errors import Int8confError
from reference.model.weights import check_checkpoint_mode, checkpoint_weights


def _run_generate(args: argparse.Namespace) -> int:
    from conformance.study.model_run import build_model, generate_header, resolve_kernel_list
    from reference.model import forward as wf
    from reference.model.corpus import prompts
    from reference.model.tokenizer import encode, eot_id, load_tokenizer

    mdir = default_model_dir_arg(args.model)
    check_checkpoint_mode(args.checkpoint, args.scale_mode)
    spec = None if args.scale_mode == "bf16" else resolve_kernel_list(args.kernel)[0]
    if args.prompt is not None and not args.prompt.strip():  # as detllm: nothing to continue
        raise Int8confError(
            f"--prompt {args.prompt!r} is empty or whitespace only (need at least one non-space character)"
        )
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
    wf.check_context(
        len(ids) + args.max_new_tokens,
        base.config,
        f"prompt ({len(ids)} tokens) + --max-new-tokens ({args.max_new_tokens})",
    )
    mode, label = args.scale_mode, f"{args.scale_mode} scales"
    weights = None
    if args.checkpoint is not None and args.scale_mode != "bf16":
        weights, mode, label = checkpoint_weights(base, args.checkpoint)
    model, _, man = build_model(
        mdir, args.scale_mode, spec, args.checkpoint, base_model=base, weights=weights, kernel_scale_mode=mode
    )
    try:
        eos = eot_id(tok)
    except Int8confError:
        eos = None
    out = wf.greedy_generate(model, ids, args.max_new_tokens, eos_token_id=eos)
    body = tok.decode(out)
    if args.json:
        print(
            json.dumps(
                {
                    "prompt": text,
                    "prompt_ids": ids,
                    "generated_ids": out,
                    "text": body,
                    "scale_mode": mode,
                    "kernel": None if spec is None else spec.name,
                    "kernel_path": man.get("path"),
                },
                indent=2,
            )
        )
    else:
        print(f"[{generate_header(spec, label, man.get('path'))}]")
        print(text + body)
    return 0


def register(subparsers) -> None:
    """Add the ``generate`` subcommand (sets ``func(args) -> exit code``)."""
    g = subparsers.add_parser(
        "generate",
        help="greedy generation, bf16 or W8A8 through a kernel",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_run_options(g)
    g.add_argument("--prompt", help="prompt text (default: a fixed prompt, see --prompt-index)")
    g.add_argument("--prompt-index", type=int, default=0, help="index into the 8 fixed prompts (default 0: Sonnet 18)")
    g.add_argument(
        "--max-new-tokens", type=int, default=64, metavar="N", help="tokens to generate greedily (default 64)"
    )
    g.set_defaults(func=_run_generate)
