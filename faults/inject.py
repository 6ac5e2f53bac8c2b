"""``inject``: turn any kernel into a faulty one; ``prepare_case``: the
operand-level part of a fault.

``inject(kernel, fault, coverage, seed)`` returns a new
``conformance.kernels.spec.KernelSpec`` (name ``<kernel>+F4@all#s0``) that
declares exactly what the wrapped kernel declares (contract, devices,
constraints) and behaves exactly like it except for the fault on the
selected elements (``faults.mask``). It is usable wherever a kernel is: the
suite, ``int8conf check --inject``, ``pytest --inject``, the sweep, detllm
(its ``int_mm`` entry too). The callables are instances of
:class:`FaultyScaledMM` / :class:`FaultyIntMM` (picklable when the wrapped
kernel's callables are); :func:`injection_of` recovers the
:class:`~faults.spec.Injection` from a spec.

Per family (definitions in the family modules):

* post-processing F1-F5 (``faults.postprocessing``): the wrapped kernel runs;
  the accumulator is taken from its ``int_mm`` entry when it has one (else
  ``reference.accumulate.exact_int_mm``; an ``int_mm`` that raises also falls
  back to it); the selected elements are recomputed with the faulty
  epilogue, all others keep the kernel's bits. ``int_mm`` passes through.
* precondition F6/F7 (``faults.precondition``): with ``prepared=True`` (the
  default) the fault lives in the operands -- :func:`prepare_case` builds
  them, the sweep / ``check --inject`` / the pytest plugin / ``ground_truth``
  use them, and the wrapper passes through (same bits as the wrapped kernel
  on those operands, which is the point: the kernel then runs on them for
  real). With ``prepared=False`` the wrapper extends K itself on every call
  (``scaled_mm`` and ``int_mm``; :func:`self_prepared`: the selected block
  runs K-extended and is merged into the normal run) and records the
  extended operands: for callers that cannot prepare cases (detllm's
  engine, model replays, a user's own tests through the pytest plugin's
  ``int8conf_kernel`` fixture).
* control F8: goes through the same machinery (mask, clean run, merge) and
  returns the kernel's own bits.
* operand F9 (``faults.operand``): the wrapped kernel also runs on the
  mismatched operands; selected elements come from that run.

Every call records, through ``conformance.kernels.trace``, the wrapped
kernel's path with the suffix (e.g. ``cpu-exact+F4``), the injected spec's
source digest (so check C1 sees the kernel that was declared), and
``fault``/``coverage``/``seed``/``selected`` in the manifest extras.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import torch

from conformance.kernels import trace
from conformance.kernels.spec import KernelSpec
from faults.mask import acc_case_key, case_key, element_mask, selected_count
from faults.spec import (
    POSTPROCESSING_FAULTS,
    PRECONDITION_FAULTS,
    FaultError,
    Injection,
    make_injection,
    split_injected_name,
)

#: Version of the injection semantics, part of every injected kernel's source digest.
INJECTION_VERSION = "int8conf-faults/1"


def _resolve(kernel) -> KernelSpec:
    if isinstance(kernel, KernelSpec):
        return kernel
    if isinstance(kernel, str):
        from conformance.kernels.registry import get_kernel

        return get_kernel(kernel)
    raise FaultError(f"kernel must be a KernelSpec or a kernel name, got {type(kernel).__name__}")


def _record(inj: Injection, digest: str, selected: int, **extra) -> None:
    """Record path ``<inner path>+F<n>`` and the injected digest (after the inner calls)."""
    cur = trace.current()
    if cur is None:
        return
    trace.record_path(
        f"{cur.path or 'unreported'}+{inj.fault}",
        source_digest=digest,
        fault=inj.fault,
        fault_name=inj.name,
        coverage=inj.coverage,
        seed=inj.seed,
        fault_variant=inj.variant,
        fault_selected=int(selected),
        **extra,
    )


class FaultyScaledMM:
    """``scaled_mm`` of an injected kernel (see module docstring).

    Attributes:
        inner: the wrapped KernelSpec; injection: the :class:`Injection`;
        digest: the injected spec's source digest (recorded at run time).
    """

    def __init__(self, inner: KernelSpec, injection: Injection, digest: str):
        self.inner, self.injection, self.digest = inner, injection, digest
        self.int8conf_injection = injection

    def __call__(self, a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        inj, inner = self.injection, self.inner
        fid = inj.fault
        if fid in PRECONDITION_FAULTS:
            return self._precondition(a, b, scale_a, scale_b, out_dtype, bias)
        m, n = int(a.shape[0]), int(b.shape[0])
        mask = element_mask(m, n, case_key(a, b, scale_a, scale_b, bias), fid, inj.coverage, inj.seed)
        clean = inner.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias)
        extra = {}
        if fid in POSTPROCESSING_FAULTS:
            from faults.postprocessing import faulty_epilogue

            acc, extra["accumulator_source"] = kernel_accumulator(inner, a, b)
            faulty = faulty_epilogue(
                acc.to(clean.device), scale_a, scale_b, inner.contract, fid, bias=bias, out_dtype=out_dtype
            )
        elif fid == "F9":
            from faults.operand import mismatched

            ops2 = mismatched(a, b, scale_a, scale_b, bias, inj.variant)
            faulty = inner.scaled_mm(*ops2[:4], out_dtype=out_dtype, bias=ops2[4])
            trace.record_operands(*ops2)  # what the kernel received (last record wins)
        else:  # F8 null: the kernel's own bits through the same merge
            faulty = clean
        out = torch.where(mask.to(clean.device), faulty.to(clean.device), clean)
        # element_mask selects exactly selected_count elements: counted from
        # the shape, not read back from the mask
        _record(inj, self.digest, selected_count(m, n, inj.coverage), **extra)
        return out

    def _precondition(self, a, b, scale_a, scale_b, out_dtype, bias):
        inj, inner = self.injection, self.inner
        if inj.prepared:
            out = inner.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias)
            _record(inj, self.digest, 0, fault_operands="prepared by faults.prepare_case")
            return out
        return self_prepared(
            lambda *ops: inner.scaled_mm(*ops[:4], out_dtype=out_dtype, bias=ops[4]),
            (a, b, scale_a, scale_b, bias),
            inj,
            self.digest,
            case_key(a, b, scale_a, scale_b, bias),
            inner.constraints.k_multiple,
        )


def self_prepared(fn, ops: tuple, inj: Injection, digest: str, key: str, k_multiple: int = 1):
    """F6 / F7 inside the wrapper (``prepared=False``): run ``fn`` for real on
    operands whose selected accumulators leave the range.

    ``fn(a, b, scale_a, scale_b, bias)`` is the wrapped entry. With every row
    and channel selected it runs once on the K-extended case
    (``faults.precondition.extend_k``). Otherwise it runs on the original
    operands and on the selected block alone, K-extended
    (``faults.precondition.block_case``), and the block's outputs replace the
    selected elements: the same bits a run on the full extended case gives
    (each output element depends only on its own row, channel, scales and
    bias), at ``r*c/(M*N)`` of its cost -- what makes a model-level F6 with
    coverage ``one`` or ``1%`` affordable. The operands of the extended run
    are recorded (``trace.record_operands``) as what the kernel received.
    """
    from faults.precondition import block_case, extend_k, select_block

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


class FaultyIntMM:
    """``int_mm`` of an injected kernel: passes through, except F9 ``stale`` /
    ``transposed`` (mismatched ``a`` / ``b`` on the selected elements, mask
    keyed by ``faults.mask.acc_case_key``) and F6/F7 with ``prepared=False``
    (K extended on the selected rows x channels)."""

    def __init__(self, inner: KernelSpec, injection: Injection, digest: str):
        self.inner, self.injection, self.digest = inner, injection, digest
        self.int8conf_injection = injection

    def __call__(self, a, b):
        inj, fn = self.injection, self.inner.int_mm
        if inj.fault in PRECONDITION_FAULTS and not inj.prepared:
            one = torch.ones((), dtype=torch.float32)
            return self_prepared(
                lambda a_, b_, *_: fn(a_, b_),
                (a, b, one, one, None),
                inj,
                self.digest,
                acc_case_key(a, b),
                self.inner.constraints.k_multiple,
            )
        from faults.operand import ACC_VARIANTS, mismatched_acc_operands

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
    """The accumulator a post-processing fault recomputes from.

    Returns:
        ``(acc, source)``: the kernel's ``int_mm(a, b)`` (int32 [M, N]) and
        ``"kernel int_mm"`` when it has the entry and it returns an int32 /
        int64 [M, N] tensor; else ``reference.accumulate.exact_int_mm`` (int64)
        and ``"exact reference"`` (with the reason in parentheses when the
        entry exists but failed).
    """
    from reference.accumulate import exact_int_mm

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


def _digest(inner: KernelSpec, inj: Injection) -> str:
    text = f"{INJECTION_VERSION}|{inner.source_digest}|{inner.name}|{inj.suffix()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def inject(
    kernel, fault: str, coverage: str = "all", seed: int = 0, *, variant: Optional[str] = None, prepared: bool = True
) -> KernelSpec:
    """A new kernel: ``kernel`` with ``fault`` on the selected elements.

    Args:
        kernel: KernelSpec, or a name ``conformance.kernels.registry.get_kernel``
            resolves (built-in, registered, ``pkg.mod:fn``, entry point).
        fault: ``F1`` .. ``F9``, a catalogue name, or ``F9.<variant>``.
        coverage: ``one`` | ``1%`` | ``all``.
        seed: int >= 0.
        variant: F9 variant (``pow2_scales`` default, ``stale``, ``transposed``).
        prepared: F6/F7 only, see :class:`faults.spec.Injection`.

    Returns:
        KernelSpec named ``<kernel>+<fault>@<coverage>#s<seed>`` with the
        wrapped kernel's contract, devices, constraints and version; origin
        ``fault-injection:<inner origin>``; ``int_mm`` wrapped when the kernel
        has one.

    Raises:
        FaultError: bad fault / coverage / seed / variant, or ``kernel`` is
            already an injected kernel (inject into the clean one).
        KernelLoadError: a kernel name that does not resolve.
    """
    inner = _resolve(kernel)
    if injection_of(inner) is not None:
        raise FaultError(f"kernel {inner.name!r} already carries an injected fault; inject into the clean kernel")
    inj = make_injection(fault, coverage, seed, variant=variant, prepared=prepared)
    digest = _digest(inner, inj)
    # everything the wrapped kernel declares carries over (contract, devices,
    # constraints, declared steps, layouts, overflow behaviour per device): the
    # injected kernel is checked against the same promises
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
    """The operand-level part of a fault for one case.

    F6 / F7: operands whose selected accumulators really leave int32 / reach
    ``|acc| >= 2**24`` (``faults.precondition.prepare_precondition``: K
    extended with saturated columns for the selected rows x channels of the
    case's own data; F6 on a window of at most 16 x 16 outputs); the
    returned case carries ``meta["fault_prepared"]`` (fault, coverage,
    seed, rows, cols, extra_k, window ``[rows, first channel, channels]`` or
    None, operand_change). Every other fault: ``ops`` itself (identity).
    Run the injected kernel (``inject(kernel, fault, coverage, seed)``, whose
    F6/F7 ``scaled_mm`` passes through) on the returned case; the reference
    and the checks use it too.

    Args:
        ops: ``reference.operands.GemmOperands``.
        fault, coverage, seed: as :func:`inject`.
        constraints: the kernel's ``ShapeConstraints`` (F6 window and padded K
            within what it accepts; None: none).
    Raises:
        FaultError: bad fault / coverage / seed.
    """
    inj = make_injection(fault, coverage, seed)
    if inj.fault not in PRECONDITION_FAULTS:
        return ops
    prev = (ops.meta or {}).get("fault_prepared")
    if (
        prev
        and prev.get("fault") == inj.fault
        and prev.get("coverage") == inj.coverage
        and prev.get("seed") == inj.seed
    ):
        return ops  # already prepared for this very injection: idempotent
    from faults.precondition import prepare_precondition

    return prepare_precondition(ops, inj.fault, inj.coverage, inj.seed, constraints)[0]


def resolve_injected_name(name: str) -> Optional[KernelSpec]:
    """Registry resolver: ``"<kernel>+F4@all#s0"`` -> ``inject(<kernel>, ...)``;
    None for a name without an injection suffix."""
    parsed = split_injected_name(name)
    if parsed is None:
        return None
    base, inj = parsed
    return inject(base, inj.fault, inj.coverage, inj.seed, variant=inj.variant, prepared=inj.prepared)


def injection_note(spec) -> Optional[str]:
    """One report line naming an injected kernel's fault, coverage and seed,
    e.g. ``fault injected: F4 output_truncation (post-processing), coverage
    all, seed 0, into kernel cpu (faults.inject)`` (F9 adds ``, variant
    stale`` after the family); None for a clean kernel."""
    inj = injection_of(spec)
    if inj is None:
        return None
    inner = wrapped_kernel(spec)
    fam = inj.family
    variant = f", variant {inj.variant}" if inj.variant else ""
    line = (
        f"fault injected: {inj.fault} {inj.name} ({fam}){variant}, coverage "
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
    """Name the injection in a conformance result (``conformance.suite.run.ConformanceResult``):
    the :func:`injection_note` line first in ``result.notes`` and
    ``result.kernel["injection"]`` = ``Injection.to_dict()`` plus ``wrapped``
    (the clean kernel's name). No-op for a clean kernel."""
    inj = injection_of(spec)
    if inj is None:
        return
    note = injection_note(spec)
    if note not in result.notes:
        result.notes.insert(0, note)
    inner = wrapped_kernel(spec)
    result.kernel["injection"] = dict(inj.to_dict(), wrapped=inner.name if inner else None)
