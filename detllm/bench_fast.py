"""``detllm bench --fast``: the fused-kernel, CUDA-graph integer decode vs bf16
transformers in the same run, with the hash beside every figure.

For each model (the shipped default model; random-init Qwen3-0.6B / -1.7B
shapes put through ``prepare``, as ``detllm.bench`` does) and batch (1, 8, 32):

* int: ``detllm.fast.fast_generate`` -- a warm-up generation first (Triton
  compilation, graph capture), then a timed one: prefill tokens/s (all
  prompt tokens of the batch, one fused prefill) and decode tokens/s (graph
  replays only; the eager first step and the capture step are excluded),
  with the chained logits hash and token hash of sequence 0 (the same prompt
  at every batch size, so the hash must not move with the batch);
* bf16: the transformers model, same batch and prompt length: eager
  (DynamicCache, warm-up call first) and, where it captures, a CUDA graph of
  the decode step over a ``StaticCache`` (equal-length prompts, no padding
  mask, so the graph has static shapes); the decode tokens/s compared is the
  better of the two, and the report says which ran.
* checks: the fast path's hash vs the CPU reference engine
  (``detllm.engine`` with the exact accumulator on the CPU) for the same
  artifact and prompt; the default model's pinned hash (Sonnet 18, 16
  tokens) through the fast path;
* before: the unfused engine (``detllm.engine.forward`` per token, kernels
  ``int_mm`` / ``triton``) at Qwen3-0.6B shapes, batch 1 and 8
  (``bench.engine_decode_tps``), the issue's table re-measured in the same run.

Writes ``<out>/detllm.json``, ``detllm.md`` and ``detllm.png``.
"""

from __future__ import annotations

import json
import tempfile
import time
import traceback
from pathlib import Path

import torch

PINNED_LOGITS = "c54e130c3f8a"


def _slug(name: str) -> str:
    return "-".join(name.lower().replace("_", " ").split())


def _setup(name: str, work: Path):
    """(label, Artifact, model_dir) for a model name."""
    from detllm import bench
    from detllm.artifact import is_artifact_dir, load_artifact
    from detllm.prepare import TINY_QWEN3, PrepareOptions, artifact_for, prepare

    if name == "default":
        from reference.model.assets import default_model_dir

        md = default_model_dir()
        return "default-model", artifact_for(md), md
    if name == "tiny":
        label, shapes = "tiny-random", TINY_QWEN3
    else:
        label, shapes = bench.SHAPES[name]
    md = work / f"{label}_random"
    if not (md / "config.json").is_file():
        bench.make_06b_model(md, shapes=shapes)
    ad = work / f"{label}_artifact"
    art = (
        load_artifact(ad)
        if is_artifact_dir(ad)
        else prepare(md, ad, PrepareOptions(calib_windows=2, calib_len=32, calib_source="random"), verbose=False)
    )
    return label, art, md


@torch.no_grad()
def bf16_graph_tps(model, B: int, T: int, new_tokens: int, vocab: int) -> float:
    """Decode tokens/s of the bf16 model with a StaticCache and the decode step
    captured in a CUDA graph (equal-length random prompts, no padding mask).

    Raises whatever transformers / CUDA raise when the step cannot be captured.
    """
    from transformers import StaticCache

    from detllm.generate import cache_kwargs

    dev = next(model.parameters()).device
    L = T + new_tokens + 8
    try:
        cache = StaticCache(config=model.config, max_batch_size=B, max_cache_len=L, device=dev, dtype=torch.bfloat16)
    except TypeError:
        cache = StaticCache(config=model.config, max_cache_len=L)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (B, T), generator=g).to(dev)
    out = model(
        input_ids=ids,
        position_ids=torch.arange(T, device=dev)[None].expand(B, T),
        cache_position=torch.arange(T, device=dev),
        use_cache=True,
        **cache_kwargs(model, cache),
    )
    inp = out.logits[:, -1].argmax(-1).view(B, 1).clone()
    pos = torch.full((B, 1), T, dtype=torch.long, device=dev)
    cpos = torch.full((1,), T, dtype=torch.long, device=dev)

    def step():
        o = model(input_ids=inp, position_ids=pos, cache_position=cpos, use_cache=True, **cache_kwargs(model, cache))
        inp.copy_(o.logits[:, -1].argmax(-1).view(B, 1))
        pos.add_(1)
        cpos.add_(1)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    n = min(new_tokens, L - T - 4)
    t0 = time.perf_counter()
    for _ in range(n):
        graph.replay()
    torch.cuda.synchronize()
    return B * n / (time.perf_counter() - t0)


@torch.no_grad()
def bf16_prefill_tps(model, prompts) -> float:
    """Prefill tokens/s of the bf16 model (left-padded batch, one forward, after a warm-up)."""
    dev = next(model.parameters()).device
    B, T = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p) :] = torch.tensor(p)
        mask[b, T - len(p) :] = 1
    ids, mask = ids.to(dev), mask.to(dev)
    model(input_ids=ids, attention_mask=mask)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model(input_ids=ids, attention_mask=mask)
    torch.cuda.synchronize()
    return sum(len(p) for p in prompts) / (time.perf_counter() - t0)


def run(args) -> int:
    """Run the fast-path benchmark; print tables; write the reports. Returns 0
    (1 if any hash check failed)."""
    from conformance.kernels.runner import validate_device
    from detllm import bench
    from detllm import engine as E
    from detllm import fast as F
    from detllm import generate as G

    dev = str(validate_device(args.device))  # one line (Int8confError) for cuda without CUDA
    where = torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu"
    out = Path(args.out or Path("reports") / "bench" / _slug(where))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="detllm_bench_"))
    batches = list(args.batches)  # ints >= 1 (bench.add_args: positive_int_list)
    rec = {
        "device": where,
        "torch": torch.__version__,
        "rows": [],
        "checks": [],
        "before": [],
        "errors": [],
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "timing": "decode: CUDA-graph replays after one eager and one capturing step, synchronized wall "
        "clock; prefill: one fused prefill of all prompt tokens after a warm-up generation",
    }
    try:
        import triton

        rec["triton"] = triton.__version__
    except ImportError:
        pass
    ok = True
    for name in [m for m in args.models.split(",") if m]:
        t0 = time.time()
        try:
            label, art, md = _setup(name, work)
        except Exception as exc:  # report and continue with the next model
            rec["errors"].append(f"{name}: setup failed: {exc!r}")
            continue
        print(f"{label}: artifact {art.digest[:12]} ready in {time.time() - t0:.0f}s", flush=True)
        V = art.config["model"]["vocab"]
        eng = E.load_engine(art, None, dev, guard=False)
        fm = G.load_float_model(md, torch.bfloat16, dev) if dev.startswith("cuda") else None
        if name == "default":
            try:
                from reference.model.corpus import prompts as cp
                from reference.model.tokenizer import encode, load_tokenizer

                ids = encode(load_tokenizer(md), cp()[0])
                r = F.fast_generate(eng, [ids], 16)
                good = r.logits_hash[0][:12] == PINNED_LOGITS
                ok &= good
                rec["checks"].append(
                    {
                        "model": label,
                        "check": "pinned hash (Sonnet 18, 16 tokens), fast path",
                        "expected": PINNED_LOGITS,
                        "got": r.logits_hash[0][:12],
                        "ok": good,
                    }
                )
            except Exception as exc:
                rec["errors"].append(f"{label}: pinned check: {exc!r}")
        if args.cpu_check_tokens and name in args.cpu_check_models.split(","):
            try:
                ps1 = bench._prompts(V, 1, args.prompt_len)
                t1 = time.time()
                ref = G.generate(E.load_engine(art, None, "cpu", guard=False), ps1, args.cpu_check_tokens)
                got = F.fast_generate(eng, ps1, args.cpu_check_tokens)
                good = ref.logits_hash[0] == got.logits_hash[0] and ref.token_hash[0] == got.token_hash[0]
                ok &= good
                rec["checks"].append(
                    {
                        "model": label,
                        "check": f"fast path on {dev} vs CPU reference engine, "
                        f"batch 1, {args.prompt_len}-token prompt, {args.cpu_check_tokens} tokens",
                        "expected": ref.logits_hash[0][:12],
                        "got": got.logits_hash[0][:12],
                        "ok": good,
                        "cpu_seconds": round(time.time() - t1, 1),
                    }
                )
                print(rec["checks"][-1], flush=True)
            except Exception as exc:
                rec["errors"].append(f"{label}: cpu check: {exc!r}")
        seq0 = set()
        for B in batches:
            try:
                ps = bench._prompts(V, B, args.prompt_len)
                F.fast_generate(eng, ps, 4)  # warm-up: compile, capture
                tm: dict = {}
                r = F.fast_generate(eng, ps, args.new_tokens, timings=tm)
                row = {
                    "model": label,
                    "artifact": art.digest[:12],
                    "batch": B,
                    "int_decode_tps": B * tm["decode_steps"] / tm["decode_s"],
                    "int_prefill_tps": tm["prefill_tokens"] / tm["prefill_s"],
                    "int_step_ms": 1e3 * tm["decode_s"] / max(1, tm["decode_steps"]),
                    "logits_hash": r.logits_hash[0][:12],
                    "token_hash": r.token_hash[0][:12],
                    "cuda_graph": r.info.get("cuda_graph"),
                }
                seq0.add(r.logits_hash[0])
                if fm is not None:
                    bench.float_decode_tps(fm, ps, 2)  # warm-up
                    row["bf16_eager_tps"] = bench.float_decode_tps(fm, ps, args.new_tokens)
                    try:
                        row["bf16_graph_tps"] = bf16_graph_tps(fm, B, args.prompt_len, args.new_tokens, V)
                    except Exception as exc:
                        row["bf16_graph_tps"] = None
                        row["bf16_graph_error"] = repr(exc)[:300]
                    row["bf16_prefill_tps"] = bf16_prefill_tps(fm, ps)
                    best = max(v for v in (row["bf16_eager_tps"], row["bf16_graph_tps"]) if v)
                    row["bf16_best_tps"] = best
                    row["int_over_bf16"] = row["int_decode_tps"] / best
                rec["rows"].append(row)
                print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            except Exception as exc:
                rec["errors"].append(f"{label} batch {B}: {exc!r}")
                traceback.print_exc()
        if len(batches) > 1 and seq0:
            good = len(seq0) == 1
            ok &= good
            rec["checks"].append(
                {
                    "model": label,
                    "check": f"sequence-0 logits hash identical at batch {batches}",
                    "ok": good,
                    "got": sorted(h[:12] for h in seq0),
                }
            )
        if name == "0.6b" and args.before:
            for k in [x for x in args.before.split(",") if x]:
                for B in (1, 8):
                    try:
                        ek = E.load_engine(art, k, dev, guard=False)
                        tps, h = bench.engine_decode_tps(ek, bench._prompts(V, B, args.prompt_len), args.before_tokens)
                        rec["before"].append(
                            {
                                "model": label,
                                "backend": f"detllm engine, {k}",
                                "batch": B,
                                "decode_tps": tps,
                                "decode_hash": h,
                            }
                        )
                        print(rec["before"][-1], flush=True)
                    except Exception as exc:
                        rec["errors"].append(f"before {k} b{B}: {exc!r}")
        del eng, fm
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
        rec["all_checks_ok"] = ok
        write_reports(rec, out)  # after every model: a cut-short run keeps what it measured
    rec["all_checks_ok"] = ok
    write_reports(rec, out)
    print(f"wrote {out}/detllm.json, detllm.md, detllm.png; all checks {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def _f(v, nd=1):
    return "-" if v is None else f"{v:,.{nd}f}"


def write_reports(rec: dict, out: Path) -> None:
    """detllm.json (everything measured), detllm.md (tables) and detllm.png (bars)."""
    from reference.fileio import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "detllm.json", json.dumps(rec, indent=1, default=str))
    L = [
        f"# detllm fast decode vs bf16 on {rec['device']}",
        "",
        f"torch {rec.get('torch')}, triton {rec.get('triton')}; prompt {rec['prompt_len']} tokens "
        f"(sequence b: {rec['prompt_len']} - 3b), {rec['new_tokens']} new tokens. {rec['timing']}.",
        "",
        "| model | batch | int decode tok/s | int prefill tok/s | int ms/step | bf16 eager tok/s | "
        "bf16 CUDA-graph tok/s | bf16 prefill tok/s | int / best bf16 | logits hash (seq 0) | token hash |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        L.append(
            f"| {r['model']} | {r['batch']} | {_f(r['int_decode_tps'])} | {_f(r['int_prefill_tps'])} | "
            f"{_f(r['int_step_ms'], 2)} | {_f(r.get('bf16_eager_tps'))} | {_f(r.get('bf16_graph_tps'))} | "
            f"{_f(r.get('bf16_prefill_tps'))} | {_f(r.get('int_over_bf16'), 2)} | `{r['logits_hash']}` | "
            f"`{r['token_hash']}` |"
        )
    if rec["before"]:
        L += [
            "",
            "## Before (unfused engine, same run)",
            "",
            "| model | backend | batch | decode tok/s | hash |",
            "|---|---|---|---|---|",
        ]
        for b in rec["before"]:
            L.append(f"| {b['model']} | {b['backend']} | {b['batch']} | {_f(b['decode_tps'])} | `{b['decode_hash']}` |")
    L += ["", "## Checks", ""]
    for c in rec["checks"]:
        L.append(
            f"- {'PASS' if c['ok'] else 'FAIL'}: {c['model']}: {c['check']}: got `{c.get('got')}`"
            + (f", expected `{c['expected']}`" if "expected" in c else "")
        )
    for r in rec["rows"]:
        if r.get("bf16_graph_error"):
            L.append(f"- bf16 CUDA graph not captured for {r['model']} b{r['batch']}: `{r['bf16_graph_error'][:160]}`")
    if rec["errors"]:
        L += ["", "## Errors", ""] + [f"- `{e}`" for e in rec["errors"]]
    atomic_write_text(out / "detllm.md", "\n".join(L) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = rec["rows"]
        if rows:
            fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
            x = range(len(rows))
            ax.bar([i - 0.2 for i in x], [r["int_decode_tps"] for r in rows], 0.4, label="int (fused, CUDA graph)")
            ax.bar([i + 0.2 for i in x], [r.get("bf16_best_tps") or 0 for r in rows], 0.4, label="bf16 (best)")
            ax.set_xticks(list(x))
            ax.set_xticklabels(
                [f"{r['model'].replace('-shape', '')}\nb{r['batch']}\n{r['logits_hash'][:8]}" for r in rows], fontsize=7
            )
            ax.set_yscale("log")
            ax.set_ylabel("decode tokens/s")
            ax.set_title(f"detllm integer decode vs bf16, {rec['device']}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(out / "detllm.png", dpi=120)
            plt.close(fig)
    except Exception as exc:  # a missing picture must not lose the numbers
        rec["errors"].append(f"picture: {exc!r}")
