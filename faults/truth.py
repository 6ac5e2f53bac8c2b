"""Ground truth of one injected cell: the clean and the injected kernel's output bits
compared in spacings of the output dtype (``reference.bits.spacing_distance``). For
F6 / F7 the fault-free output is the declared epilogue on the exact int64 accumulator of
the prepared operands (what the kernel would return if its accumulator held the value).
F1-F5 on an e4m3 kernel recompute from its own float32 accumulator (``faults.accumulator``);
F10 from the narrowed one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import declared_epilogue
from faults.accumulator import KERNEL_UNIT_SCALES, narrowed_model
from faults.block import block_fault_definition
from faults.describe import declared_formula
from faults.inject import inject_injection, injection_of, prepare_injection, resolve_kernel, wrapped_kernel
from faults.mask import case_key, element_mask
from faults.operand import ask_changed_operands, describe
from faults.postprocessing import faulty_steps
from faults.spec import (
    ACCUMULATOR_FAULTS,
    BLOCK_FAULTS,
    POSTPROCESSING_FAULTS,
    PRECONDITION_FAULTS,
    ZERO_POINT_FAULTS,
    FaultError,
    f10_deficit,
    make_injection,
)
from reference import memo, readback
from reference.accumulate import exact_int_mm
from reference.bits import ULP_BINS, histogram_dict, spacing_distance, ulp_histogram_counts
from reference.epilogue import cached_epilogue


@dataclass
class GroundTruth:
    """What one injected cell changed.

    ``selected``: elements the mask selected (F6/F7: the block's rows x channels).
    ``changed``: elements whose bits differ from the fault-free output (NaN == NaN).
    ``max_spacing``: largest spacing distance (``reference.bits.NAN_DISTANCE`` for NaN
    vs a number). ``spacing_hist``: ``reference.bits.ulp_histogram`` bins over the
    selected elements. ``accumulator_source``: what F1-F5 / F10 recomputed from (F6/F7:
    always the exact reference). ``changed_outside``: changes outside the selection
    (0 by construction except F6/F7). ``definition``: the faulty formula (F1-F5) or a
    short description. ``shape``: ``[M, K, N]`` run. ``error``: a failed run's line
    (the counts are then 0).
    """

    fault: str
    coverage: str
    seed: int
    selected: int
    changed: int
    max_spacing: int
    spacing_hist: dict
    no_op: bool
    accumulator_source: str
    operand_change: Optional[str] = None
    changed_outside: int = 0
    variant: Optional[str] = None
    definition: str = ""
    shape: list = field(default_factory=list)
    kernel: str = ""
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _compare(clean: torch.Tensor, faulty: torch.Tensor, sel: torch.Tensor):
    """Deferred ``{changed, max_spacing, spacing_hist (over sel), changed_outside,
    selected}`` of ``faulty`` against ``clean`` (every count in one read-back)."""
    d = spacing_distance(faulty, clean)
    ch = d > 0
    z = torch.zeros((), dtype=torch.int64, device=d.device)
    c = torch.cat(
        [
            torch.stack([ch.sum(), d.max().to(torch.int64) if d.numel() else z, (ch & ~sel).sum(), sel.sum()]),
            ulp_histogram_counts(torch.where(sel, d, -1)),
        ]
    )  # -1: no bin (d >= 0)

    def convert(c: list) -> dict:
        d = dict(changed=int(c[0]), max_spacing=int(c[1]), spacing_hist=histogram_dict(c[4:]))
        return dict(d, changed_outside=int(c[2]), selected=int(c[3]))

    return readback.ask([c], convert)


def _definition(spec, inj, ops, device: str) -> str:
    if spec.is_block and inj.fault in POSTPROCESSING_FAULTS + BLOCK_FAULTS:
        return block_fault_definition(spec.block, inj.fault)
    if inj.fault in ZERO_POINT_FAULTS:
        return (
            "azp_adj / azp precomputed for zero point + 1: the correction moves by colsum(b)[n] (no change: colsum 0)"
        )
    contract = declared_epilogue(spec, device, ops.out_dtype).contract
    if inj.fault in POSTPROCESSING_FAULTS:
        return faulty_steps(contract, inj.fault, ops.bias is not None)["definition"]
    if inj.fault in ACCUMULATOR_FAULTS:
        declared = spec.accumulator_on(device)
        narrow = narrowed_model(declared, f10_deficit(inj.variant))
        formula = declared_formula(contract, ops.bias is not None)
        return f"x = accumulator {narrow.label()!r} instead of the declared {declared.label()!r}; {formula}"
    if inj.fault == "F8":
        return "no change (null control)"
    if inj.fault == "F9":
        return describe(inj.variant, operands=spec.operands)
    return {
        "F6": "selected accumulators pushed to >= 2^31 (outside int32)",
        "F7": "selected accumulators pushed to >= 2^24 (float32 conversion inexact)",
    }[inj.fault]


def ground_truth(kernel, fault, coverage, seed, ops, *, variant=None, device=None, clean_run=None, faulty_run=None):
    """:func:`ask_ground_truth` of ``kernel`` (clean KernelSpec or name) injected with
    (``fault``, ``coverage``, ``seed``, ``variant``; as ``faults.inject``), read now.
    Raises FaultError: bad fault / coverage / seed / variant."""
    faulty = inject_injection(resolve_kernel(kernel), make_injection(fault, coverage, seed, variant=variant))
    return ask_ground_truth(faulty, ops, device=device, clean_run=clean_run, faulty_run=faulty_run).get()


def ask_ground_truth(faulty, ops, *, device: Optional[str] = None, clean_run=None, faulty_run=None):
    """``reference.readback.Deferred`` of the :class:`GroundTruth` of the injected kernel
    ``faulty`` on ``ops`` (CPU ``GemmOperands``; for F6/F7 the original or the prepared
    case), read with every other pending question.

    ``clean_run`` / ``faulty_run``: the clean / injected kernel's KernelRun on the
    (prepared) case when the caller has it (the sweep passes the runs its checks saw);
    ``clean_run`` is ignored for F6/F7. A kernel's own failure sets ``error``, never
    raises. Raises FaultError: ``faulty`` is not an injected kernel.
    """
    inj, spec = injection_of(faulty), wrapped_kernel(faulty)
    if inj is None or spec is None:
        raise FaultError(f"kernel {getattr(faulty, 'name', faulty)!r} carries no injected fault")
    acc_source = "kernel int_mm" if spec.int_mm is not None else "exact reference"
    if spec.is_fp8:
        acc_source = KERNEL_UNIT_SCALES
    operand_change, change_asked = None, None
    if inj.fault in PRECONDITION_FAULTS:
        ops = prepare_injection(ops, inj, spec.constraints)
        prep = ops.meta["fault_prepared"]
        sel = torch.zeros((ops.m, ops.n), dtype=torch.bool)
        sel[torch.tensor(prep["rows"]).unsqueeze(1), torch.tensor(prep["cols"]).unsqueeze(0)] = True
        operand_change = prep["operand_change"]
        contract = declared_epilogue(spec, device, ops.out_dtype).contract
        clean_out = cached_epilogue(
            exact_int_mm(ops.a, ops.b), ops.scale_a, ops.scale_b, contract, bias=ops.bias, out_dtype=ops.out_dtype
        )
        clean_err = None
        acc_source = "exact reference"
    else:
        key = case_key(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.block_size, ops.azp_adj, ops.azp)
        sel = element_mask(ops.m, ops.n, key, inj.fault, inj.coverage, inj.seed)
        run = clean_run if clean_run is not None else run_kernel(spec, ops, device=device)
        clean_out, clean_err = run.output, run.error if run.output is None else None
        if inj.fault == "F9":  # asked now, read with the comparison's counts
            variant = inj.variant
            change_asked = ask_changed_operands(variant, ops).then(
                lambda ch: describe(variant, changed=list(ch), operands=spec.operands)
            )
    frun = faulty_run if faulty_run is not None else run_kernel(faulty, ops, device=device)
    if inj.fault in POSTPROCESSING_FAULTS + ACCUMULATOR_FAULTS + BLOCK_FAULTS:
        acc_source = str((frun.manifest.get("extra") or {}).get("accumulator_source", acc_source))
    base = dict(fault=inj.fault, coverage=inj.coverage, seed=inj.seed, accumulator_source=acc_source)
    base.update(
        operand_change=operand_change,
        variant=inj.variant,
        definition=_definition(spec, inj, ops, device or ops.a.device.type),
    )
    base.update(shape=[ops.m, ops.k, ops.n], kernel=spec.name)
    err = clean_err or (frun.error if frun.output is None else None)

    def truth(fields: dict) -> GroundTruth:
        if change_asked is not None:
            return GroundTruth(**fields, **dict(base, operand_change=change_asked.get()))
        return GroundTruth(**fields, **base)

    if err is not None or clean_out is None or frun.output is None:
        failed = dict(
            changed=0, max_spacing=0, spacing_hist={k: 0 for k in ULP_BINS}, no_op=False, error=err or "no output"
        )
        return readback.ask([sel.sum()]).then(lambda v: truth(dict(failed, selected=int(v[0]))))
    dev = ops.a.device  # compared where the operands live (integer bit arithmetic)
    cmp = _compare(memo.moved(clean_out, dev), memo.moved(frun.output, dev), sel.to(dev))
    return cmp.then(lambda c: truth(dict(c, no_op=c["changed"] == 0)))
