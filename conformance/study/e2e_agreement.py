"""Part 3 of the power-of-two study: end-to-end greedy agreement.

Greedy decoding (``reference.model.forward.greedy_generate``: prefill, then KV-cached decode steps, argmax with
ties to the smallest id, no early stop) of the fixed prompts, compared: A vs B under own and power-of-two scales;
the same kernel in a fresh process (run-to-run nondeterminism vs kernel differences); token-by-token decode vs one
prefill of the whole sequence (shape effects: M = 1 GEMMs, KV-cache attention). Each step is compared through its
float32 top-1 logit and top-2 margin, so a disagreement that has not (yet) flipped a token still shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

import torch

from conformance.checks.token_flip import bf16_spacing
from conformance.study.arms import StudyContext
from conformance.study.interp import study_kernel
from conformance.study.lockstep import Lockstep
from conformance.study.model_run import resolve_kernel_list
from reference.errors import Int8confError
from reference.fileio import atomic_write_json
from reference.model.corpus import prompts
from reference.model.forward import check_context, greedy_generate, teacher_forced
from reference.model.tokenizer import encode


def prompt_token_ids(ctx, n: int) -> list[list[int]]:
    """Token ids of the first ``n`` fixed prompts; Int8confError when ``n`` is outside [1, 8]."""
    ps = prompts()
    if not 1 <= n <= len(ps):
        raise Int8confError(f"--prompts {n} outside [1, {len(ps)}]")
    return [encode(ctx.tokenizer, p) for p in ps[:n]]


def generate(model, prompts_ids: list[list[int]], new_tokens: int, lockstep=None) -> list[dict]:
    """Greedy continuation of every prompt, each its own batch-1 run (with ``lockstep``, the ``Lockstep`` of
    ``len(prompts_ids)`` threads ``model``'s kernels were wrapped with, run together). One dict per prompt:
    ``tokens`` (new ids), ``top1`` and ``margin`` (float32 top-1 logit and top-1 minus top-2, per step)."""

    def one(i):
        top1, margin = [], []

        def on_step(step, logits):
            t2 = logits.topk(2).values
            top1.append(float(t2[0]))
            margin.append(float(t2[0] - t2[1]))

        toks = greedy_generate(model, prompts_ids[i], new_tokens, eos_token_id=None, on_step=on_step)
        return {"tokens": toks, "top1": top1, "margin": margin}

    return _per_prompt(one, len(prompts_ids), lockstep)


def _per_prompt(fn, n: int, lockstep) -> list:
    if lockstep is None:
        return [fn(i) for i in range(n)]
    if lockstep.n != n:
        raise ValueError(f"lockstep of {lockstep.n} threads for {n} prompts")
    return lockstep.run(fn)


def lockstep_model(ctx, spec, arm: str, n_prompts: int):
    """``(model, Lockstep)``: ``arm`` through ``spec``, kernel calls batched across ``n_prompts`` threads."""
    ls = Lockstep(n_prompts)
    return ctx.model(spec, arm, wrap=ls.wrap_all)[0], ls


def _spacing(x: float) -> float:
    return float(bf16_spacing(torch.tensor([x], dtype=torch.float32))[0])


def compare_runs(x: list[dict], y: list[dict]) -> dict:
    """Two generation runs compared prompt by prompt: ``{"prompts", "identical_sequences", "identical_logits"
    (also equal top-1 and margin every step), "per_prompt": [{"identical", "first_divergence" (step or None),
    "first_logit_difference" (step or None), "logits_identical", and at a divergence "tokens" ([x, y]),
    "margin_x", "margin_y", "margin_x_spacings", "margin_y_spacings"}]}``."""
    per = []
    for rx, ry in zip(x, y):
        tx, ty = rx["tokens"], ry["tokens"]
        div = next((i for i, (p, q) in enumerate(zip(tx, ty)) if p != q), None)
        if div is None and len(tx) != len(ty):
            div = min(len(tx), len(ty))
        steps = min(len(rx["top1"]), len(ry["top1"]))
        ldiff = next(
            (i for i in range(steps) if rx["top1"][i] != ry["top1"][i] or rx["margin"][i] != ry["margin"][i]), None
        )
        rec = {
            "identical": div is None,
            "first_divergence": div,
            "first_logit_difference": ldiff,
            "logits_identical": div is None and ldiff is None,
        }
        if div is not None and div < steps:
            mx, my = rx["margin"][div], ry["margin"][div]
            rec.update(
                tokens=[tx[div], ty[div]],
                margin_x=mx,
                margin_y=my,
                margin_x_spacings=mx / _spacing(rx["top1"][div]),
                margin_y_spacings=my / _spacing(ry["top1"][div]),
            )
        per.append(rec)
    return {
        "prompts": len(per),
        "identical_sequences": sum(r["identical"] for r in per),
        "identical_logits": sum(r["logits_identical"] for r in per),
        "per_prompt": per,
    }


def prefill_run(model, prompts_ids: list[list[int]], decoded: list[dict], lockstep=None) -> list[dict]:
    """Each prompt + its decoded continuation as ONE teacher-forced prefill (batch 1; ``lockstep`` as in
    :func:`generate`): in :func:`generate`'s format, the token predicted at each decode step. Every prompt needs
    >= 1 decoded token."""

    def one(i):
        ids, toks = prompts_ids[i], decoded[i]["tokens"]
        seq = torch.tensor([list(ids) + toks[:-1]], dtype=torch.long)
        tf = teacher_forced(model, seq, batch_size=1)
        s = len(ids) - 1
        return {
            "tokens": [int(v) for v in tf.argmax[0, s:]],
            "top1": [float(v) for v in tf.top1[0, s:]],
            "margin": [float(v) for v in tf.margin[0, s:]],
        }

    return _per_prompt(one, len(prompts_ids), lockstep)


def _fresh_process_run(kernel_arg: str, arm: str, ctx, n_prompts: int, new_tokens: int) -> list[dict]:
    """:func:`generate` in a new process (``python -m conformance.study.e2e_agreement SPEC OUT``)."""
    spec = {
        "model_dir": str(ctx.model_dir),
        "kernel": kernel_arg,
        "arm": arm,
        "prompts": n_prompts,
        "new_tokens": new_tokens,
        "device": ctx.device,
        "committed_dir": None if ctx.committed_dir is None else str(ctx.committed_dir),
        "cache": None if ctx.cache is None else str(ctx.cache),
    }
    with tempfile.TemporaryDirectory(prefix="int8conf-study-") as td:
        sp, op = Path(td) / "spec.json", Path(td) / "out.json"
        sp.write_text(json.dumps(spec))
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        r = subprocess.run(
            [sys.executable, "-m", "conformance.study.e2e_agreement", str(sp), str(op)],
            env=env,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0 or not op.is_file():
            tail = (r.stderr or r.stdout or "").strip().splitlines()
            raise Int8confError(
                f"fresh-process generation with kernel {kernel_arg!r} failed "
                f"(exit {r.returncode}): {tail[-1] if tail else 'no output'}"
            )
        return json.loads(op.read_text())["runs"]


def run_e2e_agreement(
    ctx,
    kernel_args: tuple[str, str],
    n_prompts: int,
    new_tokens: int,
    modes=("own", "pow2-nearest"),
    fresh: str = "a",
    progress: Optional[Callable[[str], None]] = None,
    resume_dir=None,
    resume_key: Optional[dict] = None,
) -> dict:
    """Part 3 on a ``StudyContext``. ``kernel_args``: the kernels as named on the command line (a fresh process
    resolves them again); ``fresh``: kernels that repeat their own-scale run in a new process (``"none"``, ``"a"``,
    ``"both"``). With ``resume_dir`` every finished run is kept there under ``resume_key`` (:class:`ResumableRuns`).

    Returns ``{"prompts", "new_tokens", "prompt_lengths", "batching", "a_vs_b": {mode: compare_runs},
    "fresh_process": {kernel: ...}, "prefill_vs_decode": {kernel: ...}, "sequences": {mode: {kernel: [tokens]}}}``.
    """
    say = progress or (lambda s: None)
    pids = prompt_token_ids(ctx, n_prompts)
    longest = max(len(p) for p in pids)
    check_context(
        longest + new_tokens, ctx.base.config, f"longest prompt ({longest} tokens) + --new-tokens ({new_tokens})"
    )
    a, b = ctx.kernels
    runs: dict = {}
    models: dict = {}  # (kernel, mode) -> (model, Lockstep), built on first use
    store = ResumableRuns(resume_dir, dict(resume_key or {}, modes=list(modes)))

    def model(spec, mode):
        if (spec.name, mode) not in models:
            models[(spec.name, mode)] = lockstep_model(ctx, spec, mode, n_prompts)
        return models[(spec.name, mode)]

    out = {
        "prompts": n_prompts,
        "new_tokens": new_tokens,
        "prompt_lengths": [len(p) for p in pids],
        "batching": "lockstep: each prompt its own batch-1 run (own KV cache, attention, lm_head); "
        "the kernel called once per layer on all prompts' rows (conformance.study.lockstep)",
        "a_vs_b": {},
        "fresh_process": {},
        "prefill_vs_decode": {},
        "sequences": {},
    }
    for mode in modes:
        for spec in (a, b):
            runs[(spec.name, mode)] = store.get(
                f"generate-{spec.name}-{mode}",
                lambda: generate(model(spec, mode)[0], pids, new_tokens, model(spec, mode)[1]),
            )
            say(f"e2e {spec.name} {mode}: {n_prompts} prompts x {new_tokens} tokens generated")
        c = out["a_vs_b"][mode] = compare_runs(runs[(a.name, mode)], runs[(b.name, mode)])
        out["sequences"][mode] = {s.name: [r["tokens"] for r in runs[(s.name, mode)]] for s in (a, b)}
        say(f"e2e {mode}: {c['identical_sequences']}/{n_prompts} sequences identical A vs B")
    for i, (spec, arg) in enumerate(zip((a, b), kernel_args)):
        if fresh == "both" or (fresh == "a" and i == 0):
            again = store.get(f"fresh-{spec.name}", lambda: _fresh_process_run(arg, "own", ctx, n_prompts, new_tokens))
            c = out["fresh_process"][spec.name] = compare_runs(runs[(spec.name, "own")], again)
            say(f"e2e {spec.name} fresh process: {c['identical_sequences']}/{n_prompts} identical")
        pre = store.get(
            f"prefill-{spec.name}",
            lambda: prefill_run(model(spec, "own")[0], pids, runs[(spec.name, "own")], model(spec, "own")[1]),
        )
        c = out["prefill_vs_decode"][spec.name] = compare_runs(runs[(spec.name, "own")], pre)
        say(f"e2e {spec.name} prefill vs decode: {c['identical_sequences']}/{n_prompts} identical")
    return out


class ResumableRuns:
    """Finished runs of the end-to-end part, one JSON file each: ``get(name, compute)`` returns
    ``<dir>/<name>.json``'s runs when stored under the same key, else computes and stores them atomically
    (``directory`` None: always computes, stores nothing)."""

    def __init__(self, directory, key: dict):
        self.dir = None if directory is None else Path(directory)
        self.key = key
        self.reused: list[str] = []

    def get(self, name: str, compute: Callable[[], list]) -> list:
        if self.dir is None:
            return compute()
        p = self.dir / f"{name}.json"
        try:
            rec = json.loads(p.read_text())
            if rec.get("key") == self.key:
                self.reused.append(name)
                return rec["runs"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass
        runs = compute()
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(p, {"key": self.key, "runs": runs})
        return runs


def _worker(spec_path: str, out_path: str) -> int:
    """Fresh-process entry: read a spec JSON, generate, write ``{"runs": ...}``."""
    spec = json.loads(Path(spec_path).read_text())
    kern = study_kernel(resolve_kernel_list(spec["kernel"])[0], spec["device"])
    ctx = StudyContext(
        model_dir=Path(spec["model_dir"]),
        kernels=(kern,),
        device=spec["device"],
        committed_dir=None if spec["committed_dir"] is None else Path(spec["committed_dir"]),
        cache=None if spec["cache"] is None else Path(spec["cache"]),
    )
    model, ls = lockstep_model(ctx, kern, spec["arm"], spec["prompts"])
    runs = generate(model, prompt_token_ids(ctx, spec["prompts"]), spec["new_tokens"], ls)
    atomic_write_json(Path(out_path), {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1], sys.argv[2]))
