"""``inject``: any kernel turned into a faulty one (``<kernel>+F4@all#s0``, every
declaration kept, the fault on the selected elements of ``faults.mask``); ``prepare_case``:
the operand part of F6 / F7. Per-fault behaviour: ``faults/README.md``; a fault that does not
apply to the kernel's operands (``faults.catalogue.not_applicable``: F6 / F7 on e4m3, F10 on
int8) is refused. Every call records (``conformance.kernels.trace``) the path ``<inner
path>+F<n>``, the injected source digest and fault, coverage, seed and selected count.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import torch

from conformance.kernels import trace
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import KernelSpec, declared_epilogue
from faults.accumulator import fp8_kernel_accumulator, narrow_output, narrowed_model
from faults.block import block_fault_output, stale_azp_operands
from faults.catalogue import kernel_kind, not_applicable
from faults.mask import acc_case_key, case_key, element_mask, selected_count
from faults.operand import ACC_VARIANTS, mismatched, mismatched_acc_operands
from faults.postprocessing import faulty_epilogue
from faults.precondition import block_case, extend_k, prepare_precondition, select_block
from faults.spec import (
    ACCUMULATOR_FAULTS,
    BLOCK_FAULTS,
    POSTPROCESSING_FAULTS,
    PRECONDITION_FAULTS,
    ZERO_POINT_FAULTS,
    FaultError,
    Injection,
    f10_deficit,
    make_injection,
    split_injected_name,
)
from reference.accumulate import exact_int_mm
from reference.asymmetric import corrected_accumulator, wrap32

#: Version of the injection semantics, part of every injected kernel's source digest.
INJECTION_VERSION = "int8conf-faults/1"


def resolve_kernel(kernel) -> KernelSpec:
    """``kernel`` itself, or the KernelSpec its name resolves to (``get_kernel``)."""
    if isinstance(kernel, KernelSpec):
        return kernel
    if isinstance(kernel, str):
        return get_kernel(kernel)
    raise FaultError(f"kernel must be a KernelSpec or a kernel name, got {type(kernel).__name__}")


def _record(inj: Injection, digest: str, selected: int, **extra) -> None:
    """Record path ``<inner path>+F<n>`` and the injected digest (after the inner calls)."""
    cur = trace.current()
    if cur is None:
        return
    info = dict(fault=inj.fault, fault_name=inj.name, coverage=inj.coverage, seed=inj.seed, fault_variant=inj.variant)
    path = f"{cur.path or 'unreported'}+{inj.fault}"
    trace.record_path(path, source_digest=digest, **info, fault_selected=int(selected), **extra)


class _Faulty:
    """An injected entry: the ``inner`` KernelSpec, the ``injection`` and the injected
    spec's source ``digest`` (recorded at run time)."""

    def __init__(self, inner: KernelSpec, injection: Injection, digest: str):
        self.inner, self.injection, self.digest = inner, injection, digest
        self.int8conf_injection = injection


class FaultyScaledMM(_Faulty):
    """``scaled_mm`` of an injected kernel. Keyword arguments beyond ``out_dtype`` / ``bias`` (a block kernel's
    ``block_size=``, an asymmetric one's ``azp_adj=`` / ``azp=``) go to the inner kernel as given, and key the mask."""

    def __call__(self, a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, **call):
        inj, inner = self.injection, self.inner
        fid = inj.fault
        if fid in PRECONDITION_FAULTS:
            return self._precondition(a, b, scale_a, scale_b, out_dtype, bias)
        m, n = int(a.shape[0]), int(b.shape[0])
        key = case_key(a, b, scale_a, scale_b, bias, call.get("block_size"), call.get("azp_adj"), call.get("azp"))
        mask = element_mask(m, n, key, fid, inj.coverage, inj.seed)
        clean = inner.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, **call)
        extra = {}
        if inner.is_block and fid in POSTPROCESSING_FAULTS + ACCUMULATOR_FAULTS + BLOCK_FAULTS:
            declared = inner.accumulator_on(a.device.type) if inner.is_fp8 else None
            if fid in ACCUMULATOR_FAULTS:
                declared = narrowed_model(declared, f10_deficit(inj.variant))
                extra["accumulator_source"] = f"emulated narrow accumulator {declared.label()!r}"
            else:
                extra["accumulator_source"] = "block reference (K-block partials)"
            bs = call.get("block_size", inner.block.sizes[0])
            faulty = block_fault_output(
                a, b, scale_a, scale_b, bias, out_dtype, bs, inner.block, fid, mask, accumulator=declared
            )
        elif fid in POSTPROCESSING_FAULTS:
            if inner.is_fp8:
                acc, extra["accumulator_source"] = fp8_kernel_accumulator(inner, a, b, scale_a, scale_b)
            else:
                acc, extra["accumulator_source"] = kernel_accumulator(inner, a, b)
            if call.get("azp_adj") is not None:  # the int32 correction first (reference.asymmetric)
                acc = wrap32(corrected_accumulator(acc, call["azp_adj"], call.get("azp")))
                extra["accumulator_source"] += " - azp * azp_adj (int32)"
            contract = declared_epilogue(inner, a.device.type, out_dtype).contract
            faulty = faulty_epilogue(
                acc.to(clean.device), scale_a, scale_b, contract, fid, bias=bias, out_dtype=out_dtype
            )
        elif fid in ACCUMULATOR_FAULTS:
            model = narrowed_model(inner.accumulator_on(a.device.type), f10_deficit(inj.variant))
            extra["accumulator_source"] = f"emulated narrow accumulator {model.label()!r}"
            contract = declared_epilogue(inner, a.device.type, out_dtype).contract
            faulty = narrow_output(a, b, scale_a, scale_b, bias, out_dtype, contract, model, mask)
        elif fid == "F9":
            ops2 = mismatched(a, b, scale_a, scale_b, bias, inj.variant)
            faulty = inner.scaled_mm(*ops2[:4], out_dtype=out_dtype, bias=ops2[4], **call)
            trace.record_operands(*ops2)  # what the kernel received (last record wins)
        elif fid in ZERO_POINT_FAULTS:
            adj, azp = stale_azp_operands(b, call.get("azp_adj"), call.get("azp"))
            faulty = inner.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, azp_adj=adj, azp=azp)
        else:  # F8 null: the kernel's own bits through the same merge
            faulty = clean
        out = torch.where(mask.to(clean.device), faulty.to(clean.device), clean)
        # the mask holds exactly selected_count elements: counted from the shape, not read back
        _record(inj, self.digest, selected_count(m, n, inj.coverage), **extra)
        return out

    def _precondition(self, a, b, scale_a, scale_b, out_dtype, bias):
        inj, inner = self.injection, self.inner
        if inj.prepared:
            out = inner.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias)
            _record(inj, self.digest, 0, fault_operands="prepared by faults.prepare_case")
            return out
        ops, key = (a, b, scale_a, scale_b, bias), case_key(a, b, scale_a, scale_b, bias)
        run = lambda *o: inner.scaled_mm(*o[:4], out_dtype=out_dtype, bias=o[4])
        return self_prepared(run, ops, inj, self.digest, key, inner.constraints.k_multiple)


def self_prepared(fn, ops: tuple, inj: Injection, digest: str, key: str, k_multiple: int = 1):
    """F6 / F7 inside the wrapper (``prepared=False``): ``fn(a, b, scale_a, scale_b, bias)``
    run for real on operands whose selected accumulators leave the range.

    With every row and channel selected, one run on the K-extended case; otherwise a run
    on the original operands plus one on the selected block alone, K-extended, whose
    outputs replace the selected elements (the same bits as the full extended case, at
    ``r*c/(M*N)`` of its cost). The extended operands are recorded as received.
    """
    a, b, scale_a, scale_b, bias = ops
    rows, cols, extra, _ = select_block(a, b, scale_a, scale_b, bias, inj.fault, inj.coverage, inj.seed, key=key)
    m, n = int(a.shape[0]), int(b.shape[0])
    if len(rows) == m and len(cols) == n:
        a2, b2 = extend_k(a, b, rows, cols, extra, k_multiple)
        ext = (a2, b2, scale_a, scale_b, bias)
        out = fn(*ext)
    else:
        ext = block_case(a, b, scale_a, scale_b, bias, rows, cols, extra, k_multiple)
        out = fn(*ops).clone()
        sub = fn(*ext)
        dev = out.device
        out[rows.to(dev).unsqueeze(1), cols.to(dev).unsqueeze(0)] = sub.to(dev)
    trace.record_operands(*ext)
    _record(inj, digest, len(rows) * len(cols), fault_extra_k=int(extra))
    return out


class FaultyIntMM(_Faulty):
    """``int_mm`` of an injected kernel: passes through, except F9 ``stale`` /
    ``transposed`` (mask keyed by ``faults.mask.acc_case_key``) and unprepared F6/F7."""

    def __call__(self, a, b):
        inj, fn = self.injection, self.inner.int_mm
        if inj.fault in PRECONDITION_FAULTS and not inj.prepared:
            one = torch.ones((), dtype=torch.float32)
            ops, k_mult = (a, b, one, one, None), self.inner.constraints.k_multiple
            return self_prepared(lambda a_, b_, *_: fn(a_, b_), ops, inj, self.digest, acc_case_key(a, b), k_mult)
        if inj.fault == "F9" and inj.variant in ACC_VARIANTS:
            m, n = int(a.shape[0]), int(b.shape[0])
            mask = element_mask(m, n, acc_case_key(a, b), inj.fault, inj.coverage, inj.seed)
            clean = fn(a, b)
            wrong = fn(*mismatched_acc_operands(a, b, inj.variant))
            out = torch.where(mask.to(clean.device), wrong.to(clean.device), clean)
            _record(inj, self.digest, selected_count(m, n, inj.coverage))
            return out
        out = fn(a, b)
        _record(inj, self.digest, 0)
        return out


def kernel_accumulator(spec: KernelSpec, a, b) -> tuple[torch.Tensor, str]:
    """``(acc, source)`` of an int8 kernel (e4m3: ``faults.accumulator.fp8_kernel_accumulator``):
    the kernel's ``int_mm(a, b)`` and ``"kernel int_mm"`` when it
    returns an int32 / int64 [M, N] tensor; else ``exact_int_mm`` (int64) and ``"exact
    reference"`` (with the reason in parentheses when the entry exists but failed)."""
    m, n = int(a.shape[0]), int(b.shape[0])
    why = ""
    if spec.int_mm is not None:
        try:
            acc = spec.int_mm(a, b)
            if isinstance(acc, torch.Tensor) and acc.dtype in (torch.int32, torch.int64) and tuple(acc.shape) == (m, n):
                return acc, "kernel int_mm"
            why = " (kernel int_mm returned no int32 [M,N])"
        except Exception as e:  # noqa: BLE001 -- the fault still needs an accumulator
            why = f" (kernel int_mm raised {type(e).__name__})"
    return exact_int_mm(a, b), "exact reference" + why  # on a's device, exact on any


def inject(
    kernel, fault: str, coverage: str = "all", seed: int = 0, *, variant: Optional[str] = None, prepared: bool = True
) -> KernelSpec:
    """``kernel`` (KernelSpec or a name ``get_kernel`` resolves) with ``fault`` (id, name or
    ``F9.<variant>``) on the selected elements: :func:`inject_injection` of the validated
    :class:`~faults.spec.Injection`. Raises FaultError (bad value, or ``kernel`` already
    injected) or KernelLoadError (a name that does not resolve)."""
    inner = _clean(resolve_kernel(kernel))
    return inject_injection(inner, make_injection(fault, coverage, seed, variant=variant, prepared=prepared))


def _clean(inner: KernelSpec) -> KernelSpec:
    if injection_of(inner) is not None:
        raise FaultError(f"kernel {inner.name!r} already carries an injected fault; inject into the clean kernel")
    return inner


def inject_injection(inner: KernelSpec, inj: Injection) -> KernelSpec:
    """The injected KernelSpec: named ``<kernel><inj.suffix()>``, origin
    ``fault-injection:<inner origin>``, every declaration of ``inner`` kept (so it is
    checked against the same promises), ``int_mm`` wrapped when ``inner`` has one.
    FaultError: ``inner`` already injected, or the fault does not apply to its operands."""
    _clean(inner)
    why = not_applicable(inj.fault, inner.operands, kernel_kind(inner))
    if why:
        raise FaultError(f"{inj.fault} {inj.name} does not apply to {inner.operands} kernel {inner.name!r}: {why}")
    text = f"{INJECTION_VERSION}|{inner.source_digest}|{inner.name}|{inj.suffix()}"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return dataclasses.replace(
        inner,
        name=f"{inner.name}{inj.suffix()}",
        scaled_mm=FaultyScaledMM(inner, inj, digest),
        source_digest=digest,
        int_mm=None if inner.int_mm is None else FaultyIntMM(inner, inj, digest),
        origin=f"fault-injection:{inner.origin}",
        description=f"{inner.name} with fault {inj.label()}",
    )


def injection_of(spec) -> Optional[Injection]:
    """The :class:`Injection` of an injected KernelSpec, None for a clean kernel."""
    return getattr(getattr(spec, "scaled_mm", None), "int8conf_injection", None)


def wrapped_kernel(spec) -> Optional[KernelSpec]:
    """The clean KernelSpec an injected one wraps (None for a clean kernel)."""
    fn = getattr(spec, "scaled_mm", None)
    return fn.inner if isinstance(fn, FaultyScaledMM) else None


def prepare_case(ops, fault: str, coverage: str = "all", seed: int = 0, constraints=None):
    """The operand part of a fault for one case: :func:`prepare_injection` of the
    validated injection. Raises FaultError: bad fault / coverage / seed."""
    return prepare_injection(ops, make_injection(fault, coverage, seed), constraints)


def prepare_injection(ops, inj: Injection, constraints=None):
    """F6 / F7: ``GemmOperands`` whose selected accumulators really leave int32 / reach
    2**24 (``faults.precondition.prepare_precondition``; F6 on a window of at most 16 x 16
    outputs within the kernel's ``constraints``), with ``meta["fault_prepared"]``. Every
    other fault, or a case already prepared for this injection: ``ops`` itself."""
    if inj.fault not in PRECONDITION_FAULTS:
        return ops
    prev = (ops.meta or {}).get("fault_prepared")
    if prev and (prev.get("fault"), prev.get("coverage"), prev.get("seed")) == (inj.fault, inj.coverage, inj.seed):
        return ops
    return prepare_precondition(ops, inj.fault, inj.coverage, inj.seed, constraints)[0]


def resolve_injected_name(name: str) -> Optional[KernelSpec]:
    """Registry resolver: ``"<kernel>+F4@all#s0"`` -> the injected kernel; None for a
    name without an injection suffix."""
    parsed = split_injected_name(name)
    if parsed is None:
        return None
    base, inj = parsed
    return inject_injection(_clean(resolve_kernel(base)), inj)


def injection_note(spec) -> Optional[str]:
    """One report line naming an injected kernel's fault, e.g. ``fault injected: F4
    output_truncation (post-processing), coverage all, seed 0, into kernel cpu
    (faults.inject)`` (F9 adds ``, variant stale``); None for a clean kernel."""
    inj = injection_of(spec)
    if inj is None:
        return None
    inner = wrapped_kernel(spec)
    variant = f", variant {inj.variant}" if inj.variant else ""
    line = (
        f"fault injected: {inj.fault} {inj.name} ({inj.family}){variant}, coverage "
        f"{inj.coverage}, seed {inj.seed}, into kernel {inner.name if inner else '?'} "
        f"(faults.inject)"
    )
    if inj.fault in PRECONDITION_FAULTS:
        line += (
            "; fixed cases prepared by faults.prepare_case (K extended with saturated "
            "columns), property-test operands not prepared"
            if inj.prepared
            else "; K extended inside the wrapper on every call"
        )
    return line


def annotate_result(result, spec) -> None:
    """Name the injection in a ``ConformanceResult``: the :func:`injection_note` line
    first in ``notes`` and ``kernel["injection"]`` = ``Injection.to_dict()`` plus
    ``wrapped`` (the clean kernel's name). No-op for a clean kernel."""
    inj = injection_of(spec)
    if inj is None:
        return
    note = injection_note(spec)
    if note not in result.notes:
        result.notes.insert(0, note)
    inner = wrapped_kernel(spec)
    result.kernel["injection"] = dict(inj.to_dict(), wrapped=inner.name if inner else None)
