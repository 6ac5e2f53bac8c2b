"""The specification of C8 (``declared_contract``), eagerly, on one int8 case: what the fast path of
``conformance.suite.evaluate`` (memoized references on the case's device, deferred read-backs, workers) computes.

1. the exact accumulator: ``acc[m, n] = sum_k a[m, k] * b[n, k]`` in int64;
2. the kernel's declaration for this case (``kernels.spec.declared_epilogue``: the device it runs on, the out
   dtype) emulated on it, step by step (``reference.epilogue.apply_steps``);
3. the kernel's output compared bit for bit (two NaNs count as equal bits).

It covers the cases whose accumulator fits int32 (``|acc| <= 2^31 - 1``): beyond, C8 also weighs the declared
overflow (``checks.output_bits.accepted_reference``). Tested against the fast path on every case family
(``tests/conformance/checks/test_specification.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import declared_epilogue
from reference.accumulate import INT32_MAX
from reference.epilogue import apply_steps
from reference.operands import GemmOperands

if TYPE_CHECKING:
    from conformance.kernels.spec import KernelSpec


def c8_differing(spec: KernelSpec, ops: GemmOperands) -> Tensor:
    """bool [M, N]: where the kernel's output bits differ from its declaration emulated on the exact accumulator
    (module docstring), the kernel run on the CPU. Raises ValueError: not an int8 case, an accumulator beyond int32,
    or a kernel that gave no output."""
    if ops.a.dtype != torch.int8:
        raise ValueError(f"{ops.name}: the eager C8 specification covers int8 cases, not {ops.a.dtype}")
    acc = ops.a.to(torch.int64) @ ops.b.to(torch.int64).T  # 1. exact (|acc| < 2^63 for any K < 2^48)
    if int(acc.abs().max()) > INT32_MAX:
        raise ValueError(f"{ops.name}: |acc| > 2^31 - 1: C8 weighs the declared overflow there")
    run = run_kernel(spec, ops, device="cpu")
    if run.output is None:
        raise ValueError(f"{ops.name}: the kernel gave no output: {run.error}")
    declared = declared_epilogue(spec, "cpu", ops.out_dtype)  # 2. the declaration that applies, emulated
    ref = apply_steps(acc, ops.scale_a, ops.scale_b, declared.steps, bias=ops.bias, out_dtype=ops.out_dtype)
    out = run.output
    as_int = {2: torch.int16, 4: torch.int32}[out.element_size()]  # 3. bit equality
    return (out.view(as_int) != ref.view(as_int)) & ~(torch.isnan(out) & torch.isnan(ref))
