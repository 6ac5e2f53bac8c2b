"""The engine as an end-to-end oracle for a kernel's accumulator path (check E1, DESIGN.md section 4).

``engine_hash_check(kernel)`` greedy-decodes the default model's prompts with the exact reference
accumulator and with ``kernel.int_mm`` and demands identical logits and token hashes: every int8 GEMM
of the forward goes through the kernel, so any inexact accumulator changes the hash.
``fault_sensitivity`` shows that injected accumulator faults do change it.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from conformance.kernels.registry import get_kernel
from detllm import engine as E
from detllm import generate as G
from detllm.prepare import artifact_for
from reference.errors import Int8confError
from reference.model.assets import default_model_dir
from reference.model.checkpoint import is_qwen3_dir
from reference.model.corpus import prompts as corpus_prompts
from reference.model.tokenizer import encode, load_tokenizer

CHECK_ID = "E1"
CHECK_NAME = "engine_hash"


def _result(verdict: str, summary: str, evidence: dict) -> dict:
    return {"check_id": CHECK_ID, "name": CHECK_NAME, "verdict": verdict, "summary": summary, "evidence": evidence}


def default_setup(model_dir=None, n_prompts: int = 8):
    """(artifact, prompt id lists) for the shipped default model and prompts; Int8confError when the model is absent."""
    md = model_dir or default_model_dir()
    if not is_qwen3_dir(md):
        raise Int8confError(f"{md}: default model not present")
    art = artifact_for(md)
    tok = load_tokenizer(md)
    prompts = [encode(tok, p) for p in corpus_prompts()[:n_prompts]]
    return art, prompts


def _kernel_device(kernel) -> str:
    devs = tuple(getattr(kernel, "devices", ("cpu",)) or ("cpu",))
    if "cpu" in devs:
        return "cpu"
    if "cuda" in devs and torch.cuda.is_available():
        return "cuda"
    return devs[0]


def engine_hash_check(kernel, model_dir=None, artifact=None, prompts=None, max_new_tokens: int = 8, device=None):
    """E1: the engine hash with ``kernel.int_mm`` (KernelSpec or registry name) == the hash with the exact reference.

    The reference runs on the CPU; the kernel on ``device`` (default: one it declares, CPU preferred).
    Returns ``{check_id, name, verdict, summary, evidence}``: ``pass`` when every sequence's hashes match,
    ``fail`` with the first differing sequence (or when the kernel raises), ``n/a`` without an int_mm
    entry or a model.
    """
    name = getattr(kernel, "name", str(kernel))
    if isinstance(kernel, str):
        kernel = get_kernel(kernel)
    if getattr(kernel, "int_mm", None) is None:
        return _result("n/a", f"kernel {name!r} has no int_mm (accumulator-only) entry", {"kernel": name})
    try:
        if artifact is None:
            artifact, default_prompts = default_setup(model_dir)
            prompts = prompts or default_prompts
        elif not isinstance(artifact, E.Artifact):
            artifact = E.load_artifact(artifact)
    except Int8confError as exc:
        return _result("n/a", f"no model for the engine oracle: {exc}", {"kernel": name})
    if not prompts:
        return _result("n/a", "no prompts given", {"kernel": name})
    dev = device or _kernel_device(kernel)
    t0 = time.time()
    ref = G.generate(E.load_engine(artifact, None, "cpu", guard=False), prompts, max_new_tokens)
    t1 = time.time()
    evidence = dict(kernel=name, device=dev, artifact_digest=artifact.digest[:12], prompts=len(prompts))
    evidence.update(max_new_tokens=max_new_tokens, reference_logits_hash=[h[:12] for h in ref.logits_hash])
    evidence.update(reference_token_hash=[h[:12] for h in ref.token_hash], reference_s=round(t1 - t0, 2))
    try:
        eng = E.load_engine(artifact, kernel, dev, guard=False)
        got = G.generate(eng, prompts, max_new_tokens)
    except Exception as exc:  # noqa: BLE001 -- the user's kernel may raise anything: its failure is evidence, not a crash
        evidence["error"] = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return _result("fail", f"engine with kernel {name!r} raised: {evidence['error']}", evidence)
    evidence["kernel_logits_hash"] = [h[:12] for h in got.logits_hash]
    evidence["kernel_token_hash"] = [h[:12] for h in got.token_hash]
    evidence["kernel_s"] = round(time.time() - t1, 2)
    evidence["int_mm_calls"] = eng.mm_calls
    pairs = (got.logits_hash, ref.logits_hash), (got.token_hash, ref.token_hash)
    bad = [i for i in range(len(prompts)) if any(g[i] != r[i] for g, r in pairs)]
    if bad:
        i = bad[0]
        evidence["mismatched_sequences"] = bad
        first = f"#{i} {got.logits_hash[i][:12]} != {ref.logits_hash[i][:12]}"
        msg = f"engine hash differs from the exact reference on {len(bad)}/{len(prompts)} sequences (first: {first})"
        return _result("fail", msg, evidence)
    msg = f"engine hash {ref.logits_hash[0][:12]} identical to the exact reference on {len(prompts)} sequences x {max_new_tokens} tokens ({eng.mm_calls} int_mm calls)"
    return _result("pass", msg, evidence)


def wraparound_fault(base: Callable, call_index: int = 0, row: int = -1, col: int = 0) -> Callable:
    """int_mm whose accumulator [row, col] on the ``call_index``-th call wraps like an overflowed int32
    register: acc + 2^31 kept to its low 32 bits (fault F6's mechanism).
    """
    state = {"n": 0}

    def int_mm(a, b):
        out = base(a, b)
        if state["n"] == call_index:
            v = out.to(torch.int64)
            r = row % v.shape[0] if row < 0 else min(row, v.shape[0] - 1)
            c = col % v.shape[1] if col < 0 else min(col, v.shape[1] - 1)
            v[r, c] = ((v[r, c] + 2**31 + 2**31) % 2**32) - 2**31  # low 32 bits of acc + 2^31
            out = v.to(torch.int32)
        state["n"] += 1
        return out

    return int_mm


def transposed_operand_fault(base: Callable, call_index: int = 0) -> Callable:
    """int_mm fed b^T (square b) or b with its rows rolled by one on the ``call_index``-th call."""
    state = {"n": 0}

    def int_mm(a, b):
        if state["n"] == call_index:
            b = b.t().contiguous() if b.shape[0] == b.shape[1] else torch.roll(b, 1, dims=0).contiguous()
        state["n"] += 1
        return base(a, b)

    return int_mm


def fault_sensitivity(artifact, prompts, max_new_tokens: int = 4) -> dict:
    """``{fault: {"logits_hash", "changed"}}`` plus ``"clean"`` for faults injected into the accumulator path.

    Faults: wraparound on the first GEMM and on the last, a transposed / stale weight on the first; control:
    a wraparound of position 0's query, which cannot change any logit (position 0 attends only to itself).
    """
    ref_mm = E.reference_int_mm
    clean = G.generate(E.load_engine(artifact, ref_mm, guard=False), prompts, max_new_tokens)
    out = {"clean": {"logits_hash": clean.logits_hash[0][:12]}}
    probe = E.load_engine(artifact, ref_mm, guard=False)
    G.generate(probe, prompts, max_new_tokens)
    last = probe.mm_calls - 1
    cases = {
        "int32_wraparound_first_gemm": wraparound_fault(ref_mm, 0),
        "int32_wraparound_last_gemm": wraparound_fault(ref_mm, last),
        "transposed_or_stale_weight": transposed_operand_fault(ref_mm, 0),
        "control_wraparound_query_of_position_0": wraparound_fault(ref_mm, 0, row=0, col=0),
    }
    for nm, fn in cases.items():
        r = G.generate(E.load_engine(artifact, fn, guard=False), prompts, max_new_tokens)
        out[nm] = {"logits_hash": r.logits_hash[0][:12], "changed": r.logits_hash[0] != clean.logits_hash[0]}
    return out
