"""Built-in kernels ``triton-block`` (int8) and ``triton-block-fp8`` (e4m3): the Triton block-scaled GEMM
(``triton_block_gemm.block_scaled_mm``), declared ``mul s_a; mul s_w; add`` then ``add bias; cast out``, block sizes
as the CPU built-ins (``builtin_block_cpu.SIZES``); the e4m3 partial's accumulator per device as ``triton-fp8``."""

from __future__ import annotations

from conformance.kernels import triton_block_gemm as tbg
from conformance.kernels.builtin_block_cpu import SIZES
from conformance.kernels.spec import ShapeConstraints

SOURCE_DIGEST = tbg.SOURCE_DIGEST
_BLOCK = {"sizes": SIZES, "accumulation": tbg.BLOCK_ACCUMULATION, "epilogue": tbg.EPILOGUE}
_COMMON = dict(
    scaled_mm=tbg.block_scaled_mm,
    devices=("cuda", "cpu"),
    constraints=ShapeConstraints(note="masked tails: any M, K, N >= 1; block_k up to 4096"),
    version="1",
    block=_BLOCK,
)


def available(name: str = tbg.NAME) -> tuple[bool, str]:
    return True, ""


KERNELS = {
    tbg.NAME: dict(
        _COMMON,
        description="Triton block-scaled int8 GEMM: one tl.dot per K-block (int32), (p*s_a)*s_w added in float32",
    ),
    tbg.FP8_NAME: dict(
        _COMMON,
        description="Triton block-scaled e4m3 GEMM: one tl.dot per K-block (float32), (p*s_a)*s_w added in float32",
        operands="e4m3",
        accumulator=tbg.ACCUMULATOR,
    ),
}
