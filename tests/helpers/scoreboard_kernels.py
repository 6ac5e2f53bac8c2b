"""Kernels for the scoreboard tests, loadable by name in the scoreboard's
worker processes (``scoreboard_kernels:<fn>``; tests/helpers is on sys.path
and spawn workers inherit it)."""

import time

import torch

from conformance.kernels.loader import declare
from reference.accumulate import exact_int_mm
from reference.epilogue import apply_steps


@declare(contract=["cast fp32", "mul s_a", "cast bf16", "mul s_w -> fp32", "add bias", "cast out"], name="stepkern")
def step_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Does exactly what its step list declares (a bf16 rounding between the scales)."""
    return apply_steps(
        exact_int_mm(a, b), scale_a.float(), scale_b.float(), step_kernel.int8conf.steps, bias=bias, out_dtype=out_dtype
    )


@declare(contract="cutlass", name="sleeper")
def sleeping_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """CUTLASS-style, but hangs on M == 5 (the 'tails' case): per-case timeout test."""
    if a.shape[0] == 5:
        time.sleep(120)
    from reference.contract import CUTLASS_STYLE
    from reference.epilogue import apply_epilogue

    return apply_epilogue(
        exact_int_mm(a, b),
        scale_a.reshape(-1).expand(a.shape[0]).contiguous() if scale_a.numel() == 1 else scale_a.reshape(-1),
        scale_b.reshape(-1).expand(b.shape[0]).contiguous() if scale_b.numel() == 1 else scale_b.reshape(-1),
        CUTLASS_STYLE,
        bias=bias,
        out_dtype=out_dtype,
    )


@declare(contract="cutlass", name="crasher")
def crashing_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Kills its process on M == 5 (a segfaulting library, as seen from Python)."""
    import os

    if a.shape[0] == 5:
        os._exit(7)
    return sleeping_kernel(a, b, scale_a, scale_b, out_dtype, bias)
