"""What C13 (``graph_replay``), C14 (``compile``) and C15 (``streams_devices``) share: the sample of cases they
call the kernel on and the bit comparison of two outputs (issue 45: the kernel as the serving stack calls it).

The sample (:func:`sample_cases`): first the two core cases, one decode (M = :data:`DECODE_M` <= 16: what vLLM /
SGLang capture in a CUDA graph; per-token / per-channel scales, a bias, the kernel's first out dtype, bf16 when any)
and one prefill (M = :data:`PREFILL_M` >= 128; 0-d scales, no bias, fp16 when the kernel writes it); then a 3-wise
covering array (covertable, :func:`covering_rows`) over M (:data:`M_REGIMES`: 1, the GEMV path kernels branch to;
decode; prefill; :data:`LARGE_M`, vLLM's largest CUDA-graph batch), scale form (per-token / 0-d), bias and every out
dtype the kernel writes. A host read, an allocation or stream outside the capture, a wrong fake or a race depends on
the call, not the values, but a kernel may take such a step on one path only (a 0-d scale read on the host at M = 1;
a fake wrong for float32 with a bias): the rows reach each path at a few ms a case. K x N = :data:`K` x :data:`N`. A
shape is rounded up to the kernel's ``ShapeConstraints`` and a feature it does not take (bias, per-token scales, out
dtype) left out (a row that then repeats an earlier case is dropped), so every kernel is sampled. Operands are C9's
seeded random int8 / e4m3 (``batch_invariance.random_operand``). A block-scaled kernel's sample takes its first
declared block size (scale_a [M, KB], scale_b [NB, KB]) and is called through ``runner.kernel_call``."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable, Optional

import covertable
import torch
from torch import Tensor

from conformance.checks.batch_invariance import random_operand
from conformance.checks.compare import bit_differences
from conformance.kernels.runner import kernel_call
from conformance.kernels.spec import FP8
from reference.errors import first_line
from reference.fp8 import E4M3
from reference.operands import GemmOperands

DECODE_M, PREFILL_M, LARGE_M, K, N = 8, 128, 512, 512, 256
#: the covering rows' M values: the GEMV path (M = 1), a decode M, a prefill M, a large M
M_REGIMES = (1, DECODE_M, PREFILL_M, LARGE_M)
#: the two core cases lead the sample (C14 compiles these; module docstring)
CORE = 2
#: the operand names in ``scaled_mm``'s positional order, then bias
NAMES = ("a", "b", "scale_a", "scale_b", "bias")


def _up(v: int, mult: int) -> int:
    return -(-v // mult) * mult if mult > 1 else v


def _shape(spec, m: int) -> tuple[int, int, int]:
    c = spec.constraints
    k = _up(K, c.k_multiple)
    if c.max_k is not None and k > c.max_k:
        k = max(c.k_multiple, (c.max_k // max(1, c.k_multiple)) * max(1, c.k_multiple))
    return _up(max(m, c.min_m), c.m_multiple), k, _up(N, c.n_multiple)


def _out_dtypes(spec) -> list:
    allowed = list(spec.constraints.out_dtypes) or ["bfloat16", "float16", "float32"]
    return [getattr(torch, d) for d in allowed]


def make_operands(spec, m: int, out_dtype, per_token: bool, bias: bool, seed: int, name: str) -> GemmOperands:
    """Seeded operands of the sample for ``spec`` (module docstring): M >= ``m`` rounded to its constraints."""
    m, k, n = _shape(spec, m)
    g = torch.Generator().manual_seed(4500 + seed)
    dt = E4M3 if getattr(spec, "operands", "int8") == FP8 else torch.int8
    a, b = random_operand((m, k), g, dt), random_operand((n, k), g, dt)
    block = spec.block.sizes[0] if getattr(spec, "block", None) is not None else None
    rows_a, rows_b = ((m, -(-k // block[1])), (-(-n // block[0]), -(-k // block[1]))) if block else ((m,), (n,))
    sa = (torch.rand(rows_a, generator=g) * 0.02 + 1e-3).to(torch.float32)
    sb = (torch.rand(rows_b, generator=g) * 0.002 + 1e-4).to(torch.float32)
    if block is None and (not per_token or spec.constraints.scales == "tensor"):
        sa, sb = sa[0].clone(), sb[0].clone()
    bv = (torch.randn(n, generator=g) * 4).to(out_dtype) if bias and spec.constraints.bias else None
    meta = {"source": "serving-sample", "seed": seed}
    return GemmOperands(a, b, sa, sb, bv, out_dtype, name, "synthetic", meta, block_size=block)


@lru_cache(maxsize=None)
def covering_rows(out_dtypes: tuple[str, ...]) -> tuple[dict, ...]:
    """The 3-wise covering array over ``m`` (:data:`M_REGIMES`), ``scales`` (token / tensor), ``bias`` (bias / none)
    and ``out_dtype`` (torch dtype names): dicts, deterministic (covertable's hash sorter)."""
    factors = {
        "m": list(M_REGIMES),
        "scales": ["token", "tensor"],
        "bias": ["bias", "none"],
        "out_dtype": list(out_dtypes),
    }
    rows = covertable.make(factors, strength=min(3, len(factors)))
    return tuple({a: r[a] for a in factors} for r in rows)


def _key(ops: GemmOperands) -> tuple:
    return ops.m, tuple(ops.scale_a.shape), ops.bias is not None, ops.out_dtype


def sample_cases(spec, seed: int = 0) -> list[GemmOperands]:
    """The core decode and prefill cases, then the covering rows' cases not already held (module docstring)."""
    dts = _out_dtypes(spec)
    prefill_dt = torch.float16 if torch.float16 in dts else dts[0]
    out = [
        make_operands(spec, DECODE_M, dts[0], True, True, seed, f"serving/decode-M{DECODE_M}"),
        make_operands(spec, PREFILL_M, prefill_dt, False, False, seed, f"serving/prefill-M{PREFILL_M}"),
    ]
    held = {_key(o) for o in out}
    for r in covering_rows(tuple(str(d).replace("torch.", "") for d in dts)):
        ops = make_operands(
            spec, r["m"], getattr(torch, r["out_dtype"]), r["scales"] == "token", r["bias"] == "bias", seed, ""
        )
        if _key(ops) not in held:
            held.add(_key(ops))
            form = "block" if ops.block_size else "token" if ops.scale_a.dim() else "tensor"
            out.append(
                dataclasses.replace(
                    ops, name=f"serving/cover-M{ops.m}-{form}-{'bias' if ops.bias is not None else 'none'}"
                )
            )
    return out


def fresh_like(spec, ops: GemmOperands, seed: int) -> GemmOperands:
    """``ops`` with new activations: ``a`` and ``scale_a`` of the same shapes, dtypes and scale form (other values:
    seed ``seed``); the weight, its scale and the bias stay ``ops``' own, as a serving stack's captured decode graph
    replays new tokens through the same layer (a kernel may pack its weight once)."""
    per_token = ops.scale_a.dim() > 0
    new = make_operands(spec, ops.m, ops.out_dtype, per_token, ops.bias is not None, seed, ops.name + "/new")
    assert (new.m, new.k, new.n) == (ops.m, ops.k, ops.n)
    return dataclasses.replace(ops, a=new.a, scale_a=new.scale_a, name=new.name)


def on_device(ops: GemmOperands, device: Any) -> dict:
    """``{name: tensor or None}``: dense copies of ``ops``' operands on ``device`` (name order :data:`NAMES`)."""
    return {k: None if v is None else v.detach().to(device).contiguous().clone() for k, v in zip(NAMES, _tensors(ops))}


def _tensors(ops: GemmOperands) -> tuple:
    return ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias


def call(fn: Callable, t: dict, out_dtype) -> Any:
    """``fn(a, b, scale_a, scale_b, out_dtype=..., bias=...)`` on the operand dict ``t``."""
    return fn(t["a"], t["b"], t["scale_a"], t["scale_b"], out_dtype=out_dtype, bias=t["bias"])


def kernel_fn(spec, ops: GemmOperands) -> Callable:
    """The callable a sample case is called through: ``spec.scaled_mm``, ``block_size=`` bound for a block case."""
    return kernel_call(spec, ops)


def bit_difference(got: Any, ref: Tensor) -> Optional[str]:
    """None when ``got`` is a tensor of ``ref``'s shape and dtype with its canonical bits (NaN payloads alike;
    the sign of zero counts), else one line: the interface difference or ``n of N elements differ, first [i, j]``."""
    if not isinstance(got, Tensor):
        return f"returned {type(got).__name__}, expected a tensor"
    if tuple(got.shape) != tuple(ref.shape) or got.dtype != ref.dtype:
        return f"returned {got.dtype} {tuple(got.shape)}, the eager call {ref.dtype} {tuple(ref.shape)}"
    d = bit_differences(got.detach().cpu(), ref.detach().cpu())[0]
    n = int(d.sum())
    if n == 0:
        return None
    i, j = (int(v) for v in d.nonzero()[0])
    return f"{n} of {d.numel()} elements differ from the eager call's bits, first [{i}, {j}]"


def exception_line(e: BaseException) -> str:
    """``<type>: <first line>`` of an exception."""
    return f"{type(e).__name__}: {first_line(e, None)}"


def case_label(ops: GemmOperands) -> str:
    """``serving/decode-M8 (8x512x256 bfloat16, bias)``."""
    feats = [str(ops.out_dtype).replace("torch.", "")]
    feats += ["bias"] if ops.bias is not None else []
    feats += ["per-tensor scales"] if ops.scale_a.dim() == 0 else []
    return f"{ops.name} ({ops.m}x{ops.k}x{ops.n} {', '.join(feats)})"
