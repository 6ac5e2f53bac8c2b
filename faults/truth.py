"""Ground truth of one injected cell: what the fault really changed.

``ground_truth(kernel, fault, coverage, seed, ops)`` runs the clean kernel
and the injected kernel (``faults.inject``) on the same operands through
``conformance.kernels.runner.run_kernel`` and compares output bits
(``reference.bits.spacing_distance``: distance in spacings of the output
dtype -- bf16, fp16 or fp32). Nothing about a fault's effect is assumed:
whether F1 or F3 can move anything under power-of-two weight scales, or F4
under a float32 output, is what this record measures.

Fault-free output, per family:
  * F1-F5, F8, F9: the wrapped (clean) kernel's output on ``ops``.
  * F6, F7: the operands are first prepared (``faults.prepare_case``; a case
    already prepared for this injection is used as is) and the fault-free
    output is the kernel's *declared* epilogue on the exact int64
    accumulator of those operands (``reference.epilogue.apply_epilogue``):
    what the kernel would return if its accumulator could hold the exact
    value. The injected kernel's output on them is the observed one, so
    ``changed`` counts the elements the precondition violation really moved
    (e.g. an int32 wrap-around), and an F7 whose ``float32(acc)`` conversion
    rounds exactly like the reference's is recorded as a no-op.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from faults.mask import case_key, element_mask
from faults.spec import POSTPROCESSING_FAULTS, PRECONDITION_FAULTS, make_injection
from reference import readback


@dataclass
class GroundTruth:
    """What one injected cell changed.

    Attributes:
        fault: id ``F1`` .. ``F9``; coverage: ``one`` | ``1%`` | ``all``; seed.
        selected: elements the mask selected (F6/F7: rows x channels of the block).
        changed: elements whose output bits differ from the fault-free output
            (module docstring); NaN vs NaN counts as equal.
        max_spacing: largest spacing distance of any element (0 when none
            changed; ``reference.bits.NAN_DISTANCE`` for NaN vs a number).
        spacing_hist: ``reference.bits.ulp_histogram`` bins (``"0"``, ``"1"``,
            ``"2"``, ``"3-4"``, ``"5-8"``, ``"9-16"``, ``"17-256"``, ``">256"``,
            ``"nan"``) -> count over the *selected* elements (sums to ``selected``).
        no_op: the fault changed no output bit in this cell (``changed == 0``).
        accumulator_source: ``"kernel int_mm"`` or ``"exact reference"`` (what
            F1-F5 recompute from; F6/F7's fault-free output always uses the
            exact reference; other faults: the wrapped kernel's source if it
            has an int_mm, recorded for completeness).
        operand_change: what F6/F7/F9 did to the operands, None otherwise.
        changed_outside: changed elements outside the selection (0 by
            construction for F1-F5, F8, F9; for F6/F7 a kernel disagreeing
            with its declared contract elsewhere).
        variant: F9 variant, None otherwise.
        definition: the faulty epilogue formula for F1-F5
            (``faults.postprocessing.faulty_steps``), else a short description.
        shape: ``[M, K, N]`` of the operands the kernel ran on.
        kernel: the wrapped kernel's name.
        error: the kernel's error line when a run failed (then the counts
            cover nothing and are 0), else None.
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
        """JSON-able dict of every field."""
        return asdict(self)


def _compare(clean: torch.Tensor, faulty: torch.Tensor, sel: torch.Tensor):
    """Spacing distances of ``faulty`` from ``clean`` (same shape / dtype and
    device as the bool mask ``sel``): ``reference.readback.Deferred`` of
    ``{changed, max_spacing, spacing_hist (over sel), changed_outside,
    selected}``, every count asked together (one read-back, shared with
    whatever else is pending)."""
    from reference.bits import histogram_dict, spacing_distance, ulp_histogram_counts

    d = spacing_distance(faulty, clean)
    ch = d > 0
    z = torch.zeros((), dtype=torch.int64, device=d.device)
    c = torch.cat(
        [
            torch.stack([ch.sum(), d.max().to(torch.int64) if d.numel() else z, (ch & ~sel).sum(), sel.sum()]),
            ulp_histogram_counts(torch.where(sel, d, torch.full_like(d, -1))),
        ]
    )  # -1: no bin (d >= 0)

    def convert(c: list) -> dict:
        return {
            "changed": int(c[0]),
            "max_spacing": int(c[1]),
            "spacing_hist": histogram_dict(c[4:]),
            "changed_outside": int(c[2]),
            "selected": int(c[3]),
        }

    return readback.ask([c], convert)


def _definition(spec, inj, ops) -> str:
    if inj.fault in POSTPROCESSING_FAULTS:
        from faults.postprocessing import faulty_steps

        return faulty_steps(spec.contract, inj.fault, ops.bias is not None)["definition"]
    if inj.fault == "F8":
        return "no change (null control)"
    if inj.fault == "F9":
        from faults.operand import describe

        return describe(inj.variant)
    return {
        "F6": "selected accumulators pushed to >= 2^31 (outside int32)",
        "F7": "selected accumulators pushed to >= 2^24 (float32 conversion inexact)",
    }[inj.fault]


def ground_truth(
    kernel,
    fault: str,
    coverage: str,
    seed: int,
    ops,
    *,
    variant: Optional[str] = None,
    device: Optional[str] = None,
    clean_run=None,
    faulty_run=None,
) -> GroundTruth:
    """Run clean and injected kernel on ``ops`` and record what changed:
    :func:`ask_ground_truth` read now. Args / Returns / Raises as there."""
    return ask_ground_truth(
        kernel, fault, coverage, seed, ops, variant=variant, device=device, clean_run=clean_run, faulty_run=faulty_run
    ).get()


def ask_ground_truth(
    kernel,
    fault: str,
    coverage: str,
    seed: int,
    ops,
    *,
    variant: Optional[str] = None,
    device: Optional[str] = None,
    clean_run=None,
    faulty_run=None,
):
    """Run clean and injected kernel on ``ops`` and ask what changed (the
    counts are read by the returned Deferred's ``get``, with every other
    pending ``reference.readback`` question: the sweep reads them with its
    checks' in one read-back).

    Args:
        kernel: the clean KernelSpec or a kernel name.
        fault, coverage, seed, variant: as ``faults.inject``.
        ops: ``reference.operands.GemmOperands`` (CPU); for F6/F7 either the
            original case or the one ``faults.prepare_case`` returned.
        device: kernel device (None = the runner's default).
        clean_run: the clean kernel's KernelRun on ``ops`` when the caller has
            it already (ignored for F6 / F7, whose fault-free output is the
            exact reference's); faulty_run: the injected kernel's KernelRun on
            the (prepared) case, likewise. The sweep passes the runs it made
            for the checks instead of running the kernels again (same bits
            for a deterministic kernel; a non-deterministic one is compared
            with the very runs the checks saw).
    Returns:
        GroundTruth (never raises for a kernel's own failure: ``error`` is set).
    Raises:
        FaultError: bad fault / coverage / seed / variant.
    """
    from conformance.kernels.runner import run_kernel
    from faults.inject import _resolve, inject, prepare_case

    spec = _resolve(kernel)
    inj = make_injection(fault, coverage, seed, variant=variant)
    faulty_spec = inject(spec, inj.fault, inj.coverage, inj.seed, variant=inj.variant)
    acc_source = "kernel int_mm" if spec.int_mm is not None else "exact reference"
    operand_change, change_asked = None, None
    if inj.fault in PRECONDITION_FAULTS:
        ops = prepare_case(ops, inj.fault, inj.coverage, inj.seed, spec.constraints)
        prep = ops.meta["fault_prepared"]
        rows, cols = prep["rows"], prep["cols"]
        sel = torch.zeros((ops.m, ops.n), dtype=torch.bool)
        sel[torch.tensor(rows).unsqueeze(1), torch.tensor(cols).unsqueeze(0)] = True
        operand_change = prep["operand_change"]
        from reference.accumulate import exact_int_mm
        from reference.epilogue import cached_epilogue

        clean_out = cached_epilogue(
            exact_int_mm(ops.a, ops.b), ops.scale_a, ops.scale_b, spec.contract, bias=ops.bias, out_dtype=ops.out_dtype
        )
        clean_err = None
        acc_source = "exact reference"
    else:
        sel = element_mask(
            ops.m, ops.n, case_key(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias), inj.fault, inj.coverage, inj.seed
        )
        run = clean_run if clean_run is not None else run_kernel(spec, ops, device=device)
        clean_out, clean_err = run.output, run.error if run.output is None else None
        if inj.fault == "F9":  # asked now, read with the comparison's counts
            from faults.operand import ask_changed_operands, describe

            variant = inj.variant
            change_asked = ask_changed_operands(variant, ops).then(lambda ch: describe(variant, changed=list(ch)))
    frun = faulty_run if faulty_run is not None else run_kernel(faulty_spec, ops, device=device)
    if inj.fault in POSTPROCESSING_FAULTS:
        acc_source = str((frun.manifest.get("extra") or {}).get("accumulator_source", acc_source))
    base = dict(
        fault=inj.fault,
        coverage=inj.coverage,
        seed=inj.seed,
        accumulator_source=acc_source,
        operand_change=operand_change,
        variant=inj.variant,
        definition=_definition(spec, inj, ops),
        shape=[ops.m, ops.k, ops.n],
        kernel=spec.name,
    )
    err = clean_err or (frun.error if frun.output is None else None)

    def truth(fields: dict) -> GroundTruth:
        """The record from the counts read back (and F9's operand change)."""
        if change_asked is not None:
            return GroundTruth(**fields, **dict(base, operand_change=change_asked.get()))
        return GroundTruth(**fields, **base)

    if err is not None or clean_out is None or frun.output is None:
        from reference.bits import ULP_BINS

        return readback.ask([sel.sum()]).then(
            lambda v: truth(
                dict(
                    changed=0,
                    max_spacing=0,
                    spacing_hist={k: 0 for k in ULP_BINS},
                    no_op=False,
                    error=err or "no output",
                    selected=int(v[0]),
                )
            )
        )
    dev = ops.a.device  # compared where the operands live (integer bit arithmetic)
    from reference import memo

    # the selected count is read back with the comparison's other counts
    cmp = _compare(memo.moved(clean_out, dev), memo.moved(frun.output, dev), sel.to(dev))
    return cmp.then(lambda c: truth(dict(c, no_op=c["changed"] == 0)))
