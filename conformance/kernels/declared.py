"""The declared reference: the output a kernel's declaration implies for one call's operands, for every plan kind.

:func:`declared_reference` dispatches on the operands (and the declaration they meet):

* zero point (``ops.azp_adj`` or ``ops.azp`` given): ``reference.asymmetric.asymmetric_reference`` with the declared epilogue's steps
  (``spec.declared_epilogue``), the correction formed in int32 before it;
* block scales (``ops.block_size`` and ``spec.block``): ``reference.block.evaluate.reference_block_scaled_mm`` of the
  declared block accumulation (or ``accumulation``) and epilogue, an e4m3 partial through the accumulator declared
  on ``device``;
* otherwise per-token x per-channel: ``reference.epilogue.reference_scaled_mm`` (int8) or
  ``reference.fp8.reference_fp8_scaled_mm`` (e4m3 ``ops.a``) of the declared contract.

``device``: the device the kernel ran on (``"cuda:1"`` counts as ``"cuda"``; None: ``"cpu"``), which selects the
declaration. Operands are validated by the reference functions (OperandError / ContractError, one line)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor

from conformance.kernels.spec import declared_epilogue
from reference.asymmetric import AsymmetricReference, asymmetric_reference
from reference.block.evaluate import reference_block_scaled_mm
from reference.epilogue import reference_scaled_mm
from reference.fp8 import E4M3, reference_fp8_scaled_mm
from reference.operands import GemmOperands


@dataclass(frozen=True)
class DeclaredReference:
    """``output``: out dtype [M, N], the declared reference's bits; ``label``: the declaration in one line (for
    messages); ``asymmetric``: a zero-point call's detail (exact corrected accumulator, int32 headroom masks), else
    None."""

    output: Tensor
    label: str
    asymmetric: Optional[AsymmetricReference] = None


def declared_reference(
    spec: Any, ops: GemmOperands, device: Optional[str] = None, accumulation: Any = None
) -> DeclaredReference:
    """The reference of ``spec``'s declaration on ``ops`` (module docstring); ``accumulation`` (a block
    accumulation or its text) replaces the declared block accumulation of a block-scaled call."""
    if ops.azp_adj is not None or ops.azp is not None:
        decl = declared_epilogue(spec, device, ops.out_dtype)
        detail = asymmetric_reference(
            ops.a, ops.b, ops.scale_a, ops.scale_b, decl.steps, ops.bias, ops.out_dtype, ops.azp_adj, ops.azp
        )
        return DeclaredReference(detail.output, f"{decl.label()} after the int32 zero-point correction", detail)
    blk = spec.block
    if ops.block_size is not None and blk is not None:
        out = reference_block_scaled_mm(
            ops.a,
            ops.b,
            ops.scale_a,
            ops.scale_b,
            ops.block_size,
            blk.accumulation if accumulation is None else accumulation,
            blk.epilogue,
            ops.bias,
            ops.out_dtype,
            spec.accumulator_on(device),
        )
        return DeclaredReference(out, blk.label())
    contract = declared_epilogue(spec, device, ops.out_dtype).contract
    reference = reference_fp8_scaled_mm if ops.a.dtype == E4M3 else reference_scaled_mm
    out = reference(ops.a, ops.b, ops.scale_a, ops.scale_b, contract, bias=ops.bias, out_dtype=ops.out_dtype)
    return DeclaredReference(out, contract.label())
