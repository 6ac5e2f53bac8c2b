"""Decode throughput benchmark (a benchmark, not a test).

Prints greedy-decode tokens/s of the integer engine at batch 1 and 8 next to
the bf16 transformers model measured in the same run, and their ratio.

* ``--device cpu`` (default): the shipped default model (or ``--model``).
* ``--device cuda`` (or ``--fast``): the fused-kernel CUDA-graph decode path
  vs bf16, default model + Qwen3-0.6B / -1.7B shapes, batch 1/8/32
  (``detllm.bench_fast``; reports under reports/bench/<device>/).
* ``--device cuda --shapes 0.6b`` (the unfused engine): Qwen3-0.6B shapes (hidden 1024, 28 blocks, 16/8 heads,
  head_dim 128, intermediate 3072, vocab 151936) from a randomly initialised
  float model put through ``prepare`` (random-id calibration), for each CUDA
  int_mm backend (``int_mm`` = torch._int_mm / cuBLASLt, ``triton``); with
  ``--hash-check`` it also checks that those backends give the CPU
  reference's hash on the default model (the acceptance's GPU line).

Timing: prefill is excluded; decode steps are timed with
``torch.cuda.synchronize`` on GPU; the first step is a warm-up.
Run: ``detllm bench --device cuda --hash-check`` (the lead runs the GPU part).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
)


QWEN3_17B = dict(QWEN3_06B, hidden_size=2048, intermediate_size=6144)

SHAPES = {"0.6b": ("qwen3-0.6B-shape", QWEN3_06B), "1.7b": ("qwen3-1.7B-shape", QWEN3_17B)}


def add_args(sp: argparse.ArgumentParser) -> None:
    """Options of ``detllm bench`` (bad values: one argparse error line, exit 2)."""
    from reference.command_line import name_list, non_negative_int, positive_int, positive_int_list

    sp.add_argument("--device", default="cpu", help="cpu (default model) or cuda (Qwen3-0.6B shapes)")
    sp.add_argument("--model", help="model dir for the CPU bench (default: shipped default model)")
    sp.add_argument(
        "--batches",
        type=positive_int_list,
        default=None,
        help="comma-separated batch sizes >= 1 (default 1,8; fused bench 1,8,32)",
    )
    sp.add_argument("--prompt-len", type=positive_int, default=32, help="prompt tokens per sequence, >= 1 (default 32)")
    sp.add_argument(
        "--new-tokens",
        type=positive_int,
        default=None,
        help="decoded tokens per sequence, >= 1 (default 16; fused bench 32)",
    )
    sp.add_argument(
        "--kernels",
        type=name_list,
        default=None,
        help="comma-separated int_mm backends (default: cpu->reference, cuda->int_mm,triton)",
    )
    sp.add_argument("--hash-check", action="store_true", help="(cuda) default-model hash: CUDA backends vs CPU")
    sp.add_argument("--workdir", default=None, help="where the 0.6B-shape model/artifact are written")
    sp.add_argument(
        "--fast",
        action="store_true",
        help="(cuda) the fused-kernel CUDA-graph decode path vs bf16, for --models; "
        "writes reports/bench/<device>/detllm.{json,md,png}",
    )
    sp.add_argument(
        "--models",
        default="default,0.6b,1.7b",
        help="--fast: comma-separated default (shipped model), 0.6b, 1.7b (random-init shapes)",
    )
    sp.add_argument(
        "--before",
        default="int_mm,triton",
        help="--fast: engine int_mm backends measured as the 'before' rows on 0.6b (b1, b8); '' = none",
    )
    sp.add_argument("--before-tokens", type=positive_int, default=4, help="--fast: decode tokens of the 'before' rows")
    sp.add_argument(
        "--cpu-check-tokens",
        type=non_negative_int,
        default=4,
        help="--fast: tokens of the CPU-reference hash check per model (0 = skip)",
    )
    sp.add_argument(
        "--cpu-check-models",
        default="default,0.6b,tiny",
        help="--fast: models whose fast-path hash is checked against the CPU reference engine",
    )
    sp.add_argument("--out", default=None, help="--fast: report dir (default reports/bench/<device>)")
    sp.add_argument(
        "--shapes",
        choices=("default", "0.6b", "tiny"),
        default=None,
        help="model: shipped default model (cpu default) or random-init Qwen3-0.6B shapes "
        "(cuda default); 'tiny' = the test-size random model (smoke test of the GPU path)",
    )


def _sync(dev) -> None:
    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def engine_decode_tps(eng, prompts, new_tokens: int) -> tuple[float, str]:
    """(decode tokens/s, logits hash of seq 0) of the integer engine; prefill not timed."""
    from detllm import engine as E
    from detllm import ops
    from detllm.generate import LOGITS_TAG, HashChain

    B = len(prompts)
    T = max(len(p) for p in prompts)
    cache = E.new_cache(eng, B, T + new_tokens + 1)
    toks = torch.zeros(B, T, dtype=torch.int64)
    for b, p in enumerate(prompts):
        toks[b, : len(p)] = torch.tensor(p)
    lg = E.forward(eng, toks, [len(p) for p in prompts], cache)
    last = torch.stack([lg[b, len(p) - 1] for b, p in enumerate(prompts)])
    chain = HashChain(LOGITS_TAG)
    nxt = ops.argmax_int(last)
    lg = E.forward(eng, nxt.view(B, 1).cpu(), [1] * B, cache)  # warm-up step
    _sync(eng.device)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        nxt = ops.argmax_int(lg[:, 0])
        lg = E.forward(eng, nxt.view(B, 1).cpu(), [1] * B, cache)
        chain.update_rows(lg[0], "<i4")
    _sync(eng.device)
    return B * new_tokens / (time.perf_counter() - t0), chain.hexdigest()[:12]


@torch.no_grad()
def float_decode_tps(model, prompts, new_tokens: int) -> float:
    """Decode tokens/s of a transformers model (left-padded batch, DynamicCache)."""
    from transformers import DynamicCache

    from detllm.generate import cache_kwargs

    dev = next(model.parameters()).device
    B = len(prompts)
    T = max(len(p) for p in prompts)
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p) :] = torch.tensor(p)
        mask[b, T - len(p) :] = 1
    cache = DynamicCache()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids.to(dev),
        attention_mask=mask.to(dev),
        position_ids=pos.to(dev),
        use_cache=True,
        **cache_kwargs(model, cache),
    )
    nxt = out.logits[:, -1].argmax(-1)

    def step(nxt, mask):
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
        out = model(
            input_ids=nxt.view(B, 1),
            attention_mask=mask.to(dev),
            position_ids=(mask.sum(-1, keepdim=True) - 1).to(dev),
            use_cache=True,
            **cache_kwargs(model, cache),
        )
        return out.logits[:, -1].argmax(-1), mask

    nxt, mask = step(nxt, mask)  # warm-up
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        nxt, mask = step(nxt, mask)
    _sync(dev)
    return B * new_tokens / (time.perf_counter() - t0)


def _prompts(vocab: int, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (max(1, length - 3 * b),), generator=g).tolist() for b in range(batch)]


def _table(rows, title):
    from rich.table import Table

    from reference.command_line import make_console

    t = Table(title=title)
    for c in ("model", "backend", "device", "batch", "int tok/s", "bf16 tok/s", "int/bf16", "hash (seq 0)"):
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    make_console().print(t)


def check_context(args, art) -> None:
    """Refuse ``--prompt-len`` + ``--new-tokens`` (+ the warm-up step) beyond
    the artifact's context (``max_position``), naming both options.

    Raises:
        OperandError: one line.
    """
    from reference.errors import OperandError

    ctx = int(art.config["model"]["max_position"])
    need = args.prompt_len + args.new_tokens + 1
    if need > ctx:
        raise OperandError(
            f"--prompt-len {args.prompt_len} + --new-tokens {args.new_tokens} (+1 warm-up) = "
            f"{need} tokens exceed the model's context of {ctx} tokens"
        )


def bench_cpu(args) -> list:
    from detllm import engine as E
    from detllm.generate import load_float_model
    from detllm.prepare import artifact_for
    from reference.model.assets import default_model_dir

    md = Path(args.model) if args.model else default_model_dir()
    art = artifact_for(md)
    check_context(args, art)
    fm = load_float_model(md, torch.bfloat16)
    V = art.config["model"]["vocab"]
    rows = []
    for kname in args.kernels.split(",") if args.kernels else [None]:
        eng = E.load_engine(art, kname, "cpu", guard=False)
        for B in args.batches:
            ps = _prompts(V, B, args.prompt_len)
            tps, h = engine_decode_tps(eng, ps, args.new_tokens)
            ftps = float_decode_tps(fm, ps, args.new_tokens)
            rows.append([md.name, eng.kernel_name, "cpu", B, f"{tps:.1f}", f"{ftps:.1f}", f"{tps / ftps:.3f}", h])
    _table(rows, f"decode throughput, CPU ({torch.get_num_threads()} threads), artifact {art.digest[:12]}")
    return rows


def make_06b_model(out_dir: Path, seed: int = 0, shapes: dict = QWEN3_06B) -> Path:
    """Random-init float Qwen3 at Qwen3-0.6B shapes, saved as bf16 safetensors."""
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(**shapes)
    m = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(str(out_dir))
    return out_dir


def bench_shapes(args) -> list:
    """Random-init model at fixed shapes (Qwen3-0.6B or tiny) on ``args.device``."""
    from conformance.kernels.runner import validate_device
    from detllm import engine as E
    from detllm.generate import load_float_model
    from detllm.prepare import TINY_QWEN3, PrepareOptions, prepare

    dev = str(validate_device(args.device))
    shapes_name = args.shapes or "0.6b"
    shapes = QWEN3_06B if shapes_name == "0.6b" else TINY_QWEN3
    label = "qwen3-0.6B-shape" if shapes_name == "0.6b" else "tiny-random"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="detllm_bench_"))
    rows = []
    if args.hash_check:
        from detllm import oracle

        for k in args.kernels.split(",") if args.kernels else ["int_mm", "triton"]:
            r = oracle.engine_hash_check(k, device=dev, max_new_tokens=8)
            print(f"default model, kernel {k} on cuda vs CPU reference: {r['verdict']}: {r['summary']}")
    t0 = time.time()
    md = work / f"{label}_random"
    if not (md / "config.json").is_file():
        make_06b_model(md, shapes=shapes)
    art_dir = work / "artifact"
    from detllm.artifact import is_artifact_dir, load_artifact

    art = (
        load_artifact(art_dir)
        if is_artifact_dir(art_dir)
        else prepare(md, art_dir, PrepareOptions(calib_windows=2, calib_len=32, calib_source="random"), verbose=True)
    )
    print(f"{label} model + artifact ready in {time.time() - t0:.0f}s")
    check_context(args, art)
    fm = load_float_model(md, torch.bfloat16, dev)
    V = art.config["model"]["vocab"]
    default_k = ["int_mm", "triton"] if dev.startswith("cuda") else [None]
    for kname in args.kernels.split(",") if args.kernels else default_k:
        eng = E.load_engine(art, kname, dev, guard=False)
        for B in args.batches:
            ps = _prompts(V, B, args.prompt_len)
            tps, h = engine_decode_tps(eng, ps, args.new_tokens)
            ftps = float_decode_tps(fm, ps, args.new_tokens)
            rows.append([label, eng.kernel_name, dev, B, f"{tps:.1f}", f"{ftps:.1f}", f"{tps / ftps:.3f}", h])
            print(rows[-1], flush=True)
    where = torch.cuda.get_device_name() if dev.startswith("cuda") else f"CPU ({torch.get_num_threads()} threads)"
    _table(rows, f"decode throughput, {where}, artifact {art.digest[:12]}")
    return rows


def main_args(args) -> int:
    """Run the bench selected by ``args.device``; prints tables. Returns 0.

    Raises:
        Int8confError: a bad ``--device`` (``conformance.kernels.runner.validate_device``:
            e.g. ``cuda`` on a machine without CUDA, ``cpu:1``), checked before
            any model is loaded (one line; the CLI exits 2).
    """
    from conformance.kernels.runner import validate_device

    validate_device(args.device)
    # on a GPU the default is the fused-kernel bench; --shapes / --hash-check
    # select the unfused engine's bench (kernel backends through engine.forward)
    fast_default = str(args.device).startswith("cuda") and args.shapes is None and not args.hash_check
    if getattr(args, "fast", False) or fast_default:
        from detllm import bench_fast

        args.batches = args.batches or [1, 8, 32]
        args.new_tokens = args.new_tokens or 32
        return bench_fast.run(args)
    args.batches = args.batches or [1, 8]
    args.new_tokens = args.new_tokens or 16
    if args.shapes in ("0.6b", "tiny") or (args.shapes is None and str(args.device).startswith("cuda")):
        bench_shapes(args)
    else:
        bench_cpu(args)
    return 0


def main(argv=None) -> int:
    """``python -m detllm.bench``."""
    from reference.errors import Int8confError

    p = argparse.ArgumentParser(prog="python -m detllm.bench")
    add_args(p)
    try:
        return main_args(p.parse_args(argv))
    except Int8confError as exc:
        p.error(str(exc).splitlines()[0])  # one line, exit 2


if __name__ == "__main__":
    raise SystemExit(main())
