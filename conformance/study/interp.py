"""Interpreter tiles for the built-in ``triton`` kernel in the study (CPU only).

Under Triton's interpreter the kernel's cost is the number of tile programs, and its default interpreter tiles
are at most 64 x 64. The study calls the same kernel function (``builtin_triton.scaled_mm_config``) with the
larger tiles of :func:`interp_config`. Exact int32 accumulation and a per-element epilogue make every tiling give
the same bits (tests/conformance/study/test_lockstep_and_interp.py); the manifest still reports path
``triton-interpreter``. Native CUDA runs and every other kernel are left untouched.
"""

from __future__ import annotations

import dataclasses

import torch

#: Largest tiles used (numpy temporaries stay below ~4 MB per tile).
MAX_BLOCK_M = 256
MAX_BLOCK_N = 512
BLOCK_K = 128


def _pow2(x: int) -> int:
    return 1 << max(4, (max(int(x), 1) - 1).bit_length())


def interp_config(m: int, n: int):
    """The ``builtin_triton.Config`` for an ``[m, n]`` output: BLOCK_M = min(256, next_pow2(max(m, 16))),
    BLOCK_N = min(512, next_pow2(max(n, 16))), BLOCK_K = 128, GROUP_M = SPLIT_K = 1."""
    from conformance.kernels.builtin_triton import Config

    return Config("ptr", min(MAX_BLOCK_M, _pow2(m)), min(MAX_BLOCK_N, _pow2(n)), BLOCK_K, 1, 1, 4, 1)


def is_interpreted_builtin_triton(spec, device) -> bool:
    """Whether ``spec`` is the built-in ``triton`` kernel and runs interpreted on ``device`` (``"cpu"``, or
    None without CUDA)."""
    if spec.name != "triton" or spec.origin != "builtin":
        return False
    return device == "cpu" or (device is None and not torch.cuda.is_available())


def study_kernel(spec, device):
    """``spec`` itself, or for the interpreted built-in ``triton`` a copy whose ``scaled_mm`` uses
    :func:`interp_config` tiles (name, contract, digest unchanged; the description says so)."""
    if not is_interpreted_builtin_triton(spec, device):
        return spec
    from conformance.kernels import builtin_triton as bt

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        return bt.scaled_mm_config(interp_config(a.shape[0], b.shape[0]), a, b, scale_a, scale_b, out_dtype, bias)

    return dataclasses.replace(
        spec,
        scaled_mm=scaled_mm,
        description=(spec.description + " " if spec.description else "")
        + "[study: interpreter tiles from conformance.study.interp]",
    )
