"""What a worker computes for one cell (:mod:`conformance.sweep.cells`).

Layer cell: ``ops = faults.prepare_case(capture ops, fault, coverage, seed)``
(the F6 / F7 operand construction; identity for the other faults), the
faulty kernel ``faults.inject(kernel, fault, coverage, seed)``, every
per-case check through ``conformance.suite.evaluate.evaluate_case`` (C1-C6, C8),
the fault's ground truth ``faults.ground_truth(...)``, and the error
*direction* of the output (how many elements moved toward zero / away from
zero against the declared-contract reference, the input of the fault
signatures in :mod:`conformance.sweep.scoring`).

Model cell: C7 token_flip (teacher-forced replay through the model with the
faulty kernel in every linear layer, per scale mode ``own`` and
``pow2-nearest``, the rule the captures use) and E1 engine_hash (detllm's
integer engine with the faulty kernel's ``int_mm`` entry; computed once,
stored under both scale modes). F6 / F7 are injected as for
``check --inject`` (their wrapper passes through: see :func:`_inject_model`).

Everything a worker needs travels as plain data (:class:`SweepTask`); caches
are per process, so a Dask worker or a pool process loads the capture set and
the kernel once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

import torch

from conformance.sweep.cells import Cell, SweepSpec
from conformance.sweep.store import CellRows
from reference.errors import first_line

#: Evidence keys kept for a passing / n/a check (the failing ones keep all).
_KEEP = (
    "max_ulp",
    "n_differ",
    "n_over_tol",
    "ulp_histogram",
    "premise_violations",
    "observed_max_abs",
    "exact_max_abs",
    "max_abs",
    "bound_tight_max",
    "acc_source",
    "mismatched",
    "reason",
    "n_at_or_over",
    "flips",
    "flips_above_threshold",
    "total_positions",
    "max_flip_margin",
    "ppl_reference",
    "ppl_kernel",
)
#: Evidence keys dropped everywhere (large or non-deterministic).
_DROP = ("flip_list", "kernel_s", "reference_s", "traceback")


@dataclass(frozen=True)
class SweepTask:
    """One cell plus the sweep it belongs to (picklable)."""

    cell: Cell
    spec: SweepSpec
    device: Optional[str] = None


def worker_id() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


@functools.lru_cache(maxsize=4)
def _kernel(name: str):
    from conformance.kernels.registry import get_kernel

    return get_kernel(name)


def kernel_spec(name: str):
    """The sweep's KernelSpec for kernel ``name`` (loaded once per process)."""
    return _kernel(name)


@functools.lru_cache(maxsize=2)
def _capture_set(capture_dir: str, model_dir: str):
    from reference.model.capture import load_capture_set

    # digests were verified once by the sweep's main process
    return load_capture_set(capture_dir, model_dir=model_dir or None, verify=False)


def _checkpoint_tensor(ck_dir: str, key: str) -> torch.Tensor:
    """One tensor of a (single-file or sharded) safetensors checkpoint,
    read alone (``safetensors.safe_open``: only its bytes are read)."""
    from pathlib import Path

    from safetensors import safe_open

    from reference.model.checkpoint import INDEX_FILE, SINGLE_FILE

    d = Path(ck_dir)
    f = d / SINGLE_FILE
    if not f.is_file():
        f = d / json.loads((d / INDEX_FILE).read_text())["weight_map"][key]
    with safe_open(str(f), framework="pt", device="cpu") as fh:
        return fh.get_tensor(key)


def _layer_ops_direct(spec: SweepSpec, scale_mode: str, layer: str):
    """The layer's GemmOperands read from the checkpoint directories the
    sweep's main process resolved (``SweepSpec.checkpoint_dirs``): the
    layer's weight and scale only, checked against the capture manifest's
    digests of exactly these tensors -- what ``iter_layer_operands`` checks,
    without loading the parent model and both whole checkpoints into every
    worker (gigabytes per process at paper scale). None when the spec has
    no directory for this scale mode."""
    from reference.model.capture import CaptureError
    from reference.operands import GemmOperands, tensor_digest

    kind = "own" if scale_mode == "own" else "pow2-nearest"
    ck_dir = dict(spec.checkpoint_dirs).get(kind)
    if not ck_dir:
        return None
    cs = _capture_set(spec.capture_dir, spec.model_dir)
    entry = cs.manifest["layers"][layer]
    t = cs.load_layer(layer)
    b = _checkpoint_tensor(ck_dir, f"{layer}.weight").contiguous()
    sb = _checkpoint_tensor(ck_dir, f"{layer}.weight_scale").reshape(-1).to(torch.float32).contiguous()
    ref = entry["weights"][kind]
    if tensor_digest(b) != ref["b"] or tensor_digest(sb) != ref["scale_b"]:
        raise CaptureError(f"{ck_dir}: layer {layer}: {kind} weight does not match the captured digests")
    try:
        bias = _checkpoint_tensor(ck_dir, f"{layer}.bias").to(torch.bfloat16)
    except Exception:  # noqa: BLE001 -- Qwen3 linears have no bias
        bias = None
    return GemmOperands(
        a=t["a"],
        b=b,
        scale_a=t["scale_a"],
        scale_b=sb,
        bias=bias,
        out_dtype=torch.bfloat16,
        name=layer,
        scale_mode=scale_mode,
        meta={
            "block": entry["block"],
            "proj": entry["proj"],
            "M": entry["M"],
            "K": entry["K"],
            "N": entry["N"],
            "kind": kind,
            "rule": "nearest" if scale_mode == "pow2" else None,
            "model_digest": cs.model_digest,
            "capture_dir": str(cs.dir),
            "acc_absmax": entry["acc_absmax"][kind],
            "acc_ge_2p24": entry["acc_ge_2p24"][kind],
            "source": "capture",
        },
    )


@functools.lru_cache(maxsize=8)
def _layer_ops(capture_dir: str, model_dir: str, scale_mode: str, layer: str):
    """GemmOperands of one layer in one scale mode (pow2 rule ``nearest``),
    built the way ``reference.model.capture.iter_layer_operands`` builds them
    but for this layer only, so a worker holds a few layers, not the model."""
    from reference.model.capture import iter_layer_operands

    cs = _capture_set(capture_dir, model_dir)
    sub = type(cs)(
        dir=cs.dir,
        manifest=dict(cs.manifest, layers={layer: cs.manifest["layers"][layer]}),
        model_dir=cs.model_dir,
        cache=cs.cache,
        external=cs.external,
        _checkpoints=cs._checkpoints,
    )
    return next(iter(iter_layer_operands(sub, scale_mode)))


def capture_ops(spec: SweepSpec, layer: str, scale_mode: str):
    """A fresh copy of the capture operands of ``layer`` in ``scale_mode``
    (``copy_keep_layout``: same layout and bits, and inside a
    ``reference.memo`` scope a digest already taken of the source -- the
    weight digests checked against the capture manifest -- carries over)."""
    from reference.operands import GemmOperands, copy_keep_layout

    o = None
    if spec.checkpoint_dirs:
        o = _layer_ops_direct(spec, scale_mode, layer)
    if o is None:
        o = _layer_ops(spec.capture_dir, spec.model_dir, scale_mode, layer)
    return GemmOperands(
        a=copy_keep_layout(o.a),
        b=copy_keep_layout(o.b),
        scale_a=copy_keep_layout(o.scale_a),
        scale_b=copy_keep_layout(o.scale_b),
        bias=copy_keep_layout(o.bias),
        out_dtype=o.out_dtype,
        name=o.name,
        scale_mode=scale_mode,
        meta=dict(o.meta, source="capture"),
    )


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


def row_of(scale_mode: str, r, keep_all: bool = False) -> dict:
    """One store row from a CheckResult (evidence trimmed as in reports)."""
    ev = dict(r.evidence or {})
    if r.verdict != "fail" and not keep_all:
        ev = {k: v for k, v in ev.items() if k in _KEEP}
    for k in _DROP:
        ev.pop(k, None)
    if "kernel_manifest" in ev and isinstance(ev["kernel_manifest"], dict):
        ev["kernel_manifest"] = {
            k: v for k, v in ev["kernel_manifest"].items() if k in ("name", "path", "device", "source_digest")
        }
    return {
        "scale_mode": scale_mode,
        "check_id": r.check_id,
        "verdict": r.verdict,
        "failure_kind": (ev.get("failure_kind") or "kernel") if r.verdict == "fail" else None,
        "summary": r.summary,
        "evidence": _jsonable(ev),
    }


def direction_counts(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """How the differing elements of ``out`` sit against ``ref``:
    :func:`ask_direction_counts` read now (args / returns as there)."""
    return ask_direction_counts(out, ref).get()


def ask_direction_counts(out: torch.Tensor, ref: torch.Tensor):
    """How the differing elements of ``out`` sit against ``ref``, asked.

    Args:
        out, ref: same-shape float tensors (bf16 / fp16 / fp32); counted on
            ref's device (``out`` is moved there).

    Returns:
        ``reference.readback.Deferred`` of ``{"n_differ", "toward_zero",
        "away_from_zero", "sign_change"}``: counts over elements whose bits
        differ (a NaN against anything has no sign in common with it and
        counts as a sign change). The four counts are asked together
        (element-wise masks, no boolean indexing, whose result size would be
        a read-back of its own) and memoized on the two tensors inside a
        ``reference.memo`` scope, so the sweep can ask them before its
        checks read.
    """
    from reference import memo, readback
    from reference.bits import bits_of

    out = memo.moved(out, ref.device)

    def ask():
        o, r = out.to(torch.float64).reshape(-1), ref.to(torch.float64).reshape(-1)
        differ = bits_of(out).reshape(-1) != bits_of(ref).reshape(-1)
        moved = differ & (torch.sign(o) == torch.sign(r))  # differs, same sign
        oa, ra = o.abs(), r.abs()
        parts = [differ.sum(), (moved & (oa < ra)).sum(), (moved & (oa > ra)).sum(), (differ & ~moved).sum()]
        return readback.ask(
            parts,
            lambda v: {
                "n_differ": int(v[0]),
                "toward_zero": int(v[1]),
                "away_from_zero": int(v[2]),
                "sign_change": int(v[3]),
            },
        )

    return memo.cached("direction", (out, ref), ask)


class LayerContext:
    """What the cells of one layer (one scale mode) share inside a worker.

    The capture operands are loaded once and, when the kernel runs on a GPU,
    moved to it once (``GemmOperands.to``; the runner then clones them on
    the device for each call instead of copying them from the host); the
    fault-free kernel run is made once (ground truth of F1-F5, F8, F9).
    Everything else that repeats across the cells -- operand digests, the
    exact accumulator and the ``|a| @ |b|.T`` bound, on the operands' device
    -- is memoized by ``reference.memo`` inside the batch's scope.

    Attributes:
        spec: the SweepSpec; device: the kernel device as requested (None = auto).
        ref_device: where operands and references live: the device the
            kernel runs on when it is CUDA, else the CPU.
    """

    def __init__(self, spec: SweepSpec, device: Optional[str] = None):
        from conformance.kernels.runner import cuda_device

        self.spec, self.device = spec, device
        self.ref_device = cuda_device(_kernel(spec.kernel), device) or "cpu"
        self._ops: dict = {}
        self._clean: dict = {}

    def ops(self, layer: str, scale_mode: str):
        """The layer's capture operands in ``scale_mode`` on :attr:`ref_device`."""
        key = (layer, scale_mode)
        if key not in self._ops:
            base = capture_ops(self.spec, layer, scale_mode)
            self._ops[key] = base if self.ref_device == "cpu" else base.to(self.ref_device)
        return self._ops[key]

    def clean_run(self, layer: str, scale_mode: str):
        """The clean kernel's KernelRun on :meth:`ops` (made once)."""
        from conformance.kernels.runner import run_kernel

        key = (layer, scale_mode)
        if key not in self._clean:
            self._clean[key] = run_kernel(
                _kernel(self.spec.kernel), self.ops(layer, scale_mode), device=self.device, keep_on_device=True
            )
        return self._clean[key]


def run_layer_cell(task: SweepTask, ctx: Optional[LayerContext] = None) -> CellRows:
    """Evaluate one layer cell (module docstring).

    The faulty kernel runs once; that run feeds the checks
    (``CaseEvaluation(run=...)``), the ground truth (``faulty_run=``) and the
    error direction. With ``ctx`` (a batch of cells of one layer,
    :func:`run_layer_batch`) operands and the clean run come from it.

    Device read-backs (``reference.readback``; one host-device sync each on
    a GPU): every question of the cell is asked before any is read, in two
    rounds. Round one: the runs' in-place / NaN verdicts, every check's
    counts and maxima, the ground truth's counts. Round two, only when an
    output differs from a reference: the failing comparisons' worst
    elements and the error direction. Inside the batch's ``reference.memo``
    scope the checks then find their answers already read.

    A cell always runs inside a ``reference.memo`` scope (its own when no
    batch opened one), so the F6 / F7 operands it builds carry their recipe
    digests (``reference.operands.derived_digest``) and its stored
    ``case_digest`` does not depend on how it was called.
    """
    from reference import memo

    with memo.scope():
        return _run_layer_cell(task, ctx)


def _run_layer_cell(task: SweepTask, ctx: Optional[LayerContext]) -> CellRows:
    """:func:`run_layer_cell` inside its memo scope."""
    from conformance.checks.output_bits import reference_output
    from conformance.kernels.runner import start_kernel
    from conformance.suite.evaluate import CaseEvaluation
    from faults import inject, prepare_case
    from faults.spec import PRECONDITION_FAULTS
    from faults.truth import ask_ground_truth

    t0 = time.perf_counter()
    c, spec = task.cell, task.spec
    base = ctx.ops(c.layer, c.scale_mode) if ctx is not None else capture_ops(spec, c.layer, c.scale_mode)
    kernel = _kernel(spec.kernel)
    ops = prepare_case(base, c.fault, c.coverage, c.seed, kernel.constraints)
    faulty = inject(kernel, c.fault, c.coverage, c.seed)
    clean = None
    if ctx is not None and c.fault not in PRECONDITION_FAULTS:
        clean = ctx.clean_run(c.layer, c.scale_mode)  # before any question: made once per batch
    # outputs stay on the kernel's device, where the batch's references live
    launch = start_kernel(faulty, ops, device=task.device, keep_on_device=True)
    case = CaseEvaluation(faulty, ops, device=task.device, run=launch, keep_on_device=True)
    gt_asked = ask_ground_truth(
        kernel, c.fault, c.coverage, c.seed, ops, device=task.device, clean_run=clean, faulty_run=launch
    )
    case.settle()  # round one read
    frun = case.run
    # error direction against the declared-contract reference (signature
    # input), only where C8 fails: asked now when C8 may fail, so that it
    # comes back with the failing checks' evidence (round two)
    if frun.output is not None and case.output_differs():
        ask_direction_counts(frun.output, reference_output(ops, kernel.contract))
    res = case.result(source="sweep", coverage=False, output_digest=False)  # not stored: no per-cell hash of the output
    gt = gt_asked.get().to_dict()
    if res.checks["C8"].verdict == "fail" and frun.output is not None:
        gt["direction_vs_declared"] = direction_counts(frun.output, reference_output(ops, kernel.contract))
    rows = [row_of(c.scale_mode, res.checks[cid]) for cid in res.checks]
    digest = hashlib.sha256(json.dumps(ops.digests(), sort_keys=True).encode()).hexdigest()
    return CellRows(
        cell=c,
        rows=rows,
        ground_truth=_jsonable(gt),
        case_digest=digest,
        elapsed_s=time.perf_counter() - t0,
        worker=worker_id(),
    )


def run_layer_batch(tasks) -> list:
    """Evaluate layer cells that share a layer and scale mode, in one worker
    call (:class:`LayerContext`, ``reference.memo.scope``); returns their
    CellRows in order. A batch is the executors' unit of work: a killed sweep
    loses at most the batches in flight, never a stored cell."""
    from reference import memo

    tasks = list(tasks)
    if not tasks:
        return []
    _worker_env()
    ctx = LayerContext(tasks[0].spec, tasks[0].device)
    out = []
    with memo.scope():
        for t in tasks:
            out.append(run_layer_cell(t, ctx))
    return out


def _inject_model(kernel, fault: str, coverage: str, seed: int):
    """The faulty kernel for model-level checks: ``faults.inject`` as
    ``check --inject`` uses it. For F6 / F7 that wrapper passes through (the
    fault is an operand construction, which a model forward never builds);
    realising it inside the model (``prepared=False``: K extended by up to
    ~132k saturated columns in every call) measured 1,556 s per F6 model cell
    on the 2-core machine with the wrapper of that time (before faults commit
    d0caf7b made it run only the selected block); not re-measured since."""
    from faults import inject

    return inject(kernel, fault, coverage, seed)


def run_model_cell(task: SweepTask) -> CellRows:
    """Evaluate one model cell: C7 per scale mode, E1 once (module docstring)."""
    from conformance.checks.token_flip import check_token_flip

    t0 = time.perf_counter()
    c, spec = task.cell, task.spec
    kernel = _kernel(spec.kernel)
    faulty = _inject_model(kernel, c.fault, c.coverage, c.seed)
    from faults.spec import PRECONDITION_FAULTS

    into = (
        "none: F6/F7 are operand constructions of a layer case, which a model forward never "
        "builds; the wrapper passes every call through"
        if c.fault in PRECONDITION_FAULTS
        else "every linear layer"
    )
    rows, gt = [], {"model_level": True, "injected_into": into, "kernel": faulty.name}
    mdir = spec.model_dir or None
    for mode, c7_mode in (("own", "own"), ("pow2", "pow2-nearest")):
        try:
            r = check_token_flip(
                faulty,
                model_dir=mdir,
                windows=int(spec.c7["windows"]),
                window_len=int(spec.c7["window_len"]),
                scale_mode=c7_mode,
                device=task.device,
            )
        except Exception as e:  # noqa: BLE001 -- a harness error is a row, not a crash
            from conformance.suite.evaluate import check_error

            r = check_error("C7", e)
        rows.append(row_of(mode, r))
    t1 = time.perf_counter()
    e1 = _engine_hash(faulty, mdir, int(spec.c7.get("e1_prompts", 8)), int(spec.c7.get("e1_tokens", 8)))
    gt["e1_s"] = round(time.perf_counter() - t1, 3)
    for mode in ("own", "pow2"):
        row = row_of(mode, e1)
        row["evidence"]["shared_across_scale_modes"] = True
        rows.append(row)
    gt.pop("e1_s")  # timing is not part of the deterministic record
    return CellRows(
        cell=c, rows=rows, ground_truth=gt, case_digest="", elapsed_s=time.perf_counter() - t0, worker=worker_id()
    )


@functools.lru_cache(maxsize=2)
def _engine_setup(model_dir: Optional[str], n_prompts: int):
    from detllm.oracle import default_setup

    return default_setup(model_dir, n_prompts)


def _engine_hash(faulty, model_dir: Optional[str], n_prompts: int, tokens: int):
    """E1 (``conformance.checks.engine_hash``) with ``n_prompts`` corpus
    prompts x ``tokens`` greedy tokens on ``model_dir`` (None: the default model)."""
    from conformance.checks.engine_hash import check_engine_hash
    from conformance.checks.result import not_applicable

    try:
        art, prompts = _engine_setup(model_dir, n_prompts)
        return check_engine_hash(faulty, artifact=art, prompts=prompts, max_new_tokens=tokens)
    except Exception as e:  # noqa: BLE001 -- no engine for this model: n/a with the reason
        return not_applicable(
            "E1", f"engine hash not available for {model_dir}: {type(e).__name__}: {first_line(e, None)}"
        )


def _worker_env() -> None:
    """Per-call worker settings: torch threads (``INT8CONF_SWEEP_THREADS``,
    default 1: one worker per core) and, unless the user chose otherwise,
    no per-shape timing in the Triton built-in (``INT8CONF_TRITON_AUTOTUNE=0``):
    a sweep calls each shape a few dozen times, every F6 / F7 case has a K
    of its own (the tuner would time candidates for each), and the bits do
    not depend on the configuration (``conformance.kernels.builtin_triton``);
    third-party import notices silenced (``conformance.runtime.import_noise``)."""
    from conformance.runtime.import_noise import silence_import_noise

    silence_import_noise()
    torch.set_num_threads(max(1, int(os.environ.get("INT8CONF_SWEEP_THREADS", "1"))))
    os.environ.setdefault("INT8CONF_TRITON_AUTOTUNE", "0")


def run_task(task: SweepTask) -> CellRows:
    """Entry point for one cell: its rows out (a layer cell without batch context)."""
    _worker_env()
    return run_model_cell(task) if task.cell.is_model else run_layer_cell(task)


def run_unit(unit) -> list:
    """Entry point for every executor: a unit of :func:`batches` (a tuple of
    SweepTasks: model cells, or layer cells of one layer and scale mode; a
    single SweepTask is accepted too) in, a list of CellRows out."""
    if isinstance(unit, SweepTask):
        unit = (unit,)
    if unit and unit[0].cell.is_model:
        return [run_task(t) for t in unit]
    return run_layer_batch(unit)


def batches(tasks, model_units: int = 0, max_model_cells: int = 3) -> list:
    """Units of work for the executors, each a tuple of SweepTasks.

    Model cells come first (the slowest), dealt round-robin into
    ``model_units`` units (0: one unit per model cell), but never more than
    ``max_model_cells`` cells in one unit: a unit's rows are stored when the
    whole unit finishes, so this bounds what an interrupted sweep recomputes.
    A process pays the model checks' set-up once (transformers import, model
    load, reference replays, the integer engine: ~40 s of one 2-core
    machine's CPU), so fewer model units than workers means fewer processes
    pay it; the pool executor asks for half the workers. Then the layer
    cells, one unit per (layer, scale mode), in the tasks' order.
    """
    model = [t for t in tasks if t.cell.is_model]
    k = len(model) if model_units <= 0 else min(model_units, len(model))
    if model:
        k = max(k, -(-len(model) // max(1, max_model_cells)))
    units = [tuple(model[i::k]) for i in range(k)] if model else []
    groups: dict = {}
    for t in tasks:
        if not t.cell.is_model:
            groups.setdefault((t.cell.layer, t.cell.scale_mode), []).append(t)
    return units + [tuple(g) for g in groups.values()]
