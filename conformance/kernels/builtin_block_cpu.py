"""Built-in block-scaled kernels on the CPU: ``block-cpu`` (int8) and ``block-fp8-cpu`` (e4m3), block sizes 128x128,
64x128, 128x64 and 1x128 (:data:`SIZES`), block accumulation ``mul s_a; mul s_w; add``, epilogue ``add bias; cast out``.

Each K-block's partial is one float64 GEMM of the block (an exact integer for int8; the exact e4m3 sum for e4m3, both
within float64's 53 bits for block_k <= 1024), rounded once to float32; then ``acc = acc + (p * s_a) * s_w`` in
torch float32 ops (one rounding each; subnormals kept), then ``(acc + bias).to(out_dtype)``. Independent of
``reference.block`` (which checks it). CUDA operands are computed on the CPU and returned on their device."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from reference.bits import ieee_subnormals
from reference.validate import validate_operands

SOURCE_DIGEST = module_digest(__file__)
ACCUMULATION = "mul s_a; mul s_w; add"
EPILOGUE = "add bias; cast out"
#: the field's 128x128, a block_n below and a block_k below block_n (block_n != block_k both ways), per channel
SIZES = ((128, 128), (64, 128), (128, 64), (1, 128))


def _block_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size, operands: str, name: str) -> Tensor:
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands, block_size)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    trace.record_path(f"{name}-sequential-k-blocks", source_digest=SOURCE_DIGEST, digest_of=name)
    bn, bk = (int(v) for v in block_size)
    m, k = a.shape
    n = b.shape[0]
    a64, b64 = a.cpu().to(torch.float64), b.cpu().to(torch.float64)
    sa, sw = scale_a.cpu(), scale_b.cpu()[torch.arange(n) // bn]  # [M, KB], [N, KB]
    acc = torch.zeros((m, n), dtype=torch.float32)
    with ieee_subnormals(acc):
        for j, k0 in enumerate(range(0, k, bk)):
            p = (a64[:, k0 : k0 + bk] @ b64[:, k0 : k0 + bk].T).to(torch.float32)
            acc = acc + (p * sa[:, j : j + 1]) * sw[:, j].reshape(1, n)
        if bias is not None:
            acc = acc + bias.cpu().to(torch.float32)
        return acc.to(out_dtype).to(a.device)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    block_size: tuple = (128, 128),
) -> Tensor:
    """Block-scaled int8 GEMM (module docstring): a int8 [M,K], b int8 [N,K], scale_a float32 [M, KB], scale_b float32
    [ceil(N/block_n), KB]; out_dtype [M,N] on a's device. Raises OperandError."""
    return _block_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size, "int8", "block-cpu")


def scaled_mm_fp8(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    block_size: tuple = (128, 128),
) -> Tensor:
    """Block-scaled e4m3 GEMM (module docstring): a, b float8_e4m3fn; the rest as :func:`scaled_mm`."""
    return _block_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size, "e4m3", "block-fp8-cpu")


def available(name: str = "block-cpu") -> tuple[bool, str]:
    return True, ""


_BLOCK = {"sizes": SIZES, "accumulation": ACCUMULATION, "epilogue": EPILOGUE}
KERNELS = {
    "block-cpu": dict(
        scaled_mm=scaled_mm,
        devices=("cpu", "cuda"),
        version="1",
        description="block-scaled int8 on the CPU: exact K-block partials, (p*s_a)*s_w added per K-block in float32",
        block=_BLOCK,
    ),
    "block-fp8-cpu": dict(
        scaled_mm=scaled_mm_fp8,
        devices=("cpu", "cuda"),
        version="1",
        description="block-scaled e4m3 on the CPU: exact K-block partials, (p*s_a)*s_w added per K-block in float32",
        operands="e4m3",
        accumulator="exact",
        block=_BLOCK,
    ),
}
