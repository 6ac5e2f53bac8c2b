"""Built-in kernels ``torch-fp8`` (``use_fast_accum=False``) and ``torch-fp8-fast`` (``True``): ``torch._scaled_mm``.

CUDA (sm_89+): bfloat16 output runs the rowwise kernel (scales as [M,1] / [1,N], scalars broadcast; bias in the
kernel). float16 / float32 output: cuBLASLt's tensorwise path takes scalar scales only and no bias with float32 out,
so the kernel calls it with unit scales and float32 out (the accumulator) and applies the epilogue in torch float32
ops, as on the CPU. K and N are zero-padded to multiples of 16, the bias handed dense (with a strided bias
the H200 outputs of ``fp8/narrow_span/all_layouts`` were wrong in 155 of 160 elements). Epilogue everywhere ``w_then_a/fp32_before_round`` (:data:`ROWWISE`).
Declared accumulator on CUDA (issue 30's H200 measurement, C11-verified natively): ``fp32 bits=14 truncate
promote=128`` for ``torch-fp8``, ``fp32 bits=14 truncate`` for ``torch-fp8-fast``. CPU: torch multiplies the operands
by the scales before an fp32 GEMM, which no epilogue step list describes, so the kernel calls ``_scaled_mm`` with unit
scales (an fp32 GEMM of the exact products, accumulator ``fp32``; ``use_fast_accum`` has no effect there) and applies
the epilogue in torch float32 ops (``torch_epilogue``)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from conformance.kernels.spec import ShapeConstraints
from conformance.kernels.torch_epilogue import epilogue, scale_vectors
from reference.contract import EpilogueContract
from reference.validate import validate_operands

#: the rowwise kernel's epilogue: on the H200 its bf16 outputs equal ``(acc * s_w) * s_a`` on every element of a
#: scale-order tie case (where ``(acc * s_a) * s_w`` differs); the other paths apply the same in torch float32 ops
ROWWISE = EpilogueContract("w_then_a", "fp32_before_round")
SOURCE_DIGEST = module_digest(__file__)
_ONE = torch.ones((), dtype=torch.float32)


def _up16(v: int) -> int:
    return -(-v // 16) * 16


def _cuda(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype, bias, fast: bool, name: str) -> Tensor:
    """``torch._scaled_mm`` on CUDA tensors (module docstring), K and N zero-padded to multiples of 16."""
    m, k = a.shape
    n = b.shape[0]
    rowwise = out_dtype == torch.bfloat16
    kp, np_ = _up16(k), _up16(n)
    padded = (kp, np_) != (k, n)
    a = F.pad(a.contiguous().view(torch.uint8), (0, kp - k)).view(a.dtype) if kp != k else a.contiguous()
    b = F.pad(b.contiguous().view(torch.uint8), (0, kp - k, 0, np_ - n)).view(b.dtype) if padded else b.contiguous()
    if not rowwise:  # unit-scale tensorwise GEMM -> the float32 accumulator, then the epilogue in torch ops
        one = torch.ones((), dtype=torch.float32, device=a.device)
        acc = torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.float32, use_fast_accum=fast)[:, :n]
        trace.record_path(
            "torch-fp8-unit-scales" + ("-padded" if padded else ""),
            source_digest=SOURCE_DIGEST,
            digest_of=name,
            use_fast_accum=fast,
            epilogue="torch-fp32",
        )
        return epilogue(acc, scale_a, scale_b, ROWWISE, bias, out_dtype)
    sa, sb = scale_vectors(scale_a, scale_b, m, n)
    sa, sb = sa.contiguous(), F.pad(sb, (0, np_ - n), value=1.0).contiguous()
    if bias is not None:
        bias = F.pad(bias, (0, np_ - n)) if np_ != n else bias.contiguous()
    out = torch._scaled_mm(a, b.t(), sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
    trace.record_path(
        "torch-fp8-rowwise" + ("-padded" if padded else ""),
        source_digest=SOURCE_DIGEST,
        digest_of=name,
        use_fast_accum=fast,
    )
    return out[:, :n].contiguous()


def _cpu(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype, bias, fast: bool, name: str) -> Tensor:
    """Unit-scale ``torch._scaled_mm`` (fp32 accumulator) + :data:`ROWWISE` in torch float32 ops (module docstring)."""
    acc = torch._scaled_mm(a, b.t(), _ONE, _ONE, out_dtype=torch.float32, use_fast_accum=fast)
    trace.record_path("torch-fp8-cpu", source_digest=SOURCE_DIGEST, digest_of=name, epilogue="torch-fp32")
    return epilogue(acc, scale_a, scale_b, ROWWISE, bias, out_dtype)


def _make(name: str, fast: bool):
    def scaled_mm(
        a: Tensor,
        b: Tensor,
        scale_a: Tensor,
        scale_b: Tensor,
        out_dtype: torch.dtype = torch.bfloat16,
        bias: Optional[Tensor] = None,
    ) -> Tensor:
        """FP8 W8A8 GEMM through ``torch._scaled_mm`` (module docstring): a e4m3 [M,K], b e4m3 [N,K], scales and bias
        as ``spec``; out_dtype [M,N] on a's device. Raises OperandError."""
        validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
        trace.record_operands(a, b, scale_a, scale_b, bias)
        dev = a.device
        b, scale_a, scale_b = b.to(dev), scale_a.to(dev), scale_b.to(dev)
        bias = None if bias is None else bias.to(dev)
        run = _cuda if dev.type == "cuda" else _cpu
        return run(a, b, scale_a, scale_b, out_dtype, bias, fast, name)

    scaled_mm.__name__ = scaled_mm.__qualname__ = "scaled_mm_fast" if fast else "scaled_mm"
    return scaled_mm


scaled_mm = _make("torch-fp8", False)
scaled_mm_fast = _make("torch-fp8-fast", True)


def available(name: str = "torch-fp8") -> tuple[bool, str]:
    """(ok, reason): ``torch._scaled_mm`` and ``torch.float8_e4m3fn`` exist in this torch build."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    return True, ""


def _declaration(fn, cuda_acc: str, what: str) -> dict:
    return dict(
        scaled_mm=fn,
        contract=ROWWISE,
        devices=("cuda", "cpu"),
        constraints=ShapeConstraints(note="any M, K, N >= 1 (CUDA: K and N zero-padded to multiples of 16)"),
        version="1",
        description=f"torch._scaled_mm, {what} (CUDA: rowwise for bf16, else unit scales + torch fp32 epilogue; CPU: unit scales + torch fp32 epilogue)",
        operands="e4m3",
        accumulator={"cpu": "fp32", "cuda": cuda_acc},
    )


KERNELS = {
    "torch-fp8": _declaration(scaled_mm, "fp32 bits=14 truncate promote=128", "use_fast_accum=False"),
    "torch-fp8-fast": _declaration(scaled_mm_fast, "fp32 bits=14 truncate", "use_fast_accum=True"),
}
