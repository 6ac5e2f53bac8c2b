"""Interpreter tiles for the built-in ``triton`` kernel in the study (CPU only).

On a machine without a GPU the built-in ``triton`` kernel runs its Triton
program under Triton's interpreter, which executes every tile program in
Python with numpy. The cost is dominated by the number of tile programs
(each one walks the whole ``w8a8_mm`` body: ~100 interpreted ``tl`` ops),
and the kernel's default interpreter tiles are small (at most 64 x 64): a
512 x 384 x 1536 GEMM is 192 programs, ~10 s of CPU time (measured on the
2-core box, 2026-12-01). The study therefore calls the *same* kernel
function through its public ``builtin_triton.scaled_mm_config`` with larger
tiles, chosen per shape by :func:`interp_config`:

    BLOCK_M = min(256, next_pow2(max(M, 16))), BLOCK_N = min(512, next_pow2(max(N, 16))),
    BLOCK_K = 128, GROUP_M = 1, SPLIT_K = 1

(512 x 384 x 1536: 6 programs, ~1 s; an M = 8 decode GEMM: 3 programs).

Why this does not change what is measured: the accumulator is exact int32
and order-free for any tiling, and the epilogue is one code path applied
per element (``conformance.kernels.triton_gemm``), so every configuration
gives the same bits -- the property the native path relies on when it
autotunes tiles. The study test
``tests/conformance/study/test_interp.py`` checks it on ragged shapes
(M, N, K not multiples of the tiles, bias, zero scales), and the run manifest
still reports path ``triton-interpreter`` with the configuration that ran.
Native CUDA runs and every other kernel are left untouched.
"""

from __future__ import annotations

import dataclasses

#: Largest tiles used (numpy temporaries stay below ~4 MB per tile).
MAX_BLOCK_M = 256
MAX_BLOCK_N = 512
BLOCK_K = 128


def _pow2(x: int) -> int:
    return 1 << max(4, (max(int(x), 1) - 1).bit_length())


def interp_config(m: int, n: int):
    """The study's interpreter ``builtin_triton.Config`` for an ``[m, n]`` output."""
    from conformance.kernels.builtin_triton import Config

    return Config("ptr", min(MAX_BLOCK_M, _pow2(m)), min(MAX_BLOCK_N, _pow2(n)), BLOCK_K, 1, 1, 4, 1)


def is_interpreted_builtin_triton(spec, device) -> bool:
    """Whether ``spec`` is the built-in ``triton`` kernel and would run under
    the interpreter on ``device`` (``"cpu"``/None without CUDA)."""
    if spec.name != "triton" or spec.origin != "builtin":
        return False
    import torch

    return device == "cpu" or (device is None and not torch.cuda.is_available())


def study_kernel(spec, device):
    """``spec`` itself, or -- for the built-in ``triton`` kernel under the
    interpreter -- a copy whose ``scaled_mm`` runs the same kernel function
    with :func:`interp_config` tiles (name, contract, digest unchanged; the
    description says so)."""
    if not is_interpreted_builtin_triton(spec, device):
        return spec
    from conformance.kernels import builtin_triton as bt

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
        import torch

        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        return bt.scaled_mm_config(interp_config(a.shape[0], b.shape[0]), a, b, scale_a, scale_b, out_dtype, bias)

    return dataclasses.replace(
        spec,
        scaled_mm=scaled_mm,
        description=(spec.description + " " if spec.description else "")
        + "[study: interpreter tiles from conformance.study.interp]",
    )
