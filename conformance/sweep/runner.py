"""What a worker computes for one cell (:mod:`conformance.sweep.cells`). Layer cell: the
injected kernel on the prepared capture operands (an e4m3 kernel: the captured layer
quantized to e4m3 in the cell's activation scale mode; a block-scaled kernel: the layer
block-quantized, ``iter_layer_operands_block``, at its first declared block size), every
per-case check of its plan (C1-C6, C8; C12 for e4m3), the ground truth and, where C8 fails,
the error direction against the declared contract (block accumulation) and, for a block-scaled
kernel, the block fault classes' emulations tested on the output (stored on the C8 row). Model cell: C7 per
scale mode and E1 once, with the fault in every linear layer. Kernel cell (e4m3 / block):
C11 / C16 on its probe operands, with the fault's ground truth there.
Everything travels as plain data (:class:`SweepTask`); caches are per process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError, safe_open

from conformance.checks.block_accumulation import check_block_accumulation
from conformance.checks.block_accumulation import probe_case as block_probe_case
from conformance.checks.engine_hash import check_engine_hash
from conformance.checks.fp8_accumulator import K_PROBE, N_PROBE, check_fp8_accumulator, probe_operands, probes
from conformance.checks.output_bits import run_device
from conformance.checks.result import SWEEP_KEPT_EVIDENCE, Verdict, not_applicable
from conformance.checks.token_flip import check_token_flip
from conformance.kernels.declared import declared_reference
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import cuda_device, run_kernel, start_kernel
from conformance.kernels.spec import enter_conformance_run
from conformance.runtime.import_noise import silence_import_noise
from conformance.suite.evaluate import CaseEvaluation, check_error
from conformance.suite.signatures import EXPLANATION_KEY, explain_block_output, stored_explanation
from conformance.suite.warmup import case_layout
from conformance.sweep.cells import SCALE_MODES_FOR, Cell, SweepSpec
from conformance.sweep.store import CellRows
from faults import inject_injection, prepare_injection
from faults.mask import case_key, prefetch_element_masks
from faults.precondition import extended_widths
from faults.spec import PRECONDITION_FAULTS
from faults.truth import ask_ground_truth
from predictions.matrix import matrix_domain
from reference import memo, readback
from reference.bits import bits_of
from reference.errors import first_line
from reference.model.capture import (
    CaptureError,
    iter_layer_operands,
    iter_layer_operands_block,
    iter_layer_operands_fp8,
    load_capture_set,
)
from reference.model.checkpoint import INDEX_FILE, SINGLE_FILE
from reference.operands import GemmOperands, copy_keep_layout, tensor_digest

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
def kernel_spec(name: str):
    """The sweep's KernelSpec for kernel ``name`` (loaded once per process)."""
    return get_kernel(name)


@functools.lru_cache(maxsize=2)
def _capture_set(capture_dir: str, model_dir: str):
    # digests were verified once by the sweep's main process
    return load_capture_set(capture_dir, model_dir=model_dir or None, verify=False)


def _checkpoint_tensor(ck_dir: str, key: str) -> torch.Tensor:
    """One tensor of a (single-file or sharded) safetensors checkpoint, read alone."""
    d = Path(ck_dir)
    f = d / SINGLE_FILE
    if not f.is_file():
        f = d / json.loads((d / INDEX_FILE).read_text())["weight_map"][key]
    with safe_open(str(f), framework="pt", device="cpu") as fh:
        return fh.get_tensor(key)


def _layer_ops_direct(spec: SweepSpec, scale_mode: str, layer: str):
    """The layer's GemmOperands with weight and scale read alone from the checkpoint the
    main process resolved (``SweepSpec.checkpoint_dirs``), checked against the capture
    manifest's digests; no worker loads whole checkpoints. None without a directory."""
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
    except (SafetensorError, KeyError):  # no such tensor (single file / shard index): Qwen3 linears have no bias
        bias = None
    meta = {k: entry[k] for k in ("block", "proj", "M", "K", "N")}
    meta.update(kind=kind, rule="nearest" if scale_mode == "pow2" else None, model_digest=cs.model_digest)
    meta.update(capture_dir=str(cs.dir), acc_absmax=entry["acc_absmax"][kind], acc_ge_2p24=entry["acc_ge_2p24"][kind])
    meta["source"] = "capture"
    return GemmOperands(t["a"], b, t["scale_a"], sb, bias, torch.bfloat16, layer, scale_mode, meta)


@functools.lru_cache(maxsize=8)
def _layer_ops(capture_dir: str, model_dir: str, scale_mode: str, layer: str):
    """GemmOperands of one layer (pow2 rule ``nearest``) as ``iter_layer_operands`` builds
    them, for this layer only."""
    cs = _capture_set(capture_dir, model_dir)
    sub = replace(cs, manifest=dict(cs.manifest, layers={layer: cs.manifest["layers"][layer]}))
    return next(iter(iter_layer_operands(sub, scale_mode)))


@functools.lru_cache(maxsize=2)
def _fp8_layer_ops(capture_dir: str, model_dir: str, activations: str) -> dict:
    """Every layer's e4m3 GemmOperands (``iter_layer_operands_fp8``: the parent model's
    weights quantized once per process and activation scale mode), by layer name."""
    cs = _capture_set(capture_dir, model_dir)
    return {o.name: o for o in iter_layer_operands_fp8(cs, activations)}


@functools.lru_cache(maxsize=2)
def _block_layer_ops(capture_dir: str, model_dir: str, operands: str, scales: str, block: tuple) -> dict:
    """Every layer's block-scaled GemmOperands (``iter_layer_operands_block``, once per process,
    operand dtype, block scale mode and block size), by layer name."""
    cs = _capture_set(capture_dir, model_dir)
    return {o.name: o for o in iter_layer_operands_block(cs, operands, scales, block)}


def capture_ops(spec: SweepSpec, layer: str, scale_mode: str):
    """A fresh copy (``copy_keep_layout``: same layout, bits and known digests) of the
    capture operands of ``layer`` in ``scale_mode`` (``per_token`` / ``per_tensor``: quantized
    to e4m3 with that activation scale; ``group`` / ``group_ue8m0``: block-quantized in the
    kernel's operand dtype at its first declared block size)."""
    if scale_mode in SCALE_MODES_FOR["block"]:
        kernel = kernel_spec(spec.kernel)
        if kernel.block is None:
            raise CaptureError(
                f"scale mode {scale_mode!r} is a block scale mode; kernel {kernel.name!r} is not block-scaled"
            )
        o = _block_layer_ops(spec.capture_dir, spec.model_dir, kernel.operands, scale_mode, kernel.block.sizes[0])[
            layer
        ]
    elif scale_mode in SCALE_MODES_FOR["e4m3"]:
        o = _fp8_layer_ops(spec.capture_dir, spec.model_dir, scale_mode)[layer]
    else:
        o = _layer_ops_direct(spec, scale_mode, layer) if spec.checkpoint_dirs else None
    if o is None:
        o = _layer_ops(spec.capture_dir, spec.model_dir, scale_mode, layer)
    copies = {k: copy_keep_layout(getattr(o, k)) for k in ("a", "b", "scale_a", "scale_b", "bias")}
    return replace(o, **copies, scale_mode=scale_mode, meta=dict(o.meta, source="capture"))


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


def row_of(scale_mode: str, r, keep_all: bool = False) -> dict:
    """One store row from a CheckResult (a passing / n/a check keeps ``SWEEP_KEPT_EVIDENCE``)."""
    ev = dict(r.evidence or {})
    if r.verdict != Verdict.FAIL and not keep_all:
        ev = {k: v for k, v in ev.items() if k in SWEEP_KEPT_EVIDENCE}
    for k in _DROP:
        ev.pop(k, None)
    if isinstance(ev.get("kernel_manifest"), dict):
        ev["kernel_manifest"] = {
            k: v for k, v in ev["kernel_manifest"].items() if k in ("name", "path", "device", "source_digest")
        }
    return {
        "scale_mode": scale_mode,
        "check_id": r.check_id,
        "verdict": r.verdict,
        "failure_kind": (ev.get("failure_kind") or "kernel") if r.verdict == Verdict.FAIL else None,
        "summary": r.summary,
        "evidence": _jsonable(ev),
    }


def direction_counts(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """:func:`ask_direction_counts` read now."""
    return ask_direction_counts(out, ref).get()


def ask_direction_counts(out: torch.Tensor, ref: torch.Tensor):
    """Deferred ``{"n_differ", "toward_zero", "away_from_zero", "sign_change"}`` over the
    elements whose bits differ between same-shape float tensors ``out`` and ``ref``
    (counted on ref's device; NaN against anything is a sign change). Memoized on the two
    tensors inside a ``reference.memo`` scope."""
    out = memo.moved(out, ref.device)

    def ask():
        o, r = out.to(torch.float64).reshape(-1), ref.to(torch.float64).reshape(-1)
        differ = bits_of(out).reshape(-1) != bits_of(ref).reshape(-1)
        moved = differ & (torch.sign(o) == torch.sign(r))  # differs, same sign
        oa, ra = o.abs(), r.abs()
        parts = [differ.sum(), (moved & (oa < ra)).sum(), (moved & (oa > ra)).sum(), (differ & ~moved).sum()]
        names = ("n_differ", "toward_zero", "away_from_zero", "sign_change")
        return readback.ask(parts, lambda v: {k: int(x) for k, x in zip(names, v)})

    return memo.cached("direction", (out, ref), ask)


class LayerContext:
    """What the cells of one layer share inside a worker: the capture operands, loaded
    once and kept on :attr:`ref_device` (the kernel's CUDA device, else the CPU), and
    the clean kernel run. Everything else that repeats is memoized by ``reference.memo``
    in the batch's scope."""

    def __init__(self, spec: SweepSpec, device: Optional[str] = None):
        self.spec, self.device = spec, device
        self.ref_device = cuda_device(kernel_spec(spec.kernel), device) or "cpu"
        self._ops: dict = {}
        self._clean: dict = {}

    def ops(self, layer: str, scale_mode: str):
        key = (layer, scale_mode)
        if key not in self._ops:
            base = capture_ops(self.spec, layer, scale_mode)
            self._ops[key] = base if self.ref_device == "cpu" else base.to(self.ref_device)
        return self._ops[key]

    def clean_run(self, layer: str, scale_mode: str):
        key = (layer, scale_mode)
        if key not in self._clean:
            self._clean[key] = run_kernel(
                kernel_spec(self.spec.kernel), self.ops(layer, scale_mode), device=self.device, keep_on_device=True
            )
        return self._clean[key]


def run_layer_cell(task: SweepTask, ctx: Optional[LayerContext] = None) -> CellRows:
    """Evaluate one layer cell (operands and clean run from ``ctx`` when given).

    The injected kernel runs once, for the checks, the ground truth and the error
    direction. Every device question is asked before any is read, in two rounds (the
    second only when an output differs). Always inside a ``reference.memo`` scope, so the
    stored ``case_digest`` does not depend on how the cell was called.
    """
    with memo.scope():
        return _run_layer_cell(task, ctx)


def _run_layer_cell(task: SweepTask, ctx: Optional[LayerContext]) -> CellRows:
    t0 = time.perf_counter()
    c, spec = task.cell, task.spec
    inj = c.injection
    base = ctx.ops(c.layer, c.scale_mode) if ctx is not None else capture_ops(spec, c.layer, c.scale_mode)
    kernel = kernel_spec(spec.kernel)
    ops = prepare_injection(base, inj, kernel.constraints)
    faulty = inject_injection(kernel, inj)
    clean = None
    if ctx is not None and inj.fault not in PRECONDITION_FAULTS:
        clean = ctx.clean_run(c.layer, c.scale_mode)  # before any question: made once per batch
    # outputs stay on the kernel's device, where the batch's references live
    launch = start_kernel(faulty, ops, device=task.device, keep_on_device=True)
    case = CaseEvaluation(faulty, ops, device=task.device, run=launch, keep_on_device=True)
    gt_asked = ask_ground_truth(faulty, ops, device=task.device, clean_run=clean, faulty_run=launch)
    case.settle()  # round one read
    frun = case.run
    # the error direction is asked now when C8 may fail, so it comes back with round two
    if frun.output is not None and case.output_differs():
        ask_direction_counts(frun.output, _declared(kernel, ops, frun))
    res = case.result(source="sweep", coverage=False, output_digest=False, explain=False)
    gt = gt_asked.get().to_dict()
    if res.checks["C8"].verdict == Verdict.FAIL and frun.output is not None:
        gt["direction_vs_declared"] = direction_counts(frun.output, _declared(kernel, ops, frun))
    rows = [row_of(c.scale_mode, res.checks[cid]) for cid in res.checks]
    if kernel.is_block and res.checks["C8"].is_kernel_failure and frun.output is not None:
        ex = _block_explanation(faulty, ops, frun, _declared(kernel, ops, frun), task.device)
        if ex is not None:  # C8 failed, so its row keeps every evidence key
            next(r["evidence"] for r in rows if r["check_id"] == "C8")[EXPLANATION_KEY] = ex
    digest = hashlib.sha256(json.dumps(ops.digests(), sort_keys=True).encode()).hexdigest()
    return CellRows(c, rows, _jsonable(gt), digest, time.perf_counter() - t0, worker_id())


#: Rows of a failing block layer cell whose differing elements the sweep's fault explanation tests (``rows`` of
#: ``suite.signatures.explain_block_output``: the whole output costs the sweep more than a third of its time).
EXPLAIN_ROWS = 16


def _block_explanation(faulty, ops: GemmOperands, run, declared: torch.Tensor, device) -> Optional[dict]:
    """``suite.signatures.stored_explanation`` of the block fault explanation of ``run``'s output (the differing
    elements of :data:`EXPLAIN_ROWS` rows against ``declared``, the cell's declared output); None where nothing
    differs or the explanation raised (a hint for the signature, never a failed cell)."""
    try:
        ex = explain_block_output(faulty, ops, run.output, device, reference=declared, rows=EXPLAIN_ROWS)
    except Exception:  # noqa: BLE001 -- a hint for the signature, never a crash
        return None
    return None if ex is None else stored_explanation(ex)


def _declared(kernel, ops: GemmOperands, run) -> torch.Tensor:
    """``kernels.declared.declared_reference`` of ``kernel`` on ``ops`` for the device ``run`` ran on (its output
    bits), memoized in the open ``reference.memo`` scope on the operands, so the two rounds of a layer cell compute
    it once."""
    device = run_device(run)
    bs = None if ops.block_size is None else tuple(ops.block_size)
    kind = ("declared_reference", kernel.name, bs, str(ops.out_dtype), str(device))
    tensors = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.azp_adj, ops.azp)
    return memo.cached(kind, tensors, lambda: declared_reference(kernel, ops, device).output)


def run_layer_batch(tasks) -> list:
    """CellRows of layer cells sharing a layer and scale mode, in order, evaluated in one
    :class:`LayerContext` and memo scope (the executors' unit of work)."""
    tasks = list(tasks)
    if not tasks:
        return []
    _worker_env()
    ctx = LayerContext(tasks[0].spec, tasks[0].device)
    with memo.scope():
        _prefetch_masks(tasks, ctx)
        return [run_layer_cell(t, ctx) for t in tasks]


def _prefetch_masks(tasks: list, ctx: LayerContext) -> None:
    """Start drawing the coverage masks the injected kernels of ``tasks`` will ask for
    (``faults.mask.prefetch_element_masks``, on the batch's capture operands) in a thread, so
    that their host work overlaps the cells'. Speed only: a mask not prefetched, or a failure
    here, leaves each cell to draw its own (the same bits)."""
    try:
        want, keys = [], {}
        for t in tasks:
            c = t.cell
            if c.fault in PRECONDITION_FAULTS:  # row / column streams, drawn inside the cell
                continue
            k = (c.layer, c.scale_mode)
            if k not in keys:
                o = ctx.ops(*k)
                keys[k] = (o.m, o.n, case_key(o.a, o.b, o.scale_a, o.scale_b, o.bias))
            want.append(keys[k] + (c.fault, c.coverage, c.seed))
        if want:
            prefetch_element_masks(want)
    except Exception:  # noqa: BLE001 -- an optimisation: the cells raise what they must themselves
        pass


def layer_layouts(tasks) -> list:
    """The distinct call signatures (``suite.warmup.case_layout``, plus True: ``int_mm`` is launched on each case
    too) the int8 layer cells of ``tasks`` launch the kernel with: each (layer, scale mode)'s capture operands, read
    for one layer per shape (manifest M, K, N, projection; layouts follow shape and projection), and the F6 / F7
    cells' K-extended operands at every K' the layer's captured ``acc_absmax`` allows
    (``faults.precondition.extended_widths``; a superset of the K' the cells reach), from one prepared cell per
    shape and fault with K replaced (``extend_k`` builds dense int8 ``[rows, K']``)."""
    out: dict = {}
    reps: dict = {}
    for t in tasks:
        c, spec = t.cell, t.spec
        if c.is_model or c.is_kernel:
            continue
        kernel = kernel_spec(spec.kernel)
        entry = _capture_set(spec.capture_dir, spec.model_dir).manifest["layers"][c.layer]
        shape = (entry["M"], entry["K"], entry["N"], entry["proj"], c.scale_mode, spec.kernel)
        if shape not in reps:
            reps[shape] = capture_ops(spec, c.layer, c.scale_mode)
            out[case_layout(reps[shape], kernel.dense_operands()) + (True,)] = None
        if c.fault not in PRECONDITION_FAULTS:
            continue
        if (shape, c.fault) not in reps:
            prepared = prepare_injection(reps[shape], c.injection, kernel.constraints)
            reps[(shape, c.fault)] = case_layout(prepared, kernel.dense_operands())
        lay = reps[(shape, c.fault)]
        absmax = int(entry["acc_absmax"]["own" if c.scale_mode == "own" else "pow2-nearest"])
        for width in extended_widths(c.fault, int(entry["K"]), absmax, kernel.constraints.k_multiple):
            a, b = (((x[0][0], width), (width, 1), x[2], x[3]) for x in lay[:2])
            out[(a, b, *lay[2:], True)] = None
    return list(out)


def run_model_cell(task: SweepTask) -> CellRows:
    """Evaluate one model cell: C7 per scale mode, E1 once. F6 / F7 are injected as for
    ``check --inject``: their wrapper passes through (a model forward builds no case)."""
    t0 = time.perf_counter()
    c, spec = task.cell, task.spec
    faulty = inject_injection(kernel_spec(spec.kernel), c.injection)
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
            c7 = dict(windows=int(spec.c7["windows"]), window_len=int(spec.c7["window_len"]))
            r = check_token_flip(faulty, model_dir=mdir, scale_mode=c7_mode, device=task.device, **c7)
        except Exception as e:  # noqa: BLE001 -- a harness error is a row, not a crash
            r = check_error("C7", e)
        rows.append(row_of(mode, r))
    e1 = _engine_hash(faulty, mdir, int(spec.c7.get("e1_prompts", 8)), int(spec.c7.get("e1_tokens", 8)))
    for mode in ("own", "pow2"):
        row = row_of(mode, e1)
        row["evidence"]["shared_across_scale_modes"] = True
        rows.append(row)
    return CellRows(
        cell=c, rows=rows, ground_truth=gt, case_digest="", elapsed_s=time.perf_counter() - t0, worker=worker_id()
    )


#: Evidence of a C11 row the store keeps (not the per-probe table).
C11_KEPT = ("measured", "measured_model", "bits_observed", "promotion_interval", "notes", "declared", "shortfall")


def probe_case() -> GemmOperands:
    """C11's probe operands as a case (unit scalar scales, float32 output, no bias)."""
    a, b = probe_operands(probes(), K_PROBE, N_PROBE)
    one = torch.ones((), dtype=torch.float32)
    return GemmOperands(a, b, one, one.clone(), None, torch.float32, "c11-probe", "probe", {"source": "probe"})


#: Evidence of a C16 row the store keeps (not the per-row candidate tables).
C16_KEPT = ("declared", "measured", "block_size", "probe_k", "probe_n")


def run_kernel_cell(task: SweepTask) -> CellRows:
    """Evaluate one kernel cell: C11 on the injected kernel for an e4m3 kernel, C16 (the block
    accumulation probe, ``checks.block_accumulation``) for a block-scaled one, stored under each
    scale mode of the kernel's matrix domain (the probe has none), and the fault's ground truth on
    the probe (C16's: its M = 16 call at the kernel's first declared block size)."""
    t0 = time.perf_counter()
    c, spec = task.cell, task.spec
    kernel = kernel_spec(spec.kernel)
    block = kernel.block
    cid, check, kept = (
        ("C16", check_block_accumulation, C16_KEPT) if block else ("C11", check_fp8_accumulator, C11_KEPT)
    )
    faulty = inject_injection(kernel, c.injection)
    with memo.scope():
        try:
            r = check(faulty, device=task.device)
        except Exception as e:  # noqa: BLE001 -- a harness error is a row, not a crash
            r = check_error(cid, e)
        r.evidence = {k: v for k, v in (r.evidence or {}).items() if k in kept + ("failure_kind", "check_error")}
        probe = block_probe_case(kernel.operands, block.sizes[0]) if block else probe_case()
        try:
            gt = ask_ground_truth(faulty, probe, device=task.device).get().to_dict()
        except Exception as e:  # noqa: BLE001 -- no ground truth on the probe: said in the cell, the row stays
            gt = {"error": f"{type(e).__name__}: {first_line(e, None)}"}
    rows = []
    for mode in SCALE_MODES_FOR[matrix_domain(kernel)]:
        row = row_of(mode, r, keep_all=True)
        row["evidence"]["shared_across_scale_modes"] = True
        rows.append(row)
    gt.update(kernel_level=True, case=f"{cid} probe operands")
    return CellRows(c, rows, _jsonable(gt), "", time.perf_counter() - t0, worker_id())


@functools.lru_cache(maxsize=2)
def _engine_setup(model_dir: Optional[str], n_prompts: int):
    from detllm.oracle import default_setup

    return default_setup(model_dir, n_prompts)


def _engine_hash(faulty, model_dir: Optional[str], n_prompts: int, tokens: int):
    """E1 with ``n_prompts`` corpus prompts x ``tokens`` greedy tokens (n/a without an engine)."""
    try:
        art, prompts = _engine_setup(model_dir, n_prompts)
        return check_engine_hash(faulty, artifact=art, prompts=prompts, max_new_tokens=tokens)
    except Exception as e:  # noqa: BLE001 -- no engine for this model: n/a with the reason
        return not_applicable(
            "E1", f"engine hash not available for {model_dir}: {type(e).__name__}: {first_line(e, None)}"
        )


def _worker_env() -> None:
    """Per-call worker settings: torch threads (``INT8CONF_SWEEP_THREADS``, default 1), a conformance run
    (``kernels.spec.enter_conformance_run``: no configuration chosen by timing), third-party import notices
    silenced."""
    silence_import_noise()
    torch.set_num_threads(max(1, int(os.environ.get("INT8CONF_SWEEP_THREADS", "1"))))
    enter_conformance_run()


def run_task(task: SweepTask) -> CellRows:
    """One cell's rows (a layer cell without batch context)."""
    _worker_env()
    if task.cell.is_kernel:
        return run_kernel_cell(task)
    return run_model_cell(task) if task.cell.is_model else run_layer_cell(task)


def run_unit(unit) -> list:
    """Every executor's entry point: a unit of :func:`batches` (or a single SweepTask) in,
    a list of CellRows out."""
    if isinstance(unit, SweepTask):
        unit = (unit,)
    if unit and (unit[0].cell.is_model or unit[0].cell.is_kernel):
        return [run_task(t) for t in unit]
    return run_layer_batch(unit)


def batches(tasks, model_units: int = 0, max_model_cells: int = 3) -> list:
    """Units of work (tuples of SweepTasks): the model cells first (the slowest), dealt
    round-robin into ``model_units`` units (0: one per cell) of at most
    ``max_model_cells`` (what an interrupted sweep recomputes; each process pays the model
    set-up once), then one unit per (layer, scale mode) of layer cells, in task order (the
    kernel cells of an e4m3 sweep form one such unit, ``(KERNEL_LAYER, "both")``)."""
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
