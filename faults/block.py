"""Faults in a block-scaled kernel (``KernelSpec.block``) and in an asymmetric one's zero-point correction.

:func:`block_fault_output`: the block reference (``reference.block.evaluate``: per-K-block partial ``p``, the declared
block accumulation, the declared epilogue) with exactly one change, on the selected rows x columns. F1 both block
scales rounded to bf16 before the steps; F2 each K-block's scaled partial (every ``mul``, and an ``fma``'s multiply as
a rounded ``mul``) rounded to 16 bits before it is added; F3 / F5 another block accumulation (:func:`faulty_form`); F4
every ``cast`` to a 16-bit type rounds toward zero; F10 the partials under a narrowed FP8 accumulator; F11-F14 the
scale indexing of ``faults/README.md`` (block kernels). :func:`stale_azp_operands`: F15's ``azp_adj`` / ``azp``.
Shapes as ``reference.block.contract``; KB = ceil(K / bk), NB = ceil(N / bn).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from faults.accumulator import rows_of
from faults.postprocessing import storage16
from reference.asymmetric import column_sums
from reference.bits import ieee_subnormals, round_fp32
from reference.block.contract import BlockAccumulation, BlockDeclaration, check_block_size
from reference.block.evaluate import accumulate_block, block_partial, k_block_chunks
from reference.contract import EpilogueSteps, parse_steps
from reference.epilogue import apply_steps
from reference.errors import OperandError

_ONE = torch.ones((), dtype=torch.float32)
#: the faults :func:`block_fault_output` emulates
BLOCK_EMULATED = ("F1", "F2", "F3", "F4", "F5", "F10", "F11", "F12", "F13", "F14")


def faulty_form(form: BlockAccumulation, fault: str) -> BlockAccumulation:
    """The block accumulation F3 / F5 execute instead of ``form`` (same ``add`` / ``fma`` kind and order). F3 the
    two scales in the other order: ``mul s_a; mul s_w`` <-> ``mul s_w; mul s_a``, ``mul s_a; fma s_w`` <-> ``mul
    s_w; fma s_a``, a product ``s_a*s_w`` split as ``s_a`` then ``s_w``. F5 the product fused at another point:
    separate scales -> ``s_a*s_w`` (``mul`` or ``fma`` as the last one was), a product split as ``s_w`` then ``s_a``
    (so F3 and F5 always differ). Any other fault: ``form``."""
    if fault not in ("F3", "F5"):
        return form
    scales = list(form.muls) + ([form.fma] if form.fma else [])
    if scales == ["s_a*s_w"]:  # one product
        split = ["s_a", "s_w"] if fault == "F3" else ["s_w", "s_a"]
    elif fault == "F3":
        split = scales[::-1]
    else:
        split = ["s_a*s_w"]
    if form.fma:
        return dataclasses.replace(form, muls=tuple(split[:-1]), fma=split[-1])
    return dataclasses.replace(form, muls=tuple(split), fma="")


def truncating_epilogue(steps: EpilogueSteps) -> EpilogueSteps:
    """F4's epilogue: every ``cast`` to ``out`` / ``bf16`` / ``fp16`` rounds toward zero (a float32 output keeps its
    bits: its ``cast out`` is the identity)."""
    texts = [
        f"cast {s.dtype} rtz" if s.op == "cast" and s.dtype != "fp32" and i > 0 else s.text
        for i, s in enumerate(steps.steps)
    ]
    return parse_steps(texts)


def _r16(x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return round_fp32(x, storage16(out_dtype), "rne").to(torch.float32)


def _index(sel: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return rows_of(x, sel.to(x.device)) if x.dtype.is_floating_point and x.element_size() == 1 else x[sel.to(x.device)]


def block_fault_output(
    a, b, scale_a, scale_b, bias, out_dtype, block_size, decl: BlockDeclaration, fault: str, mask, accumulator=None
) -> torch.Tensor:
    """out_dtype [M, N] on a's device: at the True elements of ``mask`` (bool [M, N]) the block reference with
    ``fault`` (module docstring; F1-F5, F10, F11-F14) over the selected rows x columns, zero elsewhere. ``decl`` the
    kernel's declaration, ``accumulator`` its FP8 accumulator model (F10: the narrowed one; None for int8: exact
    partials). OperandError: a fault with no block form."""
    if fault not in BLOCK_EMULATED:
        raise OperandError(f"{fault!r} has no block-scaled form")
    bn, bk = check_block_size(block_size)
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[0])
    kb, nb = -(-k // bk), -(-n // bn)
    dev = a.device
    mk = mask.to(dev)
    rows, cols = mk.any(dim=1).nonzero().reshape(-1), mk.any(dim=0).nonzero().reshape(-1)
    out = torch.zeros((m, n), dtype=out_dtype, device=dev)
    if not len(rows) or not len(cols):
        return out
    form = faulty_form(decl.accumulation, fault)
    sa_all, sw_all = scale_a.to(dev, torch.float32), scale_b.to(dev, torch.float32)
    if fault == "F1":
        sa_all, sw_all = (round_fp32(s, torch.bfloat16, "rne").to(torch.float32) for s in (sa_all, sw_all))
    wrow = cols // bn if fault != "F13" else torch.clamp(cols // bk, max=nb - 1)
    a_s, b_s = _index(rows, a), _index(cols, b)
    tail = k % bk != 0  # the last K-block is partial
    total = torch.zeros((len(rows), len(cols)), dtype=torch.float32, device=dev)
    with ieee_subnormals(a):
        for chunk in k_block_chunks(kb, form.split_k, form.interleaved):
            acc = torch.zeros_like(total)
            for j in chunk:
                last_partial = tail and j == kb - 1
                if fault == "F14" and last_partial:
                    continue
                p = block_partial(a_s[:, j * bk : (j + 1) * bk], b_s[:, j * bk : (j + 1) * bk], accumulator)
                js = (j + 1) % kb if fault == "F11" else j
                sa = sa_all[rows, js].reshape(-1, 1)
                if fault == "F12" and last_partial:  # s_a[m, KB-1]'s successor in row-major memory: s_a[m+1, 0]
                    sa = sa_all.reshape(-1)[((rows + 1) * kb) % (m * kb)].reshape(-1, 1)
                sw = sw_all[wrow, js].reshape(1, -1)
                if fault == "F2":
                    acc = acc + _scaled_partial16(p, sa, sw, form, out_dtype)
                else:
                    acc = accumulate_block(acc, p, sa, sw, form)
            total = acc if form.split_k == 1 else total + acc
    epi = truncating_epilogue(decl.epilogue) if fault == "F4" else decl.epilogue
    bias_c = None if bias is None else bias.to(dev)[cols]
    sub = apply_steps(total, _ONE, _ONE, epi, bias=bias_c, out_dtype=out_dtype)
    out[rows.unsqueeze(1), cols.unsqueeze(0)] = sub.to(dev)
    return out


def _scaled_partial16(p, sa, sw, form: BlockAccumulation, out_dtype) -> torch.Tensor:
    """F2: the K-block's scaled partial (``form``'s ``mul`` steps, an ``fma``'s multiply as one more rounded ``mul``)
    rounded to the 16-bit storage type (``faults.postprocessing.storage16``) and back."""
    scale = {"s_a": sa, "s_w": sw}
    for op in list(form.muls) + ([form.fma] if form.fma else []):
        p = p * (sa * sw if op == "s_a*s_w" else scale[op])
    return _r16(p, out_dtype)


def block_fault_definition(decl: BlockDeclaration, fault: str) -> str:
    """One line: what ``fault`` executes on this declaration, and where it changes nothing (ground truth)."""
    form = decl.accumulation.label()
    return {
        "F1": f"s_a, s_w rounded to bf16, then '{form}'",
        "F2": f"each K-block's scaled partial r16(p*s_a*s_w) (form '{form}', in its mul order) added",
        "F3": f"'{faulty_form(decl.accumulation, 'F3').label()}' instead of '{form}'",
        "F4": f"'{truncating_epilogue(decl.epilogue).label()}' instead of '{decl.epilogue.label()}'",
        "F5": f"'{faulty_form(decl.accumulation, 'F5').label()}' instead of '{form}'",
        "F11": "K-block kb scaled with K-block (kb+1) % KB's s_a, s_w (no change: KB == 1)",
        "F12": "last K-block scaled with s_a[(m+1) % M, 0] (no change: K % block_k == 0)",
        "F13": "weight-scale row min(n // block_k, NB-1) instead of n // block_n (no change: block_n == block_k)",
        "F14": "last, partial K-block's partial dropped (no change: K % block_k == 0)",
    }[fault]


def stale_azp_operands(b, azp_adj, azp) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """F15: ``(azp_adj', azp')`` precomputed for zero point + 1. Per-token (``azp`` int32 [M]): ``azp + 1``, same
    ``azp_adj``; per-tensor (``azp`` None, ``azp_adj = z * colsum(b)``): ``azp_adj + colsum(b)`` = ``(z + 1) *
    colsum(b)`` in int32 (wrapping, as the caller's product). The correction then moves by ``colsum(b)[n]``."""
    if azp is not None:
        return azp_adj, azp + torch.ones((), dtype=azp.dtype, device=azp.device)
    return azp_adj + column_sums(b).to(azp_adj.device, azp_adj.dtype), None
