"""The accumulator an FP8 (e4m3) fault starts from, and F10 narrow_accumulator (DESIGN.md 3b, faults/README.md).

:func:`fp8_kernel_accumulator`: the float32 accumulator of an e4m3 kernel, read through its own ``scaled_mm`` with
unit scales (the case's scale shapes), float32 output and no bias: the value of its accumulator whatever epilogue
order it declares; else the exact sum rounded once to float32. F1-F5 apply their faulty epilogue to it.

F10 with deficit N (variant ``d<N>``): the selected elements are accumulated by ``reference.fp8.emulate_accumulation``
under :func:`narrowed_model` (the declared retained bits minus N, ``exact`` counting as 24, at least 2; truncating;
the declared promotion interval) and go through the declared contract's epilogue.

F7 inside an int8 kernel (a float32 accumulator): :func:`float32_running_sum` at the tile depths :data:`F7_TILES`.
"""

from __future__ import annotations

from typing import Optional

import torch

from conformance.kernels import trace
from reference.epilogue import apply_epilogue
from reference.fp8 import FP32_BITS, AccumulatorModel, emulate_accumulation, exact_sum_fp32, parse_accumulator

#: ``GroundTruth.accumulator_source`` of an e4m3 kernel read through its own ``scaled_mm``.
KERNEL_UNIT_SCALES = "kernel scaled_mm (unit scales, float32 output)"
#: ... and of the exact e4m3 sum rounded once to float32.
EXACT_FP8 = "exact reference (e4m3 sum rounded once to float32)"
#: Fewest significant bits a narrowed accumulator keeps (``AccumulatorModel`` takes no fewer).
MIN_BITS = 2


def fp8_kernel_accumulator(spec, a, b, scale_a, scale_b) -> tuple[torch.Tensor, str]:
    """``(acc float32 [M, N] on a's device, source)`` of the e4m3 kernel ``spec`` on ``a`` [M, K] / ``b`` [N, K]
    (module docstring). The probing call runs inside its own ``trace.capture`` (its records are not the case's).
    A call that raises or returns no float32 [M, N] falls back to the exact sum, the reason in ``source``."""
    m, n = int(a.shape[0]), int(b.shape[0])
    why = ""
    try:
        with trace.capture():
            ones_a, ones_b = (
                torch.ones_like(scale_a, dtype=torch.float32),
                torch.ones_like(scale_b, dtype=torch.float32),
            )
            acc = spec.scaled_mm(a, b, ones_a, ones_b, out_dtype=torch.float32, bias=None)
        if isinstance(acc, torch.Tensor) and acc.dtype == torch.float32 and tuple(acc.shape) == (m, n):
            return acc.to(a.device), KERNEL_UNIT_SCALES
        why = " (kernel scaled_mm returned no float32 [M,N] at unit scales)"
    except Exception as e:  # noqa: BLE001 -- the fault still needs an accumulator
        why = f" (kernel scaled_mm at unit scales raised {type(e).__name__})"
    return exact_sum_fp32(a.cpu(), b.cpu()).to(a.device), EXACT_FP8 + why


def narrowed_model(declared, deficit: int) -> AccumulatorModel:
    """The accumulator of F10 ``d<deficit>`` for a kernel declaring ``declared`` (text or model): ``fp32
    bits=max(2, B - deficit) truncate`` with the declared promotion interval, B the declared bits (24 for
    ``exact``). ContractError: bad declaration."""
    declared = parse_accumulator(declared)
    base = FP32_BITS if declared.kind == "exact" else declared.bits
    return AccumulatorModel("fp32", max(MIN_BITS, base - int(deficit)), "truncate", declared.promote_every)


#: The tile depths (BLOCK_K) F7's in-kernel emulation tries, :func:`float32_running_sum`; None: one float32 matmul.
F7_TILES = (16, 32, 64, 128, 256, None)


def float32_running_sum(a: torch.Tensor, b: torch.Tensor, block: Optional[int]) -> torch.Tensor:
    """float32 [M, N] on a's device: int8 ``a`` [M, K] @ ``b`` [N, K]^T summed as a kernel with a float32 accumulator
    sums it (F7 inside the kernel): each ``block``-deep tile's dot product exact (<= 256 * 2^14 < 2^24), added to
    the running float32 sum tile by tile, k increasing; ``block`` None: one float32 matmul of the whole K on a's
    device (that device library's order)."""
    if block is None:
        return a.to(torch.float32) @ b.to(torch.float32).T
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    acc = torch.zeros((int(a.shape[0]), int(b.shape[0])), dtype=torch.float32, device=a.device)
    for k0 in range(0, int(a.shape[1]), block):
        acc += (a64[:, k0 : k0 + block] @ b64[:, k0 : k0 + block].T).to(torch.float32)
    return acc


def rows_of(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` of an e4m3 matrix, gathered as bytes (float8 indexing is not on every device)."""
    return x.view(torch.uint8)[idx].view(x.dtype)


def narrow_output(
    a, b, scale_a, scale_b, bias, out_dtype, contract, model: AccumulatorModel, mask: torch.Tensor
) -> torch.Tensor:
    """out_dtype [M, N] on a's device: at the ``True`` elements of ``mask`` (bool [M, N]) the declared ``contract``'s
    epilogue of the accumulator ``model`` keeps (``emulate_accumulation``, k increasing, computed only over the
    selected rows x columns, on a's device), elsewhere zero."""
    m, n = int(a.shape[0]), int(b.shape[0])
    mk = mask.to(a.device)
    rows = mk.any(dim=1).nonzero().reshape(-1)
    cols = mk.any(dim=0).nonzero().reshape(-1)
    acc = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    if len(rows) and len(cols):
        acc[rows.unsqueeze(1), cols.unsqueeze(0)] = emulate_accumulation(rows_of(a, rows), rows_of(b, cols), model)
    bias_d: Optional[torch.Tensor] = None if bias is None else bias.to(a.device)
    return apply_epilogue(acc, scale_a.to(a.device), scale_b.to(a.device), contract, bias_d, out_dtype)
