"""Measure what Triton does to each epilogue step (interpreter or native): :func:`probe` runs one small kernel
over hand-picked inputs (2**24 + 1, ties, subnormals, ...) and compares each step with torch's IEEE result. The
built-in ``triton`` kernel rounds bf16 with integer ops, so its bits do not depend on the answers; they go into
its manifest so a report states the machinery it ran on."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from reference.errors import first_line

_CACHE: dict = {}


def _probe_kernel(
    i_ptr, x_ptr, s_ptr, h_ptr, g_ptr, o_i2f, o_mul, o_bf, o_bf_rtne, o_h2f, o_hadd, o_f16, N: tl.constexpr
):
    r = tl.arange(0, N)
    i = tl.load(i_ptr + r)
    x = tl.load(x_ptr + r)
    s = tl.load(s_ptr + r)
    h = tl.load(h_ptr + r)
    g = tl.load(g_ptr + r)
    tl.store(o_i2f + r, i.to(tl.float32))
    tl.store(o_mul + r, x * s)
    tl.store(o_bf + r, x.to(tl.bfloat16))
    tl.store(o_bf_rtne + r, x.to(tl.bfloat16, fp_downcast_rounding="rtne"))
    tl.store(o_h2f + r, h.to(tl.float32))
    tl.store(o_hadd + r, h + g)
    tl.store(o_f16 + r, x.to(tl.float16))


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).to(torch.int64) & 0xFFFF
    return t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _rtz_bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 by truncating the low 16 bits (round toward zero)."""
    return ((x.view(torch.int32) >> 16).to(torch.int16)).view(torch.bfloat16)


def _verdict(got: torch.Tensor, rne: torch.Tensor, rtz: Optional[torch.Tensor] = None, ok_word: str = "rne") -> str:
    g, r = _bits(got), _bits(rne)
    if torch.equal(g, r):
        return ok_word
    if rtz is not None and torch.equal(g, _bits(rtz)):
        return "rtz"
    return f"other ({int((g != r).sum())}/{g.numel()} differ from {ok_word})"


def _inputs() -> dict:
    n = 16
    i = torch.tensor([2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**31 - 1, -(2**31), 123456789, 7, 0] * 2, dtype=torch.int32)
    normal = [1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -(1.0 + 3 * 2**-8)]
    normal += [1.0 + 2**-7 - 2**-23, 1.0 - 2**-24, 3.0e38, 0.1]
    x = torch.tensor(normal * 2, dtype=torch.float32)
    s = torch.tensor([0.3, 1e-30, 1e-10, 7.0, 2**-20, 1.5, 1e-8, 3.0] * 2, dtype=torch.float32)
    sub = torch.tensor([2**-130, 3 * 2**-133, -(2**-128), 2**-127 + 2**-133] * 4, dtype=torch.float32)
    bf16 = lambda v: torch.tensor(v * 2, dtype=torch.float32).to(torch.bfloat16)
    h = bf16([1.0, 2**-130, 256.0, -3.0, 2**-127, 1.5, 1e30, 0.0078125])
    g = bf16([2**-8, 1.0, 1.0, 2**-9, 2**-126, 2**-8 * 1.5, 1e22, 1.0])
    return {"n": n, "i": i, "x": x, "s": s, "sub": sub, "h": h, "g": g}


def _run(kern, d: dict, x: torch.Tensor, device: str) -> dict:
    n = d["n"]
    f32, bf16 = torch.float32, torch.bfloat16
    dtypes = dict(i2f=f32, mul=f32, bf=bf16, bf_rtne=bf16, h2f=f32, hadd=bf16, f16=torch.float16)
    outs = {k: torch.empty(n, dtype=dt).to(device) for k, dt in dtypes.items()}  # in the kernel's argument order
    ins = [t.to(device) for t in (d["i"], x, d["s"], d["h"], d["g"])]
    kern[(1,)](*ins, *outs.values(), N=n)
    return {k: v.cpu() for k, v in outs.items()}


def probe(native: bool = False) -> dict:
    """Measured semantics of each epilogue step, JSON-able, cached per mode (``native``: compiled on the
    current CUDA device; else the interpreter on CPU tensors): ``{"mode", "triton_version", "int32_to_fp32",
    "fp32_mul", "fp32_to_bf16", "fp32_to_bf16_rtne", "fp32_to_bf16_subnormal", "bf16_to_fp32", "bf16_add",
    "fp32_to_fp16"}``, each ``"rne"`` / ``"exact"`` / ``"ieee"`` (matches torch), ``"rtz"`` (truncation) or
    ``"other (n/N differ ...)"``; ``{"mode", "triton_version", "error"}`` when the probe itself failed."""
    key = "native" if native else "interpreter"
    if key in _CACHE:
        return dict(_CACHE[key])
    kern = triton.jit(_probe_kernel) if native else InterpretedFunction(_probe_kernel)
    device = "cuda" if native else "cpu"
    d = _inputs()
    res = {"mode": key, "triton_version": triton.__version__}
    try:
        with warnings.catch_warnings():  # numpy warns on the deliberate fp16 overflow case
            warnings.simplefilter("ignore", RuntimeWarning)
            o = _run(kern, d, d["x"], device)
            osub = _run(kern, d, d["sub"], device)
    except Exception as e:  # noqa: BLE001 -- report, never crash a conformance run
        res["error"] = f"{type(e).__name__}: {first_line(e, None)}"
        _CACHE[key] = res
        return dict(res)
    x, s = d["x"], d["s"]
    res["int32_to_fp32"] = _verdict(o["i2f"], d["i"].to(torch.float32))
    res["fp32_mul"] = _verdict(o["mul"], x * s, ok_word="ieee")
    res["fp32_to_bf16"] = _verdict(o["bf"], x.to(torch.bfloat16), _rtz_bf16(x))
    res["fp32_to_bf16_rtne"] = _verdict(o["bf_rtne"], x.to(torch.bfloat16), _rtz_bf16(x))
    res["fp32_to_bf16_subnormal"] = _verdict(osub["bf"], d["sub"].to(torch.bfloat16), _rtz_bf16(d["sub"]))
    res["bf16_to_fp32"] = _verdict(o["h2f"], d["h"].to(torch.float32), ok_word="exact")
    res["bf16_add"] = _verdict(o["hadd"], (d["h"].float() + d["g"].float()).to(torch.bfloat16))
    res["fp32_to_fp16"] = _verdict(o["f16"], x.to(torch.float16))
    _CACHE[key] = res
    return dict(res)
