"""``detllm`` command line: prepare, generate, demo, perplexity, bench.

Every user-causable error is an ``Int8confError`` printed as one line ``detllm: error: <problem>``
with exit code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from rich.table import Table

from conformance.kernels.loader import cwd_on_sys_path
from conformance.kernels.registry import builtin_available, get_kernel
from conformance.kernels.runner import validate_device
from conformance.runtime.import_noise import silence_import_noise
from detllm import bench
from detllm import engine as E
from detllm import generate as G
from detllm.artifact import load_artifact
from detllm.prepare import PrepareOptions, artifact_for, model_fingerprint, prepare
from reference.command_line import (
    ensure_out_dir,
    int_at_least,
    make_console,
    name_list,
    non_negative_int,
    positive_int,
    seed_int,
    unit_interval_float,
)
from reference.errors import Int8confError, OperandError
from reference.model.assets import default_model_dir
from reference.model.checkpoint import read_config
from reference.model.corpus import eval_windows, prompts
from reference.model.tokenizer import encode, load_tokenizer


def _artifact_and_model(args):
    """(Artifact, model_dir or None) from --artifact / --model (default model)."""
    if getattr(args, "artifact", None):
        art = load_artifact(args.artifact)
        if args.model:
            return art, Path(args.model)
        dm = default_model_dir()
        fp = art.config.get("source", {}).get("fingerprint")
        same = fp is not None and (dm / "config.json").is_file() and fp == model_fingerprint(dm)
        return art, (dm if same else None)  # tokenizer / float model only when known
    md = Path(args.model) if args.model else default_model_dir()
    read_config(md)  # one-line CheckpointError if missing / not Qwen3
    return artifact_for(md, verbose=True), md


def _tokenizer(model_dir):
    if model_dir is None or not (Path(model_dir) / "tokenizer.json").is_file():
        return None
    return load_tokenizer(Path(model_dir))


def _parse_ids(s: str) -> list[int]:
    try:
        return [int(x) for x in s.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise OperandError(f"--ids {s!r}: expected comma-separated integers") from None


def check_length(length: int, context: int) -> None:
    """OperandError (one line naming ``length`` and ``context``) unless 2 <= length <= context: a window needs
    2 tokens to predict one, and the artifact's RoPE table ends at ``max_position``.
    """
    if length < 2:
        raise OperandError(f"--length {length}: a window needs at least 2 tokens (model context {context} tokens)")
    if length > context:
        raise OperandError(
            f"--length {length} exceeds the model's context of {context} tokens (max_position in the artifact config)"
        )


def _schedule(s: str):
    if s in ("full", "half", "token"):
        return s
    try:
        return int(s)
    except ValueError:
        raise OperandError(f"--schedule {s!r}: expected full, half, token or an integer chunk size") from None


def _prompt_ids(args, tok) -> list[list[int]]:
    if args.ids:
        return [_parse_ids(x) for x in args.ids]
    texts = args.prompt or [prompts()[0]]
    for i, t in enumerate(texts):
        if t != "" and not t.strip():  # "" falls through to generate's "is empty" check
            raise OperandError(f"prompt {i} is whitespace only (need at least one non-space character)")
    if tok is None:
        raise OperandError("no tokenizer.json next to the model: pass token ids with --ids")
    return [encode(tok, t) for t in texts]


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    make_console().print(t)


def cmd_prepare(args) -> int:
    md = Path(args.model) if args.model else default_model_dir()
    read_config(md)  # one-line CheckpointError if missing / not Qwen3
    ensure_out_dir(Path(args.out), "--out", "artifact directory")  # before calibrating
    fields = ("alpha", "calib_windows", "calib_len", "calib_source", "max_position")
    art = prepare(md, args.out, PrepareOptions(**{f: getattr(args, f) for f in fields}), verbose=True)
    print(f"artifact {args.out}  digest {art.digest[:12]}  tensors {len(art.tensors)} (integer only)")
    return 0


def cmd_generate(args) -> int:
    validate_device(args.device)
    art, md = _artifact_and_model(args)
    tok = _tokenizer(md)
    ids = _prompt_ids(args, tok)
    eng = E.load_engine(art, args.kernel, args.device, guard=not args.no_guard)
    t0 = time.time()
    res = G.generate(eng, ids, args.max_new_tokens, _schedule(args.schedule))
    dt = time.time() - t0
    print(
        f"artifact {art.digest[:12]}  kernel {eng.kernel_name}  device {eng.device}  guard {'on' if eng.guard else 'off'}  {dt:.2f}s"
    )
    if args.kernel:
        print(
            f"note: detllm uses only the accumulator entry int_mm of kernel {args.kernel!r} (int8 x int8 -> int32); its scaled_mm epilogue is not exercised here (int8conf check --kernel={args.kernel} checks it)"
        )
    for i, (p, g) in enumerate(zip(res.prompts, res.generated)):
        lh, th = res.short(i)
        text = tok.decode(p + g) if tok is not None else " ".join(map(str, p + g))
        print(f"[{i}] logits {lh}  tokens {th}  | {text!r}")
    return 0


def _co_prompts(n: int, vocab: int, seed: int, tok=None) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(3, 40))] for _ in range(n)]


def cmd_demo(args) -> int:
    if 0 < args.context_tokens < _CONTEXT_NEW_TOKENS:  # cheap, before loading the artifact
        raise OperandError(
            f"--context-tokens {args.context_tokens}: the whole-context table needs at least {_CONTEXT_NEW_TOKENS} tokens (-1: the model's maximum, 0: skip)"
        )
    art, md = _artifact_and_model(args)
    tok = _tokenizer(md)
    ids = _prompt_ids(args, tok)[0]
    n = args.max_new_tokens
    V = art.config["model"]["vocab"]
    co = _co_prompts(7, V, args.seed)
    fmodel = None
    if md is not None and not args.no_float:
        fmodel = G.load_float_model(md, torch.bfloat16 if args.float_dtype == "bf16" else torch.float32)
    configs = [
        ("batch 1", [ids], "full", 0),
        ("batch 8 (7 random co-prompts)", [ids] + co, "full", 0),
        ("batch 8, prompt in slot 5", co[:5] + [ids] + co[5:], "full", 5),
        ("prefill split in two, then token by token", [ids], "half", 0),
        ("prefill token by token", [ids], "token", 0),
    ]
    rows = []
    ref_eng = E.load_engine(art, None, "cpu", guard=not args.no_guard)
    int_hashes = []
    full = None
    for label, ps, sched, slot in configs:
        r = G.generate(ref_eng, ps, n, sched)
        full = full or (r.logits_hash[slot], r.token_hash[slot])
        lh, th = r.short(slot)
        int_hashes.append((lh, th))
        fl = G.float_generate(fmodel, ps, n, sched).short(slot) if fmodel is not None else ("-", "-")
        rows.append([label + ", reference int_mm", lh, th, *fl])
    if args.kernels == "all":
        names = [b for b in ("cpu", "int_mm", "triton") if builtin_available(b)[0]]
    else:
        names = [k.strip() for k in args.kernels.split(",")]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    fl_cache = {}
    want_fast = (args.kernels == "all" and torch.cuda.is_available()) or "fast" in names
    names = [x for x in names if x != "fast"]
    for name in names:
        spec = get_kernel(name)
        for dev in devices:
            if dev not in spec.devices:
                continue
            if name == "triton" and dev == "cpu" and not args.with_interpreter:
                continue  # the interpreter is slow on the full model; ask with --with-interpreter
            try:
                eng = E.load_engine(art, spec, dev, guard=not args.no_guard and dev == "cpu")
                r = G.generate(eng, [ids], n, "full")
                lh, th = r.short(0)
            except Int8confError as exc:
                lh, th = "error", str(exc)[:40]
            int_hashes.append((lh, th))
            fl = ("-", "-")
            if fmodel is not None:
                if dev not in fl_cache:
                    fl_cache[dev] = G.float_generate(fmodel.to(dev), [ids], n, "full").short(0)
                    fmodel.to("cpu")
                fl = fl_cache[dev]
            rows.append([f"batch 1, kernel {name} on {dev}", lh, th, *fl])
    if want_fast:
        from detllm import fast as F  # triton

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            r = F.fast_generate(E.load_engine(art, None, dev, guard=False), [ids], n, "full")
            lh, th = r.short(0)
        except Int8confError as exc:
            lh, th = "error", str(exc)[:40]
        int_hashes.append((lh, th))
        how = " + CUDA graph" if dev == "cuda" else " (interpreter)"
        rows.append([f"batch 1, fused Triton kernels{how} on {dev}", lh, th, *fl_cache.get(dev, ("-", "-"))])
    same = len(set(int_hashes)) == 1
    _print_table(
        f"detllm demo: artifact {art.digest[:12]}, {n} new tokens, prompt {ids[:6]}...",
        ["configuration", "integer logits", "integer tokens", f"float ({args.float_dtype}) logits", "float tokens"],
        rows,
    )
    fl_set = {r[3] for r in rows if r[3] != "-"}
    print(
        f"integer hashes identical across all {len(rows)} configurations: {'YES' if same else 'NO'}; float logits hashes: {len(fl_set)} distinct"
    )
    print(f"artifact digest {art.digest}\nlogits hash {full[0]}\ntoken hash  {full[1]}")
    if args.context_tokens != 0:
        same = _demo_whole_context(args, art, ref_eng, fmodel, tok) and same
    return 0 if same else 1


#: new tokens of the whole-context table of ``detllm demo`` (the minimum of ``--context-tokens``)
_CONTEXT_NEW_TOKENS = 4


def _demo_whole_context(args, art, eng, fmodel, tok) -> bool:
    """Second demo table: a context as long as the model allows, one prefill vs chunks vs token by token,
    alone vs in a batch of 2. True when the integer hashes agree.
    """
    ctx = art.config["model"]["max_position"]
    total = ctx if args.context_tokens < 0 else min(ctx, args.context_tokens)
    new = _CONTEXT_NEW_TOKENS
    if tok is not None:
        p = eval_windows(tok, 1, total - new + 1)[0].tolist()
    else:
        p = _co_prompts(1, art.config["model"]["vocab"], args.seed + 1)[0] * total
        p = p[: total - new + 1]
    configs = [
        ("one prefill", [p], "full", 0),
        ("prefill in chunks of 64", [p], 64, 0),
        ("batch 2 (+1 random co-prompt), chunks of 100", _co_prompts(1, art.config["model"]["vocab"], 5) + [p], 100, 1),
    ]
    if args.context_token_by_token:
        configs.append(("prefill token by token", [p], "token", 0))
    rows, ih = [], set()
    for label, ps, sched, slot in configs:
        r = G.generate(eng, ps, new, sched)
        ih.add(r.short(slot))
        fl = G.float_generate(fmodel, ps, new, sched).short(slot) if fmodel is not None else ("-", "-")
        rows.append([label, *r.short(slot), *fl])
    _print_table(
        f"whole context: {len(p) + new - 1} of {ctx} positions ({len(p)}-token held-out prompt + {new} new)",
        ["configuration", "integer logits", "integer tokens", "float logits", "float tokens"],
        rows,
    )
    print(f"whole-context integer hashes identical: {'YES' if len(ih) == 1 else 'NO'}")
    return len(ih) == 1


def perplexity_from_logits(logits: torch.Tensor, windows: torch.Tensor, scale: float = 1.0) -> float:
    """exp(mean next-token NLL); logits [n, L, V] (times ``scale``), windows [n, L]."""
    lg = logits[:, :-1].to(torch.float64) * scale
    tgt = windows[:, 1:]
    nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="mean")
    return float(math.exp(float(nll)))


def cmd_perplexity(args) -> int:
    if args.length < 2:  # cheap, before preparing / loading the artifact
        raise OperandError(f"--length {args.length}: a window needs at least 2 tokens")
    validate_device(args.device)
    art, md = _artifact_and_model(args)
    check_length(args.length, int(art.config["model"]["max_position"]))
    tok = _tokenizer(md)
    if tok is None:
        raise OperandError("perplexity needs the model's tokenizer.json (held-out text)")
    L = args.length
    try:
        win = eval_windows(tok, args.windows, L)
    except Int8confError as exc:  # e.g. more windows than the held-out text has: name the options
        raise OperandError(f"--windows {args.windows} x --length {L}: {str(exc).split(': ', 1)[-1]}") from None
    eng = E.load_engine(art, args.kernel, args.device, guard=False)
    t0 = time.time()
    il = G.teacher_forced_logits(eng, win, args.batch_size)
    p_int = perplexity_from_logits(il, win, 2.0 ** -art.config["units"]["logit_exp"])
    t_int = time.time() - t0
    out = [["integer engine", f"{p_int:.4f}", "", f"{t_int:.1f}"]]
    ref = None
    for dtype, label in ((torch.bfloat16, "bf16 transformers"), (torch.float32, "fp32 transformers")):
        m = G.load_float_model(md, dtype)
        t0 = time.time()
        with torch.no_grad():
            fl = [m(win[s : s + args.batch_size]).logits.float() for s in range(0, win.shape[0], args.batch_size)]
        fl = torch.cat(fl)
        p = perplexity_from_logits(fl, win)
        ref = ref or p
        out.append([label, f"{p:.4f}", "", f"{time.time() - t0:.1f}"])
    for r in out:
        r[2] = f"{(float(r[1]) / ref - 1) * 100:+.2f}%"
    _print_table(
        f"held-out perplexity: {args.windows} windows x {L} tokens, artifact {art.digest[:12]}",
        ["model", "perplexity", "vs bf16", "seconds"],
        out,
    )
    gap = abs(p_int / ref - 1)
    print(f"integer vs bf16 gap: {gap * 100:.2f}% ({'within' if gap <= 0.02 else 'OUTSIDE'} 2%)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="detllm", description="Integer-only Qwen3 engine (deterministic oracle).")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads, >= 1 (default: torch's)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def model_args(sp):
        sp.add_argument("--model", help="Qwen3 checkpoint dir (default: the shipped default model)")
        sp.add_argument("--artifact", help="prepared artifact dir (default: prepare --model into the cache)")

    def kernel_args(sp):
        h = "kernel whose accumulator-only entry int_mm (int8 x int8 -> int32) runs every integer matmul: a built-in (cpu, int_mm, triton), pkg.module:function or entry point; its scaled_mm epilogue is NOT used (the engine rescales in integers; check the epilogue with int8conf check) (default: the exact reference)"
        sp.add_argument("--kernel", default=None, help=h)
        h = "device of the integer matmuls: cpu, cuda or cuda:N (default cpu)"
        sp.add_argument("--device", default="cpu", help=h)

    sp = sub.add_parser("prepare", help="calibrate and write the integer-only artifact")
    sp.add_argument("--model", help="Qwen3 checkpoint dir (default: shipped default model)")
    sp.add_argument("--out", required=True, help="artifact directory to write")
    h = "SmoothQuant migration strength alpha in [0, 1] (0 = no smoothing; default 0.5)"
    sp.add_argument("--alpha", type=unit_interval_float, default=0.5, help=h)
    h = "calibration windows for the fixed activation / KV scales, >= 1 (default 16)"
    sp.add_argument("--calib-windows", type=positive_int, default=16, help=h)
    h = "tokens per calibration window, >= 1 (default 128)"
    sp.add_argument("--calib-len", type=positive_int, default=128, help=h)
    h = "calibration text: the shipped corpus, random tokens, or auto (corpus when the model has the shipped tokenizer) (default auto)"
    sp.add_argument("--calib-source", choices=("auto", "corpus", "random"), default="auto", help=h)
    h = "RoPE table length override, >= 1 (default: the model's max_position_embeddings)"
    sp.add_argument("--max-position", type=positive_int, default=None, help=h)
    sp.set_defaults(func=cmd_prepare)

    sp = sub.add_parser("generate", help="greedy decoding; prints the logits / token hashes")
    model_args(sp)
    sp.add_argument("--prompt", action="append", help="prompt text (repeatable; default Sonnet 18)")
    sp.add_argument("--ids", action="append", help="prompt as comma-separated token ids (repeatable)")
    sp.add_argument("-n", "--max-new-tokens", type=non_negative_int, default=16, help="tokens to generate (default 16)")
    kernel_args(sp)
    sp.add_argument("--schedule", default="full", help="prefill: full | half | token | chunk size")
    sp.add_argument("--no-guard", action="store_true", help="skip the float guard (faster)")
    sp.set_defaults(func=cmd_generate)

    sp = sub.add_parser("demo", help="table: configuration x (integer hash, float hash)")
    model_args(sp)
    sp.add_argument("--prompt", action="append", help="prompt text (default Sonnet 18)")
    sp.add_argument("--ids", action="append", help="prompt as token ids")
    sp.add_argument("-n", "--max-new-tokens", type=non_negative_int, default=16, help="tokens to generate (default 16)")
    h = "comma-separated kernels or 'all'; only their accumulator entry int_mm is used; 'fast' adds the fused-kernel path (detllm.fast; 'all' includes it on a CUDA machine)"
    sp.add_argument("--kernels", type=name_list, default="all", help=h)
    sp.add_argument("--with-interpreter", action="store_true", help="include triton under the interpreter")
    h = "dtype of the float model whose hash is shown next to the integer one"
    sp.add_argument("--float-dtype", choices=("bf16", "fp32"), default="bf16", help=h)
    sp.add_argument("--no-float", action="store_true", help="skip the float model column")
    sp.add_argument("--no-guard", action="store_true", help="skip the float guard (faster)")
    sp.add_argument("--seed", type=seed_int, default=0, help="seed of the random co-prompts, 0 .. 2**63-1 (default 0)")
    h = "whole-context table length: tokens >= 4 (capped at the model's maximum), -1 (the model's maximum) or 0 (skip) (default -1)"
    sp.add_argument("--context-tokens", type=int_at_least(-1), default=-1, help=h)
    h = "also run the whole context token by token (slow)"
    sp.add_argument("--context-token-by-token", action="store_true", help=h)
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("perplexity", help="held-out perplexity: integer engine vs bf16/fp32 model")
    model_args(sp)
    sp.add_argument("--windows", type=positive_int, default=8, help="held-out windows, >= 1 (default 8)")
    sp.add_argument("--length", type=int, default=256, help="tokens per window (default 256)")
    sp.add_argument("--batch-size", type=positive_int, default=4, help="windows per forward pass (>= 1)")
    kernel_args(sp)
    sp.set_defaults(func=cmd_perplexity)

    sp = sub.add_parser("bench", help="decode tokens/s (integer engine vs bf16 transformers)")
    bench.add_args(sp)
    sp.set_defaults(func=bench.main_args)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """Console entry point ``detllm``. Returns the exit code."""
    silence_import_noise()  # torchao's and torch pytree's import-time notices, as in int8conf
    args = build_parser().parse_args(argv)
    cwd_on_sys_path()  # --kernel=mod:fn from the module's own folder, as python -m does
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return int(args.func(args) or 0)
    except Int8confError as exc:
        print(f"detllm: error: {str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
