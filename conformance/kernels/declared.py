"""The declared reference: the output a kernel's declaration implies for one call's operands, for every plan kind.

:func:`declared_reference` dispatches on the operands (and the declaration they meet):

* zero point (``ops.azp_adj`` or ``ops.azp`` given): ``reference.asymmetric.asymmetric_reference`` with the declared epilogue's steps
  (``spec.declared_epilogue``), the correction formed in int32 before it;
* block scales (``ops.block_size`` and ``spec.block``): ``reference.block.evaluate.reference_block_scaled_mm`` of the
  declared block accumulation (or ``accumulation``) and epilogue, an e4m3 partial through the accumulator declared
  on ``device``;
* otherwise per-token x per-channel (int8, or e4m3 ``ops.a``): the declared epilogue on the exact accumulator
  (``reference.fp8.exact_accumulator``): a standard contract through ``reference.epilogue.cached_epilogue`` (the bits
  of ``reference_scaled_mm`` / ``reference_fp8_scaled_mm``) on the operands' device, a step list that is no standard
  contract through ``reference.epilogue.apply_steps`` on the CPU.

``device``: the device the kernel ran on (``"cuda:1"`` counts as ``"cuda"``; None: ``"cpu"``), which selects the
declaration. Operands are validated (``reference.validate.validate_operands``; OperandError / ContractError, one
line). Inside a ``reference.memo`` scope the exact accumulator and a standard epilogue are shared with the checks
(callers must not write into ``output``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor

from conformance.kernels.spec import declared_epilogue
from reference.asymmetric import AsymmetricReference, asymmetric_reference
from reference.block.evaluate import reference_block_scaled_mm
from reference.epilogue import apply_steps, cached_epilogue
from reference.fp8 import E4M3, exact_accumulator
from reference.operands import GemmOperands
from reference.validate import validate_operands


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
    decl = declared_epilogue(spec, device, ops.out_dtype)
    operands = "e4m3" if ops.a.dtype == E4M3 else "int8"
    validate_operands(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype, operands)
    exact = exact_accumulator(ops.a, ops.b)
    if decl.standard:
        out = cached_epilogue(exact, ops.scale_a, ops.scale_b, decl.contract, bias=ops.bias, out_dtype=ops.out_dtype)
    else:
        bias = None if ops.bias is None else ops.bias.cpu()
        out = apply_steps(
            exact.cpu(), ops.scale_a.cpu(), ops.scale_b.cpu(), decl.steps, bias=bias, out_dtype=ops.out_dtype
        )
    return DeclaredReference(out, decl.label())
