"""The suite's plan, shared by ``run_conformance`` and the pytest plugin: which cases it builds
(:func:`default_cases`), which steps it takes in which order (:func:`suite_steps`: fixed cases, the
property test, C9, C7 / E1, C13-C15, pairwise) and the state one kernel's steps fill (:class:`SuiteState`).

An e4m3 kernel (``KernelSpec.operands``, DESIGN.md 3b) gets the FP8 plan: the accumulator-safe FP8
families and the captured layers quantized to e4m3 (``conformance.cases.fp8``) as fixed cases, no
property test (its strategies draw int8 operands), C9, C11 once per run, C7 / E1 n/a (they replay
the int8 model and engine), pairwise as for int8.

A block-scaled kernel (``KernelSpec.block``) gets the BLOCK plan: the block families of its declared block sizes
(``conformance.cases.block``, int8 or e4m3) and the block covering array at the first size
(``conformance.cases.block_covering.block_plan_cases``) as fixed cases through the block per-case checks
(``suite.evaluate.BLOCK_PER_CASE_CHECKS``: C8 against the declared block accumulation, C5 on power-of-two block
scales, C1 / C2 / C10), no property test and no captures (both are per-token x per-channel), C9, C16
(n/a "not built" while its module is missing), C13-C15 on a block sample
(``checks.serving``), and C11, C7 / E1 n/a with the reason.

A kernel taking asymmetric activations (``KernelSpec.azp``) gets the ZERO-POINT plan: no fixed per-token x
per-channel cases (it refuses a call without ``azp_adj=``), C17 on its own asymmetric cases (bits, the
correction's int32 headroom, a stale precomputed correction), the other kernel-level checks n/a with the reason.

The four plan kinds (per-token, fp8, block, zero-point) are one table, :data:`PLANS` (keyed by ``KernelSpec.kind``):
the checks each adds, the n/a reason of the others, whether the property test, tile edges and captures are part of
it. Every front door (``int8conf check``, the pytest plugin, the gate) reads it through :func:`suite_steps`,
:func:`run_kernel_check` and :func:`reduced_suite`."""

from __future__ import annotations

import functools
import importlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence

import torch

from conformance.cases import (
    NO_CAPTURES,
    CaptureReplay,
    capture_cases,
    case_id,
    families,
    synthetic_cases,
    tile_edge_cases,
)
from conformance.cases.block_covering import block_plan_cases
from conformance.cases.cache import cached_cases
from conformance.cases.covering import CPU_MACS as COVERING_CPU_MACS
from conformance.cases.fp8 import fp8_capture_cases, fp8_family_cases, paper_layer_family
from conformance.cases.reach import attach_reach
from conformance.cases.regimes import CPU_OUTPUTS
from conformance.checks.batch_invariance import check_batch_invariance
from conformance.checks.compile import check_compile
from conformance.checks.fp8_accumulator import check_fp8_accumulator
from conformance.checks.graph_replay import check_graph_replay
from conformance.checks.result import CHECK_NAMES, CheckResult, not_applicable
from conformance.checks.streams import check_streams_devices
from conformance.kernels.runner import cuda_device, pick_device
from conformance.kernels.spec import BLOCK, FP8, FP8_KIND, PER_TOKEN, ZERO_POINT, kind_of
from conformance.runtime.forking import map_forked
from conformance.suite.evaluate import CaseResult, check_error, evaluate_fixed
from conformance.suite.property import property_operands, run_property_test
from conformance.suite.warmup import warm_up
from reference.errors import Int8confError, first_line
from reference.model import capture as model_capture

if TYPE_CHECKING:
    from conformance.kernels.spec import KernelSpec

#: Model-level checks: (check id, module, attribute); each callable takes the
#: KernelSpec and returns a CheckResult. Missing modules give ``n/a``.
MODEL_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("C7", "conformance.checks.token_flip", "check_token_flip"),
    ("E1", "conformance.checks.engine_hash", "check_engine_hash"),
)
_AZP_WHY = "asymmetric activations: the kernel takes azp_adj= on every call; C17 judges it on its own cases"


@dataclass(frozen=True)
class PlanKind:
    """What one kind of plan (:data:`PLANS`, keyed by ``KernelSpec.kind``) runs: ``checks`` the kernel-level checks it
    adds after C9, as (check id, module, attribute) looked up when run (n/a "not built" while the module is missing);
    ``not_applicable`` the kernel-level checks n/a for it (check id -> the reason, one line); whether the property
    test, the tile-edge shapes and the layer captures are part of it. C11 follows the operands (every e4m3 plan)."""

    checks: tuple[tuple[str, str, str], ...] = ()
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    property_test: bool = False
    tile_edges: bool = False
    captures: bool = False


#: The plan kinds: which kernel-level checks run, and why the others are n/a.
PLANS: dict[str, PlanKind] = {
    PER_TOKEN: PlanKind(property_test=True, tile_edges=True, captures=True),
    FP8_KIND: PlanKind(
        not_applicable={
            "C7": "int8-engine check: replays the W8A8 int8 model through the kernel; an e4m3 kernel takes e4m3 "
            "operands",
            "E1": "int8-engine check: the integer engine's only hardware op is int8 x int8 -> int32; an e4m3 kernel "
            "has none",
        },
        captures=True,
    ),
    BLOCK: PlanKind(
        checks=(("C16", "conformance.checks.block_accumulation", "check_block_accumulation"),),
        not_applicable={
            "C11": "block-scaled: C11 probes per-token x per-channel calls; the e4m3 block partials are "
            "accumulator-safe cases that C8 judges bit-exactly",
            "C7": "int8-engine check: replays the per-token x per-channel W8A8 model; a block-scaled kernel takes "
            "block scales",
            "E1": "int8-engine check: the integer engine's int8 x int8 -> int32 op has no block scales",
        },
    ),
    ZERO_POINT: PlanKind(
        checks=(("C17", "conformance.checks.zero_point", "check_zero_point"),),
        not_applicable={cid: _AZP_WHY for cid in ("C9", "C11", "C13", "C14", "C15", "C7", "E1")},
    ),
}


def plan_checks() -> dict:
    """check id -> (module, attribute) of every check a plan kind adds (:attr:`PlanKind.checks`)."""
    return {cid: (m, a) for kind in PLANS.values() for cid, m, a in kind.checks}


#: what the captures record of a zero-point plan says
AZP_NO_CAPTURES = "no per-token x per-channel cases: the kernel takes asymmetric activations (C17 has its own)"
#: Hint of reference.model.capture for a moved parent model, and its CLI form.
_API_MODEL_HINT = "pass model_dir to load_capture_set"
CLI_MODEL_HINT = "pass --model DIR (the parent model the captures were taken from)"


def run_batch_invariance(spec, cases: Sequence, device: Optional[str] = None) -> CheckResult:
    """C9 over the fixed cases, on their CPU operands (its references, the selection's epilogue
    disagreements, are small: cases up to ``batch_invariance.MAX_CASE_WORK``, no coverage; its
    batches are built from the case's rows); a check that raises gives a ``harness`` failure."""
    try:
        return check_batch_invariance(spec, cases, device=device)
    except Exception as e:  # noqa: BLE001 -- report, never crash the suite
        return check_error("C9", e)


def run_fp8_accumulator(spec, device: Optional[str] = None) -> CheckResult:
    """C11 (``check_fp8_accumulator``) on the device the kernel runs on; a check that raises gives
    a ``harness`` failure."""
    try:
        return check_fp8_accumulator(spec, device=device)
    except Exception as e:  # noqa: BLE001 -- report, never crash the suite
        return check_error("C11", e)


#: The serving checks (issue 45), kernel-level, each on its own sample of cases (``checks.serving``): check id ->
#: its function ``(spec, cases, device) -> CheckResult``.
SERVING_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "C13": check_graph_replay,
    "C14": check_compile,
    "C15": check_streams_devices,
}


def run_serving_check(check_id: str, spec, device: Optional[str] = None) -> CheckResult:
    """C13 / C14 / C15 (:data:`SERVING_CHECKS`) on the device the kernel runs on; a check that raises gives a
    ``harness`` failure."""
    try:
        return SERVING_CHECKS[check_id](spec, device=device)
    except Exception as e:  # noqa: BLE001 -- report, never crash the suite
        return check_error(check_id, e)


def run_kernel_check(check_id: str, spec, cases: Sequence, device: Optional[str] = None) -> CheckResult:
    """A kernel-level check of the plan: n/a with the reason where the kernel's plan kind says so (:data:`PLANS`),
    else C9 over the fixed ``cases``, a check the plan kind adds (:func:`run_plan_check`), C11 (an e4m3 kernel's
    accumulator), C13-C15 (:data:`SERVING_CHECKS`) or a model-level check. Never raises for the kernel."""
    na = PLANS[spec.kind].not_applicable
    if check_id in na:
        return not_applicable(check_id, na[check_id])
    if check_id == "C9":
        return run_batch_invariance(spec, cases, device)
    if check_id in plan_checks():
        return run_plan_check(check_id, spec, device)
    if check_id == "C11":
        return run_fp8_accumulator(spec, device)
    if check_id in SERVING_CHECKS:
        return run_serving_check(check_id, spec, device)
    return run_model_check(check_id, spec, device=pick_device(spec, device)[0])


def run_plan_check(check_id: str, spec, device: Optional[str] = None) -> CheckResult:
    """A check a plan kind adds (:attr:`PlanKind.checks`: C16, C17) on ``spec`` and ``device`` (its module looked up
    now): n/a "not built" when the module is missing, else as :func:`run_model_check`."""
    module, attr = plan_checks()[check_id]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return not_applicable(check_id, f"not built: {module} is missing")
    return run_model_check(check_id, spec, module, attr, device=device)


def run_model_check(
    check_id: str, spec, module: Optional[str] = None, attr: Optional[str] = None, device: Optional[str] = None
) -> CheckResult:
    """One model-level check of :data:`MODEL_CHECKS` (``module`` / ``attr`` override where it lives), on ``device``
    when given (else the check's own choice): ``n/a`` when missing or it raises an Int8confError, a ``harness``
    failure when it raises otherwise."""
    if module is None or attr is None:
        module, attr = {cid: (m, a) for cid, m, a in MODEL_CHECKS}[check_id]
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        return not_applicable(check_id, f"{module}.{attr} is not available: {type(e).__name__}: {first_line(e, None)}")
    try:
        res = fn(spec) if device is None else fn(spec, device=device)
    except Int8confError as e:
        return not_applicable(check_id, f"{module}.{attr} could not run: {e}")
    except Exception as e:  # noqa: BLE001 -- the check runs the user's kernel: anything else is a harness failure, reported
        return check_error(check_id, e)
    if not isinstance(res, CheckResult):
        return check_error(check_id, TypeError(f"{attr} returned {type(res).__name__}"))
    return res


def default_cases(
    include_captures: bool = True,
    include_tile_edges: bool = True,
    seeds: Sequence[int] = (0, 1),
    max_capture_layers: Optional[int] = None,
    capture_set=None,
    operands: str = "int8",
    native: bool = False,
    block_sizes: Optional[Sequence[tuple]] = None,
    azp: bool = False,
) -> tuple[list, CaptureReplay]:
    """``(cases, captures)``: synthetic cases per seed, the tile-edge shapes and the case families
    (``include_tile_edges``), the layer captures in both scale modes (when available). ``block_sizes``: a
    block-scaled kernel's declared ``(block_n, block_k)``: the block families of those sizes for ``operands``
    (seed ``seeds[0]``; no captures, tile edges or property examples apply). ``operands="e4m3"``:
    the FP8 families (seed ``seeds[0]``; ``include_tile_edges`` does not apply) and the captures quantized
    to e4m3 in both activation scale modes, and the paper-size layers (``fp8.paper_layer_family``: full size when
    ``native``, the kernel running on a GPU; else their narrow shapes). ``azp``: a kernel taking asymmetric
    activations: no cases (the zero-point plan's C17 builds its own)."""
    if azp:
        return [], CaptureReplay(note=AZP_NO_CAPTURES)
    if block_sizes is not None:
        return _block_cases(operands, tuple(tuple(int(v) for v in s) for s in block_sizes), seeds)
    if operands == FP8:
        return _fp8_cases(include_captures, seeds, max_capture_layers, capture_set, native)

    def build() -> list:
        parts: list[Callable[[], list]] = [functools.partial(synthetic_cases, seeds)]
        parts += [tile_edge_cases, *families.family_builders()] if include_tile_edges else []
        # each part measures what its operands reach (kept with the cases: the coverage table reads it);
        # as many processes as this one's share of the cores (its torch threads: one per xdist worker on 2 cores)
        parts = [functools.partial(_with_reach, part) for part in parts]
        return [c for part in map_forked(parts, torch.get_num_threads()) for c in part]

    cases = cached_cases(f"default_cases/seeds={tuple(seeds)}/tile_edges={include_tile_edges}", build)
    if include_captures:
        cap = capture_cases(capture_set=capture_set, max_layers=max_capture_layers)
    else:
        cap = CaptureReplay(note=f"{NO_CAPTURES} (capture replay not requested)")
    return mark_ownership_probes(cases + list(cap.cases)), cap


def _with_reach(build: Callable[[], list]) -> list:
    """``build()``'s cases with ``meta["reach"]`` set (``conformance.cases.reach.attach_reach``)."""
    return attach_reach(build())


#: what the captures record of a block plan says
BLOCK_NO_CAPTURES = f"{NO_CAPTURES} (the captures are per-token x per-channel; a block-scaled kernel takes none)"


def _block_cases(operands: str, sizes: tuple, seeds: Sequence[int]) -> tuple[list, CaptureReplay]:
    seed = int(seeds[0]) if len(seeds) else 0
    key = f"block_cases/{operands}/sizes={sizes}/seed={seed}"
    cases = cached_cases(key, lambda: block_plan_cases(sizes, operands, seed))
    return mark_ownership_probes(cases), CaptureReplay(note=BLOCK_NO_CAPTURES)


def _fp8_cases(include_captures, seeds, max_capture_layers, capture_set, native=False) -> tuple[list, CaptureReplay]:
    seed = int(seeds[0]) if len(seeds) else 0
    cases = cached_cases(f"fp8_cases/seed={seed}", lambda: fp8_family_cases(seed=seed))
    # full-size layers (hundreds of MB) are built, never cached
    paper = (
        paper_layer_family(seed, True)
        if native
        else cached_cases(f"fp8_paper_layers/seed={seed}", lambda: paper_layer_family(seed))
    )
    cases = cases + paper
    if include_captures:
        cap = fp8_capture_cases(capture_set=capture_set, max_layers=max_capture_layers)
    else:
        cap = CaptureReplay(note=f"{NO_CAPTURES} (capture replay not requested)")
    return mark_ownership_probes(cases + list(cap.cases)), cap


def suite_cases(
    include_captures=True, include_tile_edges=True, capture_dir=None, model_dir=None, **kw
) -> tuple[list, CaptureReplay]:
    """:func:`default_cases` (keywords such as ``operands`` passed on), replaying ``capture_dir``
    (parent model ``model_dir``) when given.

    Raises:
        CaptureError: missing / inconsistent capture (one line).
    """
    cs = load_captures(capture_dir, model_dir) if capture_dir is not None and include_captures else None
    return default_cases(include_captures, include_tile_edges, capture_set=cs, **kw)


def given_cases(cases: Sequence) -> CaptureReplay:
    """The captures record of an explicit case list (its ``capture`` cases counted)."""
    n_cap = sum(1 for c in cases if (c.meta or {}).get("source") == "capture")
    note = f"{n_cap} captured cases given" if n_cap else f"{NO_CAPTURES} (explicit case list)"
    return CaptureReplay(cases=[], available=bool(n_cap), note=note)


#: Largest M * K * N of a case C10 replays in sequence (:func:`mark_ownership_probes`): seven more calls each.
SEQUENCE_MAX_WORK = 1 << 20
#: Upper bounds of the dimension classes whose first case C10 replays in sequence (1, decode, ... , the rest).
SEQUENCE_CLASSES = (1, 16, 128, 1024)


def _dim_class(v: int) -> int:
    return next((i for i, top in enumerate(SEQUENCE_CLASSES) if v <= top), len(SEQUENCE_CLASSES))


def mark_ownership_probes(cases: list) -> list:
    """Set C10's ``meta["ownership_probe"]``: True on the first case of each power-of-two size class of (M, N, K),
    False on the rest; and ``meta["sequence_probe"]`` (its calls in sequence): True on the first probed case up to
    :data:`SEQUENCE_MAX_WORK` of each class of (M, N, K) by :data:`SEQUENCE_CLASSES`, False on the rest. Returns
    ``cases``."""
    seen: set = set()
    replayed: set = set()
    for c in cases:
        key = ((c.m - 1).bit_length(), (c.n - 1).bit_length(), (c.k - 1).bit_length())
        c.meta["ownership_probe"] = key not in seen
        seen.add(key)
        coarse = (_dim_class(c.m), _dim_class(c.n), _dim_class(c.k))
        replay = c.meta["ownership_probe"] and c.m * c.n * c.k <= SEQUENCE_MAX_WORK and coarse not in replayed
        c.meta["sequence_probe"] = replay
        if replay:
            replayed.add(coarse)
    return cases


def load_captures(capture_dir, model_dir=None):
    """``load_capture_set(capture_dir, model_dir=model_dir)``; raises CaptureError (one line)."""
    return model_capture.load_capture_set(capture_dir, model_dir=model_dir)


def cli_capture_message(e: BaseException) -> str:
    """An error line with the Python-API hint for a moved model replaced by ``--model DIR``."""
    return (first_line(e, None) or type(e).__name__).replace(_API_MODEL_HINT, CLI_MODEL_HINT)


CASE, PROPERTY, CHECK, PAIR = "case", "property", "check", "pair"
#: hypothesis examples of the default suite's property test
DEFAULT_EXAMPLES = 25
#: what :func:`reduced_suite` says a run without the tile-edge shapes (``--no-tile-edges``) left out
TILE_EDGES_LEFT_OUT = "the tile-edge shapes and case families"


def reduced_suite(
    include_captures: bool = True,
    include_tile_edges: bool = True,
    examples: int = DEFAULT_EXAMPLES,
    model_checks: bool = True,
    operands: str = "int8",
    max_capture_layers: Optional[int] = None,
    explicit_cases: bool = False,
    serving_checks: bool = True,
    kind: Optional[str] = None,
) -> list[str]:
    """What a run with these options leaves out of the default suite, one phrase each (``[]``: the whole default
    suite). Only what the plan kind has counts (``kind``, a key of :data:`PLANS`; None: the kind of ``operands``,
    per-token or FP8): a plan without tile-edge shapes, captures, a property test, or with the serving or
    model-level checks n/a has none of them to skip. ``explicit_cases``: the caller replaced the default cases;
    ``serving_checks``: False when C13-C15 (:data:`SERVING_CHECKS`) are left out (``--no-serving``)."""
    plan = PLANS[kind or kind_of(operands)]
    out = ["the default cases (an explicit case list replaced them)"] if explicit_cases else []
    if not explicit_cases and include_tile_edges is False and plan.tile_edges:
        out.append(TILE_EDGES_LEFT_OUT)
    if not explicit_cases and plan.captures and not include_captures:
        out.append("layer-capture replay")
    elif not explicit_cases and plan.captures and max_capture_layers is not None:
        out.append(f"captured layers after the first {max_capture_layers}")
    if plan.property_test and examples < DEFAULT_EXAMPLES:
        out.append(
            "the property test"
            if examples == 0
            else f"{DEFAULT_EXAMPLES - examples} of {DEFAULT_EXAMPLES} property examples"
        )
    if not serving_checks and any(cid not in plan.not_applicable for cid in SERVING_CHECKS):
        out.append("the serving checks (" + ", ".join(SERVING_CHECKS) + ")")
    if not model_checks and any(cid not in plan.not_applicable for cid, _, _ in MODEL_CHECKS):
        out.append("the model-level checks (" + ", ".join(cid for cid, _, _ in MODEL_CHECKS) + ")")
    return out


@dataclass(frozen=True)
class Step:
    """One step of the plan; ``name`` is its pytest item name. ``index`` / ``ops``: the fixed
    case (CASE, PAIR); ``check_id``: the kernel-level check (CHECK)."""

    kind: str
    name: str
    index: Optional[int] = None
    ops: object = None
    check_id: Optional[str] = None


def suite_steps(
    cases: Sequence,
    examples: int,
    model_checks: bool,
    against: bool,
    operands: str = "int8",
    serving_checks: bool = True,
    block: bool = False,
    azp: bool = False,
) -> list[Step]:
    """The steps in suite order: every fixed case, the property test (``examples > 0``, where the plan kind has one:
    :func:`kind_of` ``operands``, ``block``, ``azp``), C9, the checks the plan kind adds (:data:`PLANS`: C16, C17),
    C11 (``operands="e4m3"``), C7 / E1 (``model_checks``), C13-C15 (:data:`SERVING_CHECKS`; ``serving_checks``;
    last: on a GPU their worker runs beside everything after the cases), a pairwise step per fixed case
    (``against``)."""
    fp8 = operands == FP8
    plan = PLANS[kind_of(operands, block, azp)]
    steps = [Step(CASE, case_id(ops), i, ops) for i, ops in enumerate(cases)]
    if examples > 0 and plan.property_test:
        steps.append(Step(PROPERTY, "property"))
    cids = (
        ["C9"]
        + [cid for cid, _, _ in plan.checks]
        + (["C11"] if fp8 else [])
        + ([cid for cid, _, _ in MODEL_CHECKS] if model_checks else [])
        + (list(SERVING_CHECKS) if serving_checks else [])
    )
    steps += [Step(CHECK, f"{cid}-{CHECK_NAMES[cid]}", check_id=cid) for cid in cids]
    if against:
        steps += [Step(PAIR, f"pairwise/{case_id(ops)}", i, ops) for i, ops in enumerate(cases)]
    return steps


class Contained(Protocol):
    """Where a suite's kernel calls run when not in this process (``suite.workers.Containment``)."""

    def evaluate(self, index: int) -> CaseResult: ...

    def evaluate_operands(self, spec: KernelSpec, ops: Any, device: Any = None, source: Any = None) -> CaseResult: ...

    def check(self, check_id: str) -> CheckResult: ...

    def notes(self) -> list[str]: ...


def afforded_cases(spec, device: Optional[str], cases: list, large: bool = True) -> tuple[list, list]:
    """``(kept, left out)`` of ``cases`` for ``spec`` on ``device``: where a kernel declaring CUDA does not run on
    it, the cases marked ``native_only`` (``conformance.cases.covering.CPU_MACS``,
    ``conformance.cases.regimes.CPU_OUTPUTS``) are left out (:func:`large_cases_left_out` names them in the
    reduced suite); a CPU-only kernel (``spec.devices`` without ``cuda``) runs natively here and keeps them;
    ``large`` False (``--no-large-cases``) leaves them out everywhere. Every front door (check, the plugin, the
    gate) runs the kept ones, so a stored check report and a gate run hold the same case set."""
    native_here = cuda_device(spec, device) is not None or "cuda" not in tuple(getattr(spec, "devices", ()) or ())
    if large and native_here:
        return list(cases), []
    native = [bool((c.meta or {}).get("native_only")) for c in cases]
    return [c for c, n in zip(cases, native) if not n], [c for c, n in zip(cases, native) if n]


def large_cases_left_out(n: int, asked: bool = False) -> str:
    """The reduced-suite phrase of ``n`` large cases :func:`afforded_cases` left out (``asked``: by
    ``--no-large-cases``, else because a GPU kernel runs on the CPU here)."""
    why = "--no-large-cases" if asked else "native only: they run where the kernel runs on a GPU"
    return f"{n} large case{'' if n == 1 else 's'} ({why})"


def native_regime(case) -> str:
    """The regime a ``native_only`` case stands for: a covering row's ``M <m> / N <n> / K <k>`` regimes, else its
    output size ``M*N <m*n> (<M> x <N>)``."""
    attrs = (case.meta or {}).get("attributes")
    if attrs:
        return "M {m} / N {n} / K {k}".format(**attrs)
    return f"M*N {case.m * case.n} ({case.m} x {case.n})"


@dataclass(eq=False)  # compared by identity (the plugin looks its kernels up)
class SuiteState:
    """One kernel's suite: its cases and what its steps produced so far. ``results``: fixed-case
    index -> CaseResult; ``model``: check id -> kernel-level CheckResult; ``ref_device``: where
    every fixed case's references are computed (None: :func:`reference_device` per case; a
    device, ``"cpu"`` included, takes the device path for every case); ``contained``: where the
    kernel calls run (``suite.workers.Containment``: a child process per crash), None = here;
    ``skipped``: what of the default suite this run leaves out (:func:`reduced_suite`); ``serving_checks``:
    False when the run leaves C13-C15 out (``--no-serving``); ``large_cases``: False with ``--no-large-cases``."""

    spec: KernelSpec
    cases: list
    captures: CaptureReplay
    against: Optional[KernelSpec] = None
    device: Optional[str] = None
    ref_device: Optional[str] = None
    t0: float = field(default_factory=time.perf_counter)
    results: dict = field(default_factory=dict)
    prop_cases: list = field(default_factory=list)
    property: Optional[dict] = None
    model: dict = field(default_factory=dict)
    warm: Optional[dict] = None
    contained: Optional[Contained] = None
    skipped: list = field(default_factory=list)
    not_afforded: list = field(default_factory=list)
    serving_checks: bool = True
    large_cases: bool = True

    def __post_init__(self) -> None:
        """Leave out the cases marked ``native_only`` where :func:`afforded_cases` does (``large_cases`` False:
        everywhere): ``not_afforded`` names them and their regimes, ``skipped`` says so."""
        self.cases, self.not_afforded = afforded_cases(self.spec, self.device, self.cases, self.large_cases)
        if self.not_afforded:
            self.skipped = [*self.skipped, large_cases_left_out(len(self.not_afforded), not self.large_cases)]

    def notes(self) -> list:
        """One note naming the regimes of the cases left out on the CPU (none when every case ran)."""
        if not self.not_afforded:
            return []
        regimes = sorted({native_regime(c) for c in self.not_afforded})
        if not self.large_cases:
            return [f"{len(self.not_afforded)} large cases left out (--no-large-cases): regimes {'; '.join(regimes)}"]
        return [
            f"{len(self.not_afforded)} large cases not afforded on the CPU (covering rows past M*K*N "
            f"{COVERING_CPU_MACS}, outputs past M*N {CPU_OUTPUTS}; they run where the kernel runs on a GPU; a "
            f"CPU-only kernel runs them here): "
            f"regimes {'; '.join(regimes)}"
        ]

    def warm_up(self, say: Callable[[str], None] = lambda s: None, examples: int = 0) -> Optional[dict]:
        """Compile a ``warm_up`` kernel for every fixed case's layout, C9's, and the layouts of the property
        test's ``examples`` (when the plan has that step) in parallel before the cases run (CUDA only, once;
        ``conformance.suite.warmup``); the warm-up record, or None when not warmed."""
        dev = cuda_device(self.spec, self.device)
        if self.warm is None and self.spec.warm_up and dev is not None and self.cases:
            planned = examples > 0 and PLANS[self.spec.kind].property_test
            extra = property_operands(examples) if planned else []
            self.warm = warm_up(self.spec, self.cases, dev, say=say, extra=extra)
        return self.warm

    def evaluate(self, index: int) -> CaseResult:
        """The fixed case ``index`` through every per-case check (once; a PAIR step reuses it). On a
        reference device the operands are moved there once (``GemmOperands.to``: layouts kept) and
        the case's device questions are read back together (a ``reference.memo`` scope); the
        CaseResult is the one the CPU path gives."""
        if index not in self.results:
            if self.contained is not None:
                self.results[index] = self.contained.evaluate(index)
            else:
                self.results[index] = evaluate_fixed(
                    self.spec, self.cases[index], self.device, self.against, self.ref_device
                )
        return self.results[index]

    def run_property(self, examples: int, each: Callable = lambda cr: None) -> dict:
        """The property test; its examples go to ``prop_cases`` as they run (``each`` sees them too)."""
        self.prop_cases = []

        def keep(cr: CaseResult) -> None:
            self.prop_cases.append(cr)
            each(cr)

        evaluate = None if self.contained is None else self.contained.evaluate_operands
        self.property = run_property_test(self.spec, keep, max_examples=examples, device=self.device, evaluate=evaluate)
        return self.property

    def steps(self, examples: int, model_checks: bool, against: bool) -> list[Step]:
        """:func:`suite_steps` of this kernel's cases and operands."""
        spec = self.spec
        return suite_steps(
            self.cases, examples, model_checks, against, spec.operands, self.serving_checks, spec.is_block, spec.is_azp
        )

    def run_check(self, check_id: str) -> CheckResult:
        """:func:`run_kernel_check` of this kernel (in ``contained`` when set); kept in ``model``."""
        if self.contained is not None:
            r = self.contained.check(check_id)
        else:
            r = run_kernel_check(check_id, self.spec, self.cases, self.device)
        self.model[check_id] = r
        return r

    def case_results(self) -> list:
        """The fixed cases' results in case order, then the property examples."""
        return [self.results[i] for i in sorted(self.results)] + list(self.prop_cases)

    def missing(self, examples: int, model_checks: bool, why: str) -> list[str]:
        """What of this kernel's plan has no result, one phrase each, for ``reduced_suite`` (``why``: the
        phrase's tail, :data:`NOT_SELECTED` or :data:`NOT_REACHED`): ``N of M fixed cases <why>``, ``the property
        test <why>``, ``C9 batch_invariance <why>``."""
        out = []
        if len(self.results) < len(self.cases):
            out.append(f"{len(self.cases) - len(self.results)} of {len(self.cases)} fixed cases {why}")
        for step in self.steps(examples, model_checks, False):
            if step.kind == PROPERTY and self.property is None:
                out.append(f"the property test {why}")
            elif step.kind == CHECK and step.check_id is not None and step.check_id not in self.model:
                out.append(f"{step.check_id} {CHECK_NAMES[step.check_id]} {why}")
        return out


#: :meth:`SuiteState.missing`'s tail for a run that finished without some steps (``pytest -k`` / ``-m``, ``-x``)
NOT_SELECTED = "(not selected or not reached)"
#: ... and for a stopped run (Ctrl-C, SIGTERM)
NOT_REACHED = "not reached (interrupted)"
