"""A kernel's throughput at three shapes beside a baseline timed in the same process (the scoreboard's figures):
decode (M = 16), prefill (M = 512) and a large square, K = N = 4096 for the first two. Operands on CUDA: int8 or
e4m3 by ``spec.operands``, a per-token / per-channel scale (one scale per operand where the kernel's constraints
say ``scales="tensor"``; a block-scaled kernel: its first declared block size, ``scale_a`` [M, ceil(K / bk)] and
``scale_b`` [ceil(N / bn), ceil(K / bk)]), bf16 output, no bias. Time: ``triton.testing.do_bench`` median (L2 flushed) of
``spec.scaled_mm`` as a user calls it, the adapter's own work included. Baseline: ``torch._int_mm`` (int8; the
accumulator alone) or ``torch._scaled_mm`` rowwise (e4m3), also for a block-scaled kernel: its ratio is what block scaling costs over the
plain GEMM, comparable across block kernels timed side by side (``int8conf scoreboard --throughput``). TOPS = 2*M*K*N / seconds / 1e12. A shape the kernel
refuses or raises on is a row with ``error`` (never fatal). Needs CUDA: Int8confError otherwise."""

from __future__ import annotations

import math
from functools import partial

import torch

from conformance.bench.gemm import kernel_us, tops
from conformance.kernels.runner import kernel_call
from conformance.kernels.spec import KernelSpec
from reference.errors import Int8confError, first_line

#: (M, K, N, label)
SHAPES = ((16, 4096, 4096, "decode"), (512, 4096, 4096, "prefill"), (4096, 4096, 4096, "large"))


def _operands(spec: KernelSpec, m: int, k: int, n: int) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(0)
    if spec.is_fp8:
        a = (torch.randn(m, k, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
    else:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
        b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
    if spec.is_block:
        bn, bk = spec.block.sizes[0]
        shape_a, shape_b = (m, math.ceil(k / bk)), (math.ceil(n / bn), math.ceil(k / bk))
    else:
        one = spec.constraints.scales == "tensor"
        shape_a, shape_b = (1 if one else m,), (1 if one else n,)
    sa = torch.rand(shape_a, device="cuda", generator=g) * 0.01 + 1e-3
    sb = torch.rand(shape_b, device="cuda", generator=g) * 0.01 + 1e-3
    return a, b, sa, sb


def _per_token_scales(m: int, n: int) -> tuple:
    """Per-token / per-channel scales of the baseline (a block kernel's are not the baseline's form)."""
    return torch.full((m,), 1e-3, device="cuda"), torch.full((n,), 1e-3, device="cuda")


def _baseline(spec: KernelSpec, a, b, sa, sb):
    if spec.is_fp8:
        sa2, sb2 = sa.reshape(-1, 1).expand(a.shape[0], 1).contiguous(), sb.reshape(1, -1).expand(1, b.shape[0])
        return lambda: torch._scaled_mm(a, b.t(), sa2, sb2.contiguous(), out_dtype=torch.bfloat16)
    return lambda: torch._int_mm(a, b.t())


def kernel_throughput(spec: KernelSpec, shapes: tuple = SHAPES) -> list[dict]:
    """One row per shape: ``M, K, N, label, device, us, tops, baseline, baseline_us, baseline_tops, ratio`` (kernel
    TOPS / baseline TOPS; ``block`` ``"<bn>x<bk>"`` for a block-scaled kernel; ``baseline_error`` instead where the baseline refuses the shape, e.g. ``torch._int_mm`` at
    M <= 16), or ``error`` (one line) where the kernel refuses or raises."""
    if not torch.cuda.is_available():
        raise Int8confError("throughput needs CUDA: none is available here")
    rows = []
    for m, k, n, label in shapes:
        row: dict = {"M": m, "K": k, "N": n, "label": label, "device": torch.cuda.get_device_name()}
        block = spec.block.sizes[0] if spec.is_block else None
        if block is not None:
            row["block"] = f"{block[0]}x{block[1]}"
        a, b, sa, sb = _operands(spec, m, k, n)
        why = spec.constraints.violations(m, k, n)
        why += spec.constraints.operand_violations(sa, sb, None, torch.bfloat16, block=block is not None)
        if why:
            rows.append({**row, "error": "outside its constraints: " + "; ".join(why)})
            continue
        row["baseline"] = "torch._scaled_mm rowwise" if spec.is_fp8 else "torch._int_mm"
        try:
            base_scales = _per_token_scales(m, n) if block is not None else (sa, sb)
            row["baseline_us"] = kernel_us(_baseline(spec, a, b, *base_scales))
        except Exception as e:  # noqa: BLE001 -- a baseline this build lacks leaves the ratio blank
            row["baseline_error"] = f"{type(e).__name__}: {first_line(e)}"
        try:
            call = partial(kernel_call(spec, block), a, b, sa, sb, out_dtype=torch.bfloat16, bias=None)
            row["us"] = kernel_us(call)
        except Exception as e:  # noqa: BLE001 -- a kernel that raises gets a row saying so
            rows.append({**row, "error": f"{type(e).__name__}: {first_line(e)}"})
            continue
        row["tops"] = tops(m, k, n, row["us"])
        if "baseline_us" in row:
            row["baseline_tops"] = tops(m, k, n, row["baseline_us"])
            row["ratio"] = row["tops"] / row["baseline_tops"]
        rows.append(row)
    return rows
