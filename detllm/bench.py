"""``detllm bench``: greedy-decode tokens/s of the integer engine next to bf16 transformers (a benchmark, not a test).

* ``--device cpu`` (default): the shipped default model (or ``--model``), batch 1 and 8.
* ``--device cuda`` (or ``--fast``): the fused-kernel CUDA-graph decode path (``detllm.bench_fast.run``).
* ``--device cuda --shapes 0.6b|tiny`` or ``--hash-check``: the unfused engine on random-init Qwen3-0.6B
  (or test-size) shapes for each CUDA int_mm backend; ``--hash-check`` first checks those backends give the
  CPU reference's hash on the default model.

Prefill is not timed; the first decode step is a warm-up; GPU steps are synchronized.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from rich.table import Table

from conformance.kernels.runner import validate_device
from detllm import bench_fast, oracle
from detllm import engine as E
from detllm.bench_fast import QWEN3_06B, engine_decode_tps, float_decode_tps, random_model_artifact, random_prompts
from detllm.generate import load_float_model
from detllm.prepare import TINY_QWEN3, artifact_for
from reference.command_line import make_console, name_list, non_negative_int, positive_int, positive_int_list
from reference.errors import Int8confError, OperandError
from reference.model.assets import default_model_dir


def add_args(sp: argparse.ArgumentParser) -> None:
    """Options of ``detllm bench`` (bad values: one argparse error line, exit 2)."""
    sp.add_argument("--device", default="cpu", help="cpu (default model) or cuda (Qwen3-0.6B shapes)")
    sp.add_argument("--model", help="model dir for the CPU bench (default: shipped default model)")
    h = "comma-separated batch sizes >= 1 (default 1,8; fused bench 1,8,32)"
    sp.add_argument("--batches", type=positive_int_list, default=None, help=h)
    sp.add_argument("--prompt-len", type=positive_int, default=32, help="prompt tokens per sequence, >= 1 (default 32)")
    h = "decoded tokens per sequence, >= 1 (default 16; fused bench 32)"
    sp.add_argument("--new-tokens", type=positive_int, default=None, help=h)
    h = "comma-separated int_mm backends (default: cpu->reference, cuda->int_mm,triton)"
    sp.add_argument("--kernels", type=name_list, default=None, help=h)
    sp.add_argument("--hash-check", action="store_true", help="(cuda) default-model hash: CUDA backends vs CPU")
    sp.add_argument("--workdir", default=None, help="where the 0.6B-shape model/artifact are written")
    h = "(cuda) the fused-kernel CUDA-graph decode path vs bf16, for --models; writes int8conf-reports/bench/<device>/detllm.{json,md,png}"
    sp.add_argument("--fast", action="store_true", help=h)
    h = "--fast: comma-separated default (shipped model), 0.6b, 1.7b (random-init shapes)"
    sp.add_argument("--models", default="default,0.6b,1.7b", help=h)
    h = "--fast: engine int_mm backends measured as the 'before' rows on 0.6b (b1, b8); '' = none"
    sp.add_argument("--before", default="int_mm,triton", help=h)
    sp.add_argument("--before-tokens", type=positive_int, default=4, help="--fast: decode tokens of the 'before' rows")
    h = "--fast: tokens of the CPU-reference hash check per model (0 = skip)"
    sp.add_argument("--cpu-check-tokens", type=non_negative_int, default=4, help=h)
    h = "--fast: models whose fast-path hash is checked against the CPU reference engine"
    sp.add_argument("--cpu-check-models", default="default,0.6b,tiny", help=h)
    sp.add_argument("--out", default=None, help="--fast: report dir (default int8conf-reports/bench/<device>)")
    h = "model: shipped default model (cpu default) or random-init Qwen3-0.6B shapes (cuda default); 'tiny' = the test-size random model (smoke test of the GPU path)"
    sp.add_argument("--shapes", choices=("default", "0.6b", "tiny"), default=None, help=h)


def _table(rows, title):
    t = Table(title=title)
    for c in ("model", "backend", "device", "batch", "int tok/s", "bf16 tok/s", "int/bf16", "hash (seq 0)"):
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    make_console().print(t)


def check_context(args, art) -> None:
    """Raise OperandError (one line naming both options) when ``--prompt-len`` + ``--new-tokens``
    (+ the warm-up step) exceed the artifact's ``max_position``."""
    ctx = int(art.config["model"]["max_position"])
    need = args.prompt_len + args.new_tokens + 1
    if need > ctx:
        raise OperandError(
            f"--prompt-len {args.prompt_len} + --new-tokens {args.new_tokens} (+1 warm-up) = {need} tokens exceed the model's context of {ctx} tokens"
        )


def _measure(args, art, fm, label, dev, kernels, show=False) -> list:
    V = art.config["model"]["vocab"]
    rows = []
    for kname in kernels:
        eng = E.load_engine(art, kname, dev, guard=False)
        for B in args.batches:
            ps = random_prompts(V, B, args.prompt_len)
            tps, h = engine_decode_tps(eng, ps, args.new_tokens)
            ftps = float_decode_tps(fm, ps, args.new_tokens)
            rows.append([label, eng.kernel_name, dev, B, f"{tps:.1f}", f"{ftps:.1f}", f"{tps / ftps:.3f}", h])
            if show:
                print(rows[-1], flush=True)
    return rows


def bench_cpu(args) -> list:
    md = Path(args.model) if args.model else default_model_dir()
    art = artifact_for(md)
    check_context(args, art)
    fm = load_float_model(md, torch.bfloat16)
    rows = _measure(args, art, fm, md.name, "cpu", args.kernels.split(",") if args.kernels else [None])
    _table(rows, f"decode throughput, CPU ({torch.get_num_threads()} threads), artifact {art.digest[:12]}")
    return rows


def bench_shapes(args) -> list:
    """Random-init model at fixed shapes (Qwen3-0.6B or tiny) on ``args.device``."""
    dev = str(validate_device(args.device))
    shapes_name = args.shapes or "0.6b"
    shapes = QWEN3_06B if shapes_name == "0.6b" else TINY_QWEN3
    label = "qwen3-0.6B-shape" if shapes_name == "0.6b" else "tiny-random"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="detllm_bench_"))
    if args.hash_check:
        for k in args.kernels.split(",") if args.kernels else ["int_mm", "triton"]:
            r = oracle.engine_hash_check(k, device=dev, max_new_tokens=8)
            print(f"default model, kernel {k} on cuda vs CPU reference: {r['verdict']}: {r['summary']}")
    t0 = time.time()
    md = work / f"{label}_random"
    art = random_model_artifact(label, shapes, md, work / "artifact", True)
    print(f"{label} model + artifact ready in {time.time() - t0:.0f}s")
    check_context(args, art)
    fm = load_float_model(md, torch.bfloat16, dev)
    default_k = ["int_mm", "triton"] if dev.startswith("cuda") else [None]
    rows = _measure(args, art, fm, label, dev, args.kernels.split(",") if args.kernels else default_k, show=True)
    where = torch.cuda.get_device_name() if dev.startswith("cuda") else f"CPU ({torch.get_num_threads()} threads)"
    _table(rows, f"decode throughput, {where}, artifact {art.digest[:12]}")
    return rows


def main_args(args) -> int:
    """Run the bench selected by ``args.device`` / ``--fast`` / ``--shapes``; print tables. Returns the exit code.

    Raises Int8confError for a bad ``--device`` (``validate_device``), before any model is loaded."""
    validate_device(args.device)
    # on a GPU the default is the fused-kernel bench; --shapes / --hash-check select the unfused engine's
    fast_default = str(args.device).startswith("cuda") and args.shapes is None and not args.hash_check
    if getattr(args, "fast", False) or fast_default:
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
    p = argparse.ArgumentParser(prog="python -m detllm.bench")
    add_args(p)
    try:
        return main_args(p.parse_args(argv))
    except Int8confError as exc:
        p.error(str(exc).splitlines()[0])  # one line, exit 2


if __name__ == "__main__":
    raise SystemExit(main())
