"""One operand case through every per-case check (:func:`evaluate_case`, :class:`CaseEvaluation`):
run the kernel, compute the exact accumulator once, observe the kernel's own accumulator (its
``int_mm`` entry), apply C1-C6, C8 (and C10), optionally compare with a second kernel. The result,
a :class:`CaseResult`, is one row of a conformance report.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

from conformance.cases import case_id
from conformance.cases.common import VIOLATES
from conformance.checks.accumulator import (
    ObservedAccumulator,
    check_fp32_exact_accumulator,
    check_int32_headroom,
    observe_accumulator,
)
from conformance.checks.block_output import block_not_applicable, check_block_declared, check_block_pow2
from conformance.checks.case_check import CaseCheck
from conformance.checks.fp8_exactness import (
    check_fp8_bound_where_inexact,
    check_fp8_exact_accumulator,
    check_no_int32_accumulator,
    exact_only,
)
from conformance.checks.manifest import check_kernel_manifest
from conformance.checks.operand_sharing import check_operand_sharing
from conformance.checks.output_bits import check_declared_contract, check_pow2_bit_identity, check_real_scale_spacing
from conformance.checks.ownership import check_call_independence
from conformance.checks.result import (
    CALL_ID,
    CHECK_NAMES,
    INTERFACE_ID,
    INTERFACE_NAME,
    KEPT_EVIDENCE,
    PRECONDITION_CASE,
    RAISED,
    CheckResult,
    Verdict,
    call_failure,
    interface_failure,
    not_applicable,
)
from conformance.kernels.runner import KernelLaunch, KernelRun, cuda_device, run_kernel, start_int_mm, start_kernel
from conformance.suite.coverage import case_coverage
from conformance.suite.pairwise import compare_pair
from conformance.suite.prefetch import (
    declared_output_differs,
    prefetch_accumulator_questions,
    prefetch_output_comparisons,
    prefetch_output_evidence,
)
from conformance.suite.signatures import explain_block_output, explain_output
from reference import memo
from reference.errors import first_line
from reference.fp8 import exact_accumulator
from reference.operands import tensor_digest

#: Overall verdict when the kernel produced output on zero cases (inconclusive).
#: The n/a reason of every other per-case check on a case whose output failed its interface.
NOT_RUN_ON_INTERFACE = f"not run: the kernel returned no valid output ({INTERFACE_NAME} failure)"
#: The n/a reason of every per-case check on a case whose kernel call raised (no output).
NOT_RUN_ON_RAISE = "not run: the kernel raised, no output"
#: Smallest M * K * N of a fixed case whose references a CUDA suite computes on the kernel's device
#: (:func:`reference_device`). A case's device path costs a fixed few hundred launches and a few dozen
#: read-backs; the CPU's reference work (mostly the coverage measurement's prefix sums, M * N * K
#: element operations up to ``reach.PARTIAL_BUDGET``) grows with the case and passes that cost
#: about here. Smaller cases and the property examples keep CPU operands.
DEVICE_REFERENCE_MIN_MACS = 1 << 20
#: Per-case checks in report order (each a ``checks.case_check.CaseCheck``).
PER_CASE_CHECKS: tuple[tuple[str, CaseCheck], ...] = (
    ("C1", check_kernel_manifest),
    ("C2", check_operand_sharing),
    ("C3", check_int32_headroom),
    ("C4", check_fp32_exact_accumulator),
    ("C5", check_pow2_bit_identity),
    ("C6", check_real_scale_spacing),
    ("C8", check_declared_contract),
)
#: The per-case checks of an e4m3 kernel (DESIGN.md 3b, ``conformance.checks.fp8_exactness``): C3 n/a; C4 whether the
#: declared accumulator is provably exact on the case; C5 / C6 / C8 bit-exact where it is; C12 the declared bound on
#: captured cases and where it is not.
FP8_PER_CASE_CHECKS: tuple[tuple[str, CaseCheck], ...] = (
    ("C1", check_kernel_manifest),
    ("C2", check_operand_sharing),
    ("C3", check_no_int32_accumulator),
    ("C4", check_fp8_exact_accumulator),
    ("C5", exact_only("C5", check_pow2_bit_identity)),
    ("C6", exact_only("C6", check_real_scale_spacing)),
    ("C8", exact_only("C8", check_declared_contract)),
    ("C12", check_fp8_bound_where_inexact),
)


#: The per-case checks of a block-scaled kernel (``conformance.checks.block_output``; int8 or e4m3): C8 bit-exact
#: against the declared block accumulation, C5 on power-of-two block scales (order-free), C3 / C4 / C6 (and C12 for
#: e4m3) n/a with the reason.
BLOCK_PER_CASE_CHECKS: tuple[tuple[str, CaseCheck], ...] = (
    ("C1", check_kernel_manifest),
    ("C2", check_operand_sharing),
    ("C3", block_not_applicable("C3")),
    ("C4", block_not_applicable("C4")),
    ("C5", check_block_pow2),
    ("C6", block_not_applicable("C6")),
    ("C8", check_block_declared),
)
BLOCK_FP8_PER_CASE_CHECKS = BLOCK_PER_CASE_CHECKS + (("C12", block_not_applicable("C12")),)


def per_case_checks(spec) -> tuple[tuple[str, CaseCheck], ...]:
    """The per-case checks of ``spec``: :data:`BLOCK_PER_CASE_CHECKS` (:data:`BLOCK_FP8_PER_CASE_CHECKS`) for a
    block-scaled kernel, :data:`FP8_PER_CASE_CHECKS` for an e4m3 kernel, else :data:`PER_CASE_CHECKS`."""
    if spec.is_block:
        return BLOCK_FP8_PER_CASE_CHECKS if spec.is_fp8 else BLOCK_PER_CASE_CHECKS
    return FP8_PER_CASE_CHECKS if spec.is_fp8 else PER_CASE_CHECKS


#: C10 joins the per-case checks where the evaluation launched the kernel itself
#: (the runner's ownership probe: ``conformance.kernels.runner.start_kernel``); the
#: sweep hands its own runs in and stores no C10 row.
OWNERSHIP_CHECK: tuple[str, CaseCheck] = ("C10", check_call_independence)


@dataclass
class CaseResult:
    """Every per-case check on one operand case.

    ``source``: ``synthetic`` | ``tile_edges`` | ``family`` | ``capture`` | ``property`` (a fault-sweep cell:
    ``sweep``); ``shape``: ``[M, K, N]``; ``checks``: check id -> CheckResult; ``run_manifest``: the KernelRun
    manifest; ``elapsed_s``: kernel wall time (s); ``error``: the kernel's error line; ``pair``: ``compare_pair``
    result with ``--against``; ``produced_output``: False when not runnable here or it raised; ``output_digest``:
    ``tensor_digest`` of the output (None without); ``output``: the tensor with ``keep_output=True``
    (not serialized); ``coverage``: ``case_coverage`` (``{"error": line}`` if it failed);
    ``prefetch_error``: the line(s) of a failed prefetch (verdicts unaffected), else None;
    ``crash``: :func:`crashed_case`'s record when the kernel's process died or hung on the case; ``fault_explanation``:
    ``conformance.suite.signatures.explain_output`` where C8 failed (None elsewhere, or when not asked).
    """

    case: str
    source: str
    scale_mode: str
    shape: list
    out_dtype: str
    bias: bool
    checks: dict
    run_manifest: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    error: Optional[str] = None
    operand_digests: dict = field(default_factory=dict)
    pair: Optional[dict] = None
    meta: dict = field(default_factory=dict)
    produced_output: bool = True
    output_digest: Optional[str] = None
    output: Optional[object] = field(default=None, repr=False, compare=False)
    coverage: dict = field(default_factory=dict)
    prefetch_error: Optional[str] = None
    crash: Optional[dict] = None
    fault_explanation: Optional[dict] = None

    @property
    def not_run_reason(self) -> Optional[str]:
        """The runner's ``not runnable here: ...`` line, or None when the kernel ran (or failed)."""
        err = self.error or ""
        if self.run_manifest.get("skipped") or err.startswith("not runnable here"):
            return err or "not runnable here"
        return None

    @property
    def interface(self) -> Optional[str]:
        """The kernel's interface failure on this case (``KernelRun.interface``), or None."""
        r = self.checks.get(INTERFACE_ID)
        return None if r is None else r.evidence.get("interface")

    @property
    def raised(self) -> Optional[str]:
        """``<exception type>: <first line>`` when the kernel's call raised on this case (``KernelRun.raised``),
        else None."""
        r = self.checks.get(CALL_ID)
        return None if r is None or r.evidence.get("failure_kind") != RAISED else r.evidence.get("exception")

    @property
    def kernel_failures(self) -> list[CheckResult]:
        return [r for r in self.checks.values() if r.is_kernel_failure]

    @property
    def precondition_violations(self) -> list[CheckResult]:
        """Failed precondition checks caused by the operands, except on a precondition case."""
        return [r for r in self.checks.values() if r.is_precondition_violation and not r.is_precondition_case]

    @property
    def precondition_cases(self) -> list[CheckResult]:
        """Failed precondition checks the case was built to fail (``meta["violates"]``)."""
        return [r for r in self.checks.values() if r.is_precondition_case]

    @property
    def verdict(self) -> str:
        """``crash`` / ``timeout`` when the kernel's process died / hung on the case, else ``fail`` on a
        kernel failure, else ``not run`` when the kernel could not run, else ``pass``."""
        if self.crash is not None:
            return self.crash["status"]
        if self.kernel_failures:
            return Verdict.FAIL
        return Verdict.NOT_RUN if self.not_run_reason is not None else Verdict.PASS

    def failure_lines(self) -> list[str]:
        """One line per kernel failure: ``C8 declared_contract: <summary>``, ``interface: <line>``, the runner's
        ``kernel raised ...`` line."""
        return [
            r.summary if r.check_id in (INTERFACE_ID, CALL_ID) else f"{r.check_id} {r.name}: {r.summary}"
            for r in self.kernel_failures
        ]

    def to_dict(self) -> dict:
        """JSON-able dict; full evidence for failing checks, the headline
        numbers (max ulp, histogram, accumulator maxima) for the others."""
        checks = {}
        for cid, r in self.checks.items():
            ev = (
                r.evidence if r.verdict == Verdict.FAIL else {k: v for k, v in r.evidence.items() if k in KEPT_EVIDENCE}
            )
            checks[cid] = {"verdict": r.verdict, "summary": r.summary, "evidence": ev}
        d = {
            "case": self.case,
            "source": self.source,
            "scale_mode": self.scale_mode,
            "shape": self.shape,
            "out_dtype": self.out_dtype,
            "bias": self.bias,
            "verdict": self.verdict,
            "interface": self.interface,
            "checks": checks,
            "path": self.run_manifest.get("path"),
            "elapsed_s": self.elapsed_s,
            "error": self.error,
            "operand_digests": self.operand_digests,
            "meta": self.meta,
            "produced_output": self.produced_output,
            "not_run_reason": self.not_run_reason,
            "output_digest": self.output_digest,
            "coverage": self.coverage,
        }
        if self.pair is not None:
            d["pair"] = self.pair
        if self.prefetch_error is not None:
            d["prefetch_error"] = self.prefetch_error
        if self.crash is not None:
            d["crash"] = self.crash
        if self.raised is not None:
            d["raised"] = self.raised
        if self.fault_explanation is not None:
            d["fault_explanation"] = self.fault_explanation
        return d


#: ``CaseResult.crash["status"]``: the kernel's process died / gave no result within the timeout
CRASH, TIMEOUT = "crash", "timeout"


def crash_line(record: dict) -> str:
    """One line for a crash / timeout record (``status``, ``signal``, ``exitcode``, ``timeout_s``, ``where``:
    e.g. ``on this case``, ``during C9``)."""
    where = record.get("where") or "on this case"
    if record["status"] == TIMEOUT:
        return f"no result within {record.get('timeout_s'):g} s {where} (the kernel hangs or is that slow): killed"
    sig = record.get("signal")
    how = f"killed by {sig}" if sig else f"exited with status {record.get('exitcode')}"
    return f"the kernel's process died {where} ({how})"


def _case_fields(ops, source: Optional[str]) -> dict:
    """The CaseResult fields every result of ``ops`` shares: case id, source (``source`` or the case's meta, else
    ``synthetic``), scale mode, shape [M, K, N], out dtype, bias presence, operand digests, JSON-able meta."""
    meta = ops.meta or {}
    return dict(
        case=case_id(ops),
        source=source or meta.get("source", "synthetic"),
        scale_mode=ops.scale_mode,
        shape=[ops.m, ops.k, ops.n],
        out_dtype=str(ops.out_dtype),
        bias=ops.bias is not None,
        operand_digests=ops.digests(),
        meta=_jsonable_meta(dict(meta)),
    )


def crashed_case(spec, ops, record: dict, source: Optional[str] = None) -> CaseResult:
    """The CaseResult of a case whose kernel call killed its process or hung, without calling anything of the kernel:
    ``record`` = ``{"status": crash | timeout, "signal", "exitcode", "timeout_s", "elapsed_s", "log_tail", "repro",
    ...}`` (``elapsed_s``: until the process died or was killed, the case's ``elapsed_s``).
    The kernel-call pseudo-check (``checks.result.CALL_ID``) fails with :func:`crash_line` (evidence: the record);
    every per-case check is ``n/a`` (not run: no output)."""
    line = crash_line(record)
    status = record["status"]
    checks = {CALL_ID: call_failure(status, f"kernel failed ({status}): {line}", crash=record)}
    for cid, _ in per_case_checks(spec) + (OWNERSHIP_CHECK,):
        checks[cid] = CheckResult(cid, CHECK_NAMES[cid], Verdict.NOT_APPLICABLE, f"not run: {line}")
    return CaseResult(
        **_case_fields(ops, source),
        checks=checks,
        elapsed_s=float(record.get("elapsed_s", 0.0)),
        error=line,
        produced_output=False,
        crash=dict(record),
    )


class PrefetchWarning(RuntimeWarning):
    """A case's prefetch raised; the checks computed their answers themselves (verdicts unaffected)."""


def _prefetch(spec, ops, fn: Callable, *args) -> tuple:
    """Run the prefetch ``fn(spec, ops, *args)``: ``(its result, None)``, or
    ``(None, one line naming its exception)`` (also warned as
    :class:`PrefetchWarning`).

    A prefetch (``prefetch_output_comparisons``, ``prefetch_accumulator_questions``,
    ``prefetch_output_evidence``) is an optimisation (questions asked early,
    read in one read-back inside a ``reference.memo`` scope) that must not
    change a verdict: the checks look their answers up in the memo and
    compute them themselves when they are not there, and the memo holds an
    answer only once its question was completely asked, so after a failure
    they run exactly as without the prefetch. Falling back is therefore
    safe; hiding the failure is not (it would silently cost the sweep its
    speed-up, or mask a bug the checks then hit too), so it is warned and
    kept on the case. KeyboardInterrupt and SystemExit are not caught: a
    stop is the caller's (``conformance.runtime.graceful_stop``), and the kernel's
    own errors never reach here (``run_kernel`` records them on ``run.error``).
    """
    try:
        return fn(spec, ops, *args), None
    except Exception as e:  # noqa: BLE001 -- fall back to the checks' own computations
        line = f"{fn.__name__} raised {type(e).__name__}: {first_line(e, limit=None)}"
        warnings.warn(
            PrefetchWarning(f"{spec.name} {case_id(ops)}: {line}; the checks computed their comparisons themselves"),
            stacklevel=3,
        )
        return None, line


def check_error(cid: str, e: BaseException) -> CheckResult:
    """A ``fail`` CheckResult (``failure_kind == "harness"``) for a check that itself raised ``e``."""
    line = f"check raised {type(e).__name__}: {first_line(e, None)}"
    return CheckResult(
        cid, CHECK_NAMES.get(cid, cid), Verdict.FAIL, line, {"check_error": line, "failure_kind": "harness"}
    )


def _jsonable_meta(meta: dict) -> dict:
    out = {}
    for k, v in (meta or {}).items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v)
    return out


def _mark_precondition_cases(checks: dict, meta: Optional[dict]) -> None:
    """Flag (PRECONDITION_CASE) each precondition violation of a check ``meta["violates"]`` names."""
    for cid in (meta or {}).get(VIOLATES) or ():
        r = checks.get(cid)
        if r is not None and r.is_precondition_violation:
            r.evidence[PRECONDITION_CASE] = True


def _own_questions(spec) -> bool:
    """Whether ``spec``'s checks ask their own questions (an e4m3 or a block-scaled kernel): the int8 prefetches,
    fault explanation and coverage measurement (the per-token epilogue's) do not apply."""
    return bool(spec.is_fp8 or spec.is_block)


class CaseEvaluation:
    """:func:`evaluate_case` in three steps, so a caller can ask its own device questions
    (``reference.readback``) together with the case's: construction (kernel, exact accumulator and
    ``int_mm`` launched; inside a ``reference.memo`` scope every question the checks will read is
    asked, not read), :meth:`settle` (one read-back, then the failure evidence is asked) and
    :meth:`result` (the checks run). Outside a memo scope nothing is prefetched; the results are
    those of running the checks one after the other. ``exact``: int64 [M, N] (float32 for e4m3 operands:
    ``reference.fp8.exact_accumulator``) on the operands' device.
    """

    def __init__(self, spec, ops, device: Optional[str] = None, run=None, keep_on_device: bool = False):
        self.spec, self.ops, self.device, self.keep_on_device = spec, ops, device, keep_on_device
        self.launch: Optional[KernelLaunch] = None
        self.run: Optional[KernelRun] = None
        self.obs: Optional[ObservedAccumulator] = None
        self.probed = run is None
        if isinstance(run, KernelLaunch):
            self.launch = run
        elif run is None:
            self.launch = start_kernel(spec, ops, device=device, keep_on_device=keep_on_device, probe_ownership=True)
        else:
            self.run = run
        self.exact = exact_accumulator(ops.a, ops.b)
        self._acc_launch, self._acc_error = None, None
        if getattr(spec, "int_mm", None) is not None:
            try:
                self._acc_launch = start_int_mm(spec, ops.a, ops.b, device=device, keep_on_device=keep_on_device)
            except Exception as e:  # noqa: BLE001 -- the runner should not raise; keep going
                self._acc_error = e
        subject = self.run if self.run is not None else self.launch
        acc = self._acc_launch
        if _own_questions(spec):  # the prefetches ask the int8 checks' questions; FP8 / block checks ask their own
            self._outputs, self._prefetch_errors = None, []
            return
        # inside a reference.memo scope (the sweep): every question asked now
        self._outputs, err = _prefetch(spec, ops, prefetch_output_comparisons, subject, self.exact)
        _, err2 = _prefetch(
            spec,
            ops,
            prefetch_accumulator_questions,
            None if acc is None else acc.acc,
            None if acc is None else acc.manifest,
            self.exact,
        )
        self._prefetch_errors = [e for e in (err, err2) if e]

    def settle(self) -> "CaseEvaluation":
        """Read the runs' verdicts and everything asked so far (one read-back), then ask the output
        checks' failure evidence. Idempotent; returns self."""
        if self.obs is not None:
            return self
        if self.run is None:
            assert self.launch is not None  # __init__ sets one of them
            self.run = self.launch.result()
        self.obs = self._observed()
        if _own_questions(self.spec):
            return self
        _, err = _prefetch(self.spec, self.ops, prefetch_output_evidence, self.run, self.exact, self._outputs)
        if err:
            self._prefetch_errors.append(err)
        return self

    def _observed(self) -> ObservedAccumulator:
        if self._acc_error is not None:
            e = self._acc_error
            return ObservedAccumulator(None, "kernel int_mm", f"{type(e).__name__}: {e}")
        try:
            return observe_accumulator(
                self.spec, self.ops, device=self.device, keep_on_device=self.keep_on_device, launch=self._acc_launch
            )
        except Exception as e:  # noqa: BLE001 -- the runner should not raise; keep going
            return ObservedAccumulator(None, "kernel int_mm", f"{type(e).__name__}: {e}")

    def output_differs(self) -> bool:
        """Whether C8 may fail (``declared_output_differs``): a hint for asking failure-related
        questions before :meth:`result`, never a verdict."""
        self.settle()
        if _own_questions(self.spec):
            return True
        try:
            return declared_output_differs(self.spec, self.ops, self.run, self.exact, self._outputs)
        except Exception:  # noqa: BLE001 -- only a hint
            return True

    def result(
        self,
        against=None,
        source: Optional[str] = None,
        keep_output: bool = False,
        coverage: bool = True,
        output_digest: bool = True,
        explain: bool = True,
    ) -> CaseResult:
        """The CaseResult (settles first). Args as :func:`evaluate_case`; ``explain``: test F1-F5's emulations
        against the output where C8 failed (``CaseResult.fault_explanation``)."""
        self.settle()
        spec, ops, run, exact, device = self.spec, self.ops, self.run, self.exact, self.device
        assert run is not None  # settle() sets it
        checks: dict[str, CheckResult] = {}
        # one scope per case: the checks share its bound, references and digests
        # (reference.memo; a no-op inside the sweep's own scope)
        iface, raised = getattr(run, "interface", None), getattr(run, "raised", None)
        with memo.scope():
            for cid, fn in per_case_checks(spec) + ((OWNERSHIP_CHECK,) if self.probed else ()):
                if iface is not None or raised is not None:  # no valid output: nothing numeric was judged
                    checks[cid] = not_applicable(cid, NOT_RUN_ON_INTERFACE if iface is not None else NOT_RUN_ON_RAISE)
                    continue
                try:
                    checks[cid] = fn(spec, ops, run, acc=self.obs, exact=exact)
                except Exception as e:  # noqa: BLE001 -- report, never crash the suite
                    checks[cid] = check_error(cid, e)
        if iface is not None:
            checks = {INTERFACE_ID: interface_failure(iface), **checks}
        elif raised is not None:
            checks = {CALL_ID: call_failure(RAISED, run.error or raised, exception=raised), **checks}
        _mark_precondition_cases(checks, ops.meta)
        explanation = None
        c8 = checks.get("C8")
        if explain and c8 is not None and c8.is_kernel_failure and run.output is not None:
            try:
                if spec.is_block:
                    explanation = explain_block_output(spec, ops, run.output, device)
                elif not _own_questions(spec):
                    explanation = explain_output(spec, ops, run.output, exact)
            except Exception:  # noqa: BLE001 -- a hint for the signature, never a crash
                explanation = None
        pair = None
        if against is not None:
            run_b = run_kernel(against, ops, device=device)
            pair = compare_pair(spec, against, ops, run, run_b)
        cov = {}
        try:
            if coverage and not _own_questions(spec):  # the coverage conditions are the int8 epilogue's
                cov = case_coverage(spec, ops, run, exact)
        except Exception as e:  # noqa: BLE001 -- coverage is evidence, never a crash
            cov = {"error": f"{type(e).__name__}: {first_line(e, None)}"}
        return CaseResult(
            **_case_fields(ops, source),
            checks=checks,
            run_manifest=dict(run.manifest or {}),
            elapsed_s=float(getattr(run, "elapsed_s", 0.0) or 0.0),
            error=run.error,
            pair=pair,
            produced_output=run.output is not None,
            coverage=cov,
            output_digest=None if run.output is None or not output_digest else tensor_digest(run.output),
            output=run.output if keep_output else None,
            prefetch_error="; ".join(self._prefetch_errors) or None,
            fault_explanation=explanation,
        )


def evaluate_case(
    spec,
    ops,
    against=None,
    device: Optional[str] = None,
    source: Optional[str] = None,
    keep_output: bool = False,
    coverage: bool = True,
    run=None,
    output_digest: bool = True,
    keep_on_device: bool = False,
) -> CaseResult:
    """Run ``spec`` on one case and apply every per-case check (:class:`CaseEvaluation`).

    ``ops``: GemmOperands (CPU, or on one device: the references are then computed there);
    ``against``: a second KernelSpec for bit agreement; ``source`` overrides ``ops.meta["source"]``;
    ``coverage`` / ``output_digest``: measure ``case_coverage`` / hash the output; ``run``: the
    KernelRun or ``KernelLaunch`` when the caller has it; ``keep_on_device``: leave output and
    observed accumulator on their device. Never raises for a kernel's failure; a check that raises
    gives a ``harness`` failure; a failed prefetch is warned (:class:`PrefetchWarning`).

    Raises:
        OperandError: invalid ``ops``.
        KeyboardInterrupt: a stop (Ctrl-C, SIGTERM via ``conformance.runtime.graceful_stop``).
    """
    return CaseEvaluation(spec, ops, device=device, run=run, keep_on_device=keep_on_device).result(
        against=against, source=source, keep_output=keep_output, coverage=coverage, output_digest=output_digest
    )


def reference_device(spec, device: Optional[str], ops) -> Optional[str]:
    """Where the suite computes the references of fixed case ``ops``: the kernel's CUDA device
    (``runner.cuda_device(spec, device)``) when ``M * K * N >= DEVICE_REFERENCE_MIN_MACS``, else
    None (the CPU). The exact accumulator, the epilogue emulation and the coverage measurement are
    exact or element-wise IEEE float32, so the device gives the CPU's bits (tests pin it)."""
    if ops.m * ops.k * ops.n < DEVICE_REFERENCE_MIN_MACS:
        return None
    return cuda_device(spec, device)


def evaluate_fixed(spec, ops, device: Optional[str], against=None, ref_device: Optional[str] = None) -> CaseResult:
    """One fixed case as the suite evaluates it (``SuiteState.evaluate``, the suite's workers): references on
    ``ref_device`` or :func:`reference_device` (operands moved there once, device questions read back together in
    a ``reference.memo`` scope), else on the CPU; the same CaseResult either way."""
    dev = ref_device or reference_device(spec, device, ops)
    if dev is None:
        return evaluate_case(spec, ops, against=against, device=device)
    with memo.scope():
        return evaluate_case(spec, ops.to(dev), against=against, device=device, keep_on_device=True)
