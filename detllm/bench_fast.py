"""Decode-throughput measurement: shared helpers (model shapes, random prompts, integer and
bf16 decode tokens/s) and ``run``, the fused-kernel CUDA-graph bench of ``detllm bench --fast``.

``run`` measures, per model (shipped default; random-init Qwen3-0.6B / -1.7B shapes) and batch:
``detllm.fast.fast_generate`` (a warm-up generation, then prefill tokens/s and decode tokens/s
over graph replays only) with the logits / token hash of sequence 0; the bf16 transformers
model eager and, where it captures, as a CUDA graph over a ``StaticCache``; the fast path's
hash vs the CPU reference engine and the default model's pinned hash; and the unfused engine
(``before`` rows). Writes ``<out>/detllm.json``, ``detllm.md`` and ``detllm.png``.
"""

from __future__ import annotations

import json
import tempfile
import time
import traceback
from pathlib import Path

import torch

from conformance.kernels.runner import validate_device
from conformance.runtime.output_dirs import command_root
from detllm import engine as E
from detllm import generate as G
from detllm import ops
from detllm.artifact import is_artifact_dir, load_artifact
from detllm.prepare import TINY_QWEN3, PrepareOptions, artifact_for, prepare
from reference.fileio import atomic_write_text
from reference.model.assets import default_model_dir
from reference.model.corpus import prompts as corpus_prompts
from reference.model.tokenizer import encode, load_tokenizer

QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16)
QWEN3_06B.update(num_key_value_heads=8, head_dim=128, intermediate_size=3072, tie_word_embeddings=True)
QWEN3_06B.update(max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6)
QWEN3_17B = dict(QWEN3_06B, hidden_size=2048, intermediate_size=6144)
SHAPES = {"0.6b": ("qwen3-0.6B-shape", QWEN3_06B), "1.7b": ("qwen3-1.7B-shape", QWEN3_17B)}
PINNED_LOGITS = "c54e130c3f8a"
RANDOM_CALIBRATION = PrepareOptions(calib_windows=2, calib_len=32, calib_source="random")


def sync(dev) -> None:
    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def random_prompts(vocab: int, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    """Sequence b has max(1, length - 3b) random ids (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (max(1, length - 3 * b),), generator=g).tolist() for b in range(batch)]


def make_06b_model(out_dir: Path, seed: int = 0, shapes: dict = QWEN3_06B) -> Path:
    """Random-init float Qwen3 at ``shapes`` (default Qwen3-0.6B), saved as bf16 safetensors."""
    import transformers

    torch.manual_seed(seed)
    transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**shapes)).to(torch.bfloat16).save_pretrained(str(out_dir))
    return out_dir


def random_model_artifact(label: str, shapes: dict, md: Path, art_dir: Path, verbose: bool):
    """Artifact of a random-init model at ``shapes`` (made under ``md`` once, calibrated on random ids)."""
    if not (md / "config.json").is_file():
        make_06b_model(md, shapes=shapes)
    return (
        load_artifact(art_dir)
        if is_artifact_dir(art_dir)
        else prepare(md, art_dir, RANDOM_CALIBRATION, verbose=verbose)
    )


def engine_decode_tps(eng, prompts, new_tokens: int) -> tuple[float, str]:
    """(decode tokens/s, logits hash of seq 0) of the integer engine; prefill not timed."""
    B = len(prompts)
    T = max(len(p) for p in prompts)
    cache = E.new_cache(eng, B, T + new_tokens + 1)
    toks = torch.zeros(B, T, dtype=torch.int64)
    for b, p in enumerate(prompts):
        toks[b, : len(p)] = torch.tensor(p)
    lg = E.forward(eng, toks, [len(p) for p in prompts], cache)
    last = torch.stack([lg[b, len(p) - 1] for b, p in enumerate(prompts)])
    chain = G.HashChain(G.LOGITS_TAG)
    nxt = ops.argmax_int(last)
    lg = E.forward(eng, nxt.view(B, 1).cpu(), [1] * B, cache)  # warm-up step
    sync(eng.device)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        nxt = ops.argmax_int(lg[:, 0])
        lg = E.forward(eng, nxt.view(B, 1).cpu(), [1] * B, cache)
        chain.update_rows(lg[0], "<i4")
    sync(eng.device)
    return B * new_tokens / (time.perf_counter() - t0), chain.hexdigest()[:12]


@torch.no_grad()
def float_decode_tps(model, prompts, new_tokens: int) -> float:
    """Decode tokens/s of a transformers model (left-padded batch, DynamicCache)."""
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    B = len(prompts)
    ids, mask = G.left_pad(prompts)
    cache = DynamicCache()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    kw = G.cache_kwargs(model, cache)
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True, **kw)
    nxt = out.logits[:, -1].argmax(-1)

    def step(nxt, mask):
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
        pos = (mask.sum(-1, keepdim=True) - 1).to(dev)
        out = model(input_ids=nxt.view(B, 1), attention_mask=mask.to(dev), position_ids=pos, use_cache=True, **kw)
        return out.logits[:, -1].argmax(-1), mask

    nxt, mask = step(nxt, mask)  # warm-up
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        nxt, mask = step(nxt, mask)
    sync(dev)
    return B * new_tokens / (time.perf_counter() - t0)


def _slug(name: str) -> str:
    return "-".join(name.lower().replace("_", " ").split())


def _setup(name: str, work: Path):
    """(label, Artifact, model_dir) for a model name of ``--models``."""
    if name == "default":
        md = default_model_dir()
        return "default-model", artifact_for(md), md
    label, shapes = ("tiny-random", TINY_QWEN3) if name == "tiny" else SHAPES[name]
    md = work / f"{label}_random"
    return label, random_model_artifact(label, shapes, md, work / f"{label}_artifact", False), md


@torch.no_grad()
def bf16_graph_tps(model, B: int, T: int, new_tokens: int, vocab: int) -> float:
    """Decode tokens/s of the bf16 model, StaticCache, decode step captured in a CUDA graph
    (equal-length random prompts, no padding mask). Raises whatever transformers / CUDA raise
    when the step cannot be captured."""
    from transformers import StaticCache

    dev = next(model.parameters()).device
    L = T + new_tokens + 8
    try:
        cache = StaticCache(config=model.config, max_batch_size=B, max_cache_len=L, device=dev, dtype=torch.bfloat16)
    except TypeError:
        cache = StaticCache(config=model.config, max_cache_len=L)
    kw = G.cache_kwargs(model, cache)
    ids = torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(1)).to(dev)
    pos0 = torch.arange(T, device=dev)
    out = model(input_ids=ids, position_ids=pos0[None].expand(B, T), cache_position=pos0, use_cache=True, **kw)
    inp = out.logits[:, -1].argmax(-1).view(B, 1).clone()
    pos = torch.full((B, 1), T, dtype=torch.long, device=dev)
    cpos = torch.full((1,), T, dtype=torch.long, device=dev)

    def step():
        o = model(input_ids=inp, position_ids=pos, cache_position=cpos, use_cache=True, **kw)
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
    ids, mask = (t.to(dev) for t in G.left_pad(prompts))
    model(input_ids=ids, attention_mask=mask)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model(input_ids=ids, attention_mask=mask)
    torch.cuda.synchronize()
    return sum(len(p) for p in prompts) / (time.perf_counter() - t0)


def _bench_batch(eng, fm, label, art, ps, args) -> dict:
    from detllm import fast as F

    F.fast_generate(eng, ps, 4)  # warm-up: compile, capture
    tm: dict = {}
    r = F.fast_generate(eng, ps, args.new_tokens, timings=tm)
    B = len(ps)
    row = dict(model=label, artifact=art.digest[:12], batch=B, int_decode_tps=B * tm["decode_steps"] / tm["decode_s"])
    row.update(int_prefill_tps=tm["prefill_tokens"] / tm["prefill_s"])
    row.update(int_step_ms=1e3 * tm["decode_s"] / max(1, tm["decode_steps"]), logits_hash=r.logits_hash[0][:12])
    row.update(token_hash=r.token_hash[0][:12], cuda_graph=r.info.get("cuda_graph"), _seq0=r.logits_hash[0])
    if fm is not None:
        float_decode_tps(fm, ps, 2)  # warm-up
        row["bf16_eager_tps"] = float_decode_tps(fm, ps, args.new_tokens)
        try:
            row["bf16_graph_tps"] = bf16_graph_tps(
                fm, B, args.prompt_len, args.new_tokens, art.config["model"]["vocab"]
            )
        except Exception as exc:  # noqa: BLE001 -- CUDA-graph capture of a transformers model may raise anything: recorded, eager numbers stay
            row["bf16_graph_tps"] = None
            row["bf16_graph_error"] = repr(exc)[:300]
        row["bf16_prefill_tps"] = bf16_prefill_tps(fm, ps)
        row["bf16_best_tps"] = max(v for v in (row["bf16_eager_tps"], row["bf16_graph_tps"]) if v)
        row["int_over_bf16"] = row["int_decode_tps"] / row["bf16_best_tps"]
    return row


def run(args) -> int:
    """Run the fast-path bench; print; write the reports. Returns 0, or 1 if any hash check failed.

    Raises Int8confError (one line) for a ``--device`` that is not usable (``validate_device``)."""
    from detllm import fast as F

    dev = str(validate_device(args.device))
    where = torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu"
    out = Path(args.out or command_root("bench") / _slug(where))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="detllm_bench_"))
    batches = list(args.batches)
    rec = dict(device=where, torch=torch.__version__, rows=[], checks=[], before=[], errors=[])
    rec.update(prompt_len=args.prompt_len, new_tokens=args.new_tokens)
    rec["timing"] = (
        "decode: CUDA-graph replays after one eager and one capturing step, synchronized wall clock; prefill: one fused prefill of all prompt tokens after a warm-up generation"
    )
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
        except Exception as exc:  # noqa: BLE001 -- a model's setup (download, build) may raise anything: report and continue with the next model
            rec["errors"].append(f"{name}: setup failed: {exc!r}")
            continue
        print(f"{label}: artifact {art.digest[:12]} ready in {time.time() - t0:.0f}s", flush=True)
        V = art.config["model"]["vocab"]
        eng = E.load_engine(art, None, dev, guard=False)
        fm = G.load_float_model(md, torch.bfloat16, dev) if dev.startswith("cuda") else None
        if name == "default":
            try:
                r = F.fast_generate(eng, [encode(load_tokenizer(md), corpus_prompts()[0])], 16)
                got = r.logits_hash[0][:12]
                check = "pinned hash (Sonnet 18, 16 tokens), fast path"
                ok &= got == PINNED_LOGITS
                rec["checks"].append(
                    dict(model=label, check=check, expected=PINNED_LOGITS, got=got, ok=got == PINNED_LOGITS)
                )
            except Exception as exc:  # noqa: BLE001 -- a failing check is recorded as an error, the benchmark goes on
                rec["errors"].append(f"{label}: pinned check: {exc!r}")
        if args.cpu_check_tokens and name in args.cpu_check_models.split(","):
            try:
                ps1 = random_prompts(V, 1, args.prompt_len)
                t1 = time.time()
                ref = G.generate(E.load_engine(art, None, "cpu", guard=False), ps1, args.cpu_check_tokens)
                got = F.fast_generate(eng, ps1, args.cpu_check_tokens)
                good = ref.logits_hash[0] == got.logits_hash[0] and ref.token_hash[0] == got.token_hash[0]
                ok &= good
                check = f"fast path on {dev} vs CPU reference engine, batch 1, {args.prompt_len}-token prompt, {args.cpu_check_tokens} tokens"
                exp, got, secs = ref.logits_hash[0][:12], got.logits_hash[0][:12], round(time.time() - t1, 1)
                rec["checks"].append(dict(model=label, check=check, expected=exp, got=got, ok=good, cpu_seconds=secs))
                print(rec["checks"][-1], flush=True)
            except Exception as exc:  # noqa: BLE001 -- a failing check is recorded as an error, the benchmark goes on
                rec["errors"].append(f"{label}: cpu check: {exc!r}")
        seq0 = set()
        for B in batches:
            try:
                row = _bench_batch(eng, fm, label, art, random_prompts(V, B, args.prompt_len), args)
                seq0.add(row.pop("_seq0"))
                rec["rows"].append(row)
                print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            except Exception as exc:  # noqa: BLE001 -- one batch size failing is recorded, the other batches go on
                rec["errors"].append(f"{label} batch {B}: {exc!r}")
                traceback.print_exc()
        if len(batches) > 1 and seq0:
            ok &= len(seq0) == 1
            check = f"sequence-0 logits hash identical at batch {batches}"
            got = sorted(h[:12] for h in seq0)
            rec["checks"].append({"model": label, "check": check, "ok": len(seq0) == 1, "got": got})
        if name == "0.6b" and args.before:
            for k in [x for x in args.before.split(",") if x]:
                for B in (1, 8):
                    try:
                        ek = E.load_engine(art, k, dev, guard=False)
                        tps, h = engine_decode_tps(ek, random_prompts(V, B, args.prompt_len), args.before_tokens)
                        before = dict(
                            model=label, backend=f"detllm engine, {k}", batch=B, decode_tps=tps, decode_hash=h
                        )
                        rec["before"].append(before)
                        print(before, flush=True)
                    except Exception as exc:  # noqa: BLE001 -- a kernel's engine may raise anything: recorded, the benchmark goes on
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
        L += ["", "## Before (unfused engine, same run)", "", "| model | backend | batch | decode tok/s | hash |"]
        L.append("|---|---|---|---|---|")
        for b in rec["before"]:
            L.append(f"| {b['model']} | {b['backend']} | {b['batch']} | {_f(b['decode_tps'])} | `{b['decode_hash']}` |")
    L += ["", "## Checks", ""]
    for c in rec["checks"]:
        exp = f", expected `{c['expected']}`" if "expected" in c else ""
        L.append(f"- {'PASS' if c['ok'] else 'FAIL'}: {c['model']}: {c['check']}: got `{c.get('got')}`{exp}")
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
            ticks = [f"{r['model'].replace('-shape', '')}\nb{r['batch']}\n{r['logits_hash'][:8]}" for r in rows]
            ax.set_xticklabels(ticks, fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("decode tokens/s")
            ax.set_title(f"detllm integer decode vs bf16, {rec['device']}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(out / "detllm.png", dpi=120)
            plt.close(fig)
    except Exception as exc:  # noqa: BLE001 -- matplotlib missing or failing: a missing picture must not lose the numbers
        rec["errors"].append(f"picture: {exc!r}")
