"""``int8conf sweep``: the fault-injection sweep and its scorecard.

Every captured layer x fault x coverage x scale mode x seed is a cell; every
per-case check (C1-C6, C8) evaluates every layer cell, and the model-level
checks (C7, E1) run once per (fault, coverage, seed) with the fault injected
into every linear layer (C7 per scale mode). An FP8 (e4m3) kernel's sweep
takes the faults that apply to it (F1-F5, F8-F10), the captured layers
quantized to e4m3 in the activation scale modes per_token / per_tensor, the
per-case checks C1-C6, C8, C12, and C11 once per (fault, coverage, seed) in a
kernel cell; C7 and E1 (int8-engine checks) are not run. A block-scaled kernel's
sweep (``KernelSpec.is_block``, int8 or e4m3) takes the block faults
(``faults.catalogue.faults_for(operands, "block")``), the captured layers block-quantized in the scale
modes group / group_ue8m0, the block plan's per-case checks and C16 in the kernel
cells, no model cells, scored against the newest ``operands: block`` matrix. Results go into a
SQLite store as cells finish (resumable: re-running the same command skips
finished cells), then the sweep is scored against the latest locked
prediction matrix for the kernel's operand dtype and every matrix of that
dtype it amends, and the scorecard is written to ``<out>/<kernel>/``.

Exit codes: 0 done (scorecard written); 2 bad input (unknown kernel, fault,
coverage, layer, a store of another sweep, a damaged store -- at open or
found mid-run, when what was stored stays in it -- a prediction matrix that
does not match its lock); 130 stopped by Ctrl-C or SIGTERM (what was stored stays; run
the same command again to resume).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import sqlite3
import sys
from pathlib import Path

from conformance.commands.options import add_deprecated_alias
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import cuda_device, validate_device
from conformance.kernels.spec import FP8
from conformance.runtime.output_dirs import default_out, kernel_label
from reference.command_line import ensure_out_dir, non_negative_int, positive_int, removed_if_refused
from reference.errors import Int8confError
from reference.model.assets import default_model_dir
from reference.seeds import check_seed


def _csv(text: str) -> list[str]:
    """A comma / space separated list (argparse type).

    Raises:
        argparse.ArgumentTypeError: no item (``--layers ""`` would otherwise mean "all").
    """
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items:
        raise argparse.ArgumentTypeError("empty list: give at least one value, or leave the option out for the default")
    return items


def register(subparsers) -> None:
    """Add the ``sweep`` subcommand."""
    p = subparsers.add_parser(
        "sweep",
        help="fault-injection sweep: every layer x fault x coverage x scale mode, scored",
        description="Inject every fault class (F1-F9) at every coverage into a kernel, run every "
        "check on every captured layer in both scale modes, store one row per "
        "cell x check in SQLite (resumable), score against the locked prediction "
        "matrices and write int8conf-reports/sweep/<kernel label>/scorecard.{json,csv,md,png}.",
        epilog="exit codes: 0 done; 2 bad input (unknown kernel / fault / layer, a store of "
        "another sweep, a damaged store, a prediction matrix that does not match its lock); 130 stopped "
        "by Ctrl-C or SIGTERM (stored cells stay: the same command resumes)",
    )
    p.add_argument(
        "--kernel",
        required=True,
        metavar="NAME",
        help="kernel: built-in (cpu, int_mm, triton), pkg.module:function or entry point",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--model",
        metavar="DIR",
        default=None,
        help="Qwen3 model: its captures (taken with `int8conf capture` defaults into "
        "the artifact cache if missing) and, for C7 / E1, the model itself",
    )
    src.add_argument(
        "--captures", metavar="DIR", default=None, help="capture directory (default: the default model's captures)"
    )
    p.add_argument(
        "--linears",
        dest="layers",
        type=_csv,
        default=None,
        metavar="L,...",
        help="captured linear layers: names (model.layers.0.mlp.up_proj) or forward-order indices over the "
        "linears, not the decoder blocks (0,3: the first and the fourth linear; default: every captured linear)",
    )
    add_deprecated_alias(p, "--layers", "--linears", "layers", type=_csv)
    p.add_argument(
        "--inject",
        dest="faults",
        type=_csv,
        default=None,
        metavar="F,...",
        help="the faults to inject, ids or names (default: those that apply to the kernel: F1-F9 int8, "
        "F1-F5 + F8-F10 e4m3); each at every --coverages and --seeds",
    )
    add_deprecated_alias(p, "--faults", "--inject", "faults", type=_csv)
    p.add_argument("--coverages", type=_csv, default=None, metavar="C,...", help="one, 1%%, all (default: all three)")
    p.add_argument(
        "--scale-modes",
        type=_csv,
        default=None,
        metavar="M,...",
        help="own, pow2 (int8 kernels) or per_token, per_tensor (e4m3 kernels: the activation scale; "
        "default: both); selects the layer cells -- a model cell "
        "(C7, E1; see --no-model) always evaluates C7 under both modes",
    )
    p.add_argument("--seeds", type=_csv, default=["0"], metavar="S,...", help="mask seeds (default: 0)")
    p.add_argument(
        "--db",
        default=None,
        metavar="PATH",
        help="SQLite store (default: <out>/<kernel>/sweep.sqlite); resumes when it exists",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="scorecard directory root: files go to <out>/<kernel label>/ (default: "
        "int8conf-reports/sweep; with --db and no --out, the store's own directory)",
    )
    p.add_argument(
        "--predictions",
        default=None,
        metavar="FILE",
        help="latest prediction matrix to score against (default: the newest locked "
        "one in predictions/); every matrix it amends is scored too",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="tcp://HOST:8786",
        help="Dask distributed scheduler (needs the 'dist' extra); overrides --workers",
    )
    p.add_argument(
        "--workers",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="local worker processes (default 0: when the kernel runs on CUDA, 4 "
        "processes sharing a single GPU (at most one per core) or one per GPU "
        "when there are several; else one per core; 1 = serial)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        metavar="N",
        help="N > 1: evaluate N layer batches at once in threads of this one "
        "process, one CUDA stream each; only for a kernel that runs on CUDA "
        "(or the built-in cpu kernel), refused with --workers > 1 or "
        "--scheduler (default 1: --workers decides)",
    )
    p.add_argument(
        "--c7-windows", type=positive_int, default=8, metavar="N", help="C7 held-out windows per model cell (default 8)"
    )
    p.add_argument(
        "--c7-window-len", type=positive_int, default=128, metavar="T", help="C7 tokens per window (default 128)"
    )
    p.add_argument(
        "--e1-prompts",
        type=positive_int,
        default=8,
        metavar="N",
        help="E1 prompts per model cell (default 8, the oracle's default)",
    )
    p.add_argument(
        "--e1-tokens", type=positive_int, default=8, metavar="N", help="E1 greedy tokens per prompt (default 8)"
    )
    p.add_argument(
        "--no-model",
        dest="no_model_checks",
        action="store_true",
        help="skip C7 / E1 model cells (never run for e4m3 kernels)",
    )
    add_deprecated_alias(p, "--no-model-checks", "--no-model", "no_model_checks", flag=True)
    p.add_argument("--device", default=None, help="kernel device: cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--no-score", action="store_true", help="only compute and store cells")
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print nothing but errors: no progress bar, no start, totals or "
        "scorecard-path lines (the store and scorecard are still written)",
    )
    p.set_defaults(func=run)


def _resolve_captures(args, kernel=None):
    """(CaptureSet, model dir str) from --captures / --model / the default; a ``--model`` capture and
    its derived checkpoints are built on ``kernel``'s CUDA device (``cuda_device(kernel, --device)``)
    if it has one (``capture_model(device=...)``: the same bits)."""
    from reference.model.capture import cached_capture, default_capture_set, load_capture_set

    if args.captures:
        cs = load_capture_set(args.captures)
        return cs, str(cs.model_dir) if cs.model_dir else ""
    if args.model:
        mdir = Path(args.model)
        if not mdir.is_dir():
            raise Int8confError(f"--model {mdir}: not a directory")
        dev = (cuda_device(kernel, args.device) if kernel is not None else None) or "cpu"
        return cached_capture(mdir, progress=None if args.quiet else print, device=dev), str(mdir)
    cs = default_capture_set()
    if cs is None:
        raise Int8confError("no default captures: give --captures DIR or --model DIR")
    return cs, str(default_model_dir())


def _select_layers(names: list, wanted) -> list:
    if not wanted:
        return names
    out = []
    for w in wanted:
        if w.isdigit():
            i = int(w)
            if i >= len(names):
                raise Int8confError(
                    f"--linears {w}: the capture has {len(names)} captured linears (0..{len(names) - 1})"
                )
            out.append(names[i])
        elif w in names:
            out.append(w)
        else:
            raise Int8confError(f"--linears {w!r} is not a captured linear (e.g. {names[0]})")
    return list(dict.fromkeys(out))


#: Why an e4m3 sweep has no model cells (scorecard, README).
NO_MODEL_CELLS_E4M3 = (
    "not run for an e4m3 kernel: C7 replays the int8 W8A8 model forward and E1 drives the detllm integer engine "
    "through an int8 int_mm entry; neither has an e4m3 path"
)


#: Why a block-scaled kernel's sweep has no model cells (scorecard, README).
NO_MODEL_CELLS_BLOCK = (
    "not run for a block-scaled kernel: C7 replays the per-token x per-channel W8A8 int8 model forward and E1 "
    "drives the detllm integer engine through an int8 int_mm entry; neither has block scales"
)


def _checkpoint_dirs(cs, scale_modes) -> tuple:
    """``((kind, dir), ...)`` of the int8 checkpoints the selected scale modes read
    (``own``, ``pow2-nearest``), each loaded and digest-checked here once
    (``CaptureSet.checkpoint``) so that workers can read single layers. e4m3 modes
    read none (workers quantize the parent model's weights)."""
    kinds = [("own" if m == "own" else "pow2-nearest") for m in scale_modes if m in ("own", "pow2")]
    return tuple((k, str(cs.checkpoint(k).dir)) for k in dict.fromkeys(kinds))


def latest_matrix(path=None, operands: str = "int8") -> Path:
    """The matrix to score against: ``path``, else the newest entry of predictions/LOCK
    that predicts for ``operands`` kernels (``predictions.lock.latest_locked``)."""
    from predictions.lock import latest_locked

    if path:
        return Path(path)
    return latest_locked(operands)


def run(args: argparse.Namespace) -> int:
    """Run the sweep; returns the exit code."""
    from conformance.sweep.cells import (
        KERNEL_LAYER,
        MODEL_LAYER,
        SCALE_MODES_FOR,
        SweepSpec,
        kernel_cells,
        layer_cells,
        model_cells,
    )
    from conformance.sweep.runner import SweepTask
    from conformance.sweep.store import DamagedStoreError, StoreError, SweepStore, damaged
    from faults import COVERAGES
    from faults.catalogue import faults_for, get_fault, kernel_kind, not_applicable
    from predictions.lock import matrix_chain
    from predictions.matrix import matrix_domain

    validate_device(args.device)
    if args.threads > 1 and (args.workers > 1 or args.scheduler):
        other = "--scheduler" if args.scheduler else f"--workers {args.workers}"
        raise Int8confError(f"--threads {args.threads} runs the cells in threads of this one process: drop {other}")
    kernel = get_kernel(args.kernel)
    from conformance.sweep.distributed import threads_refusal

    why = threads_refusal(args.kernel, kernel, args.device, args.threads)
    if why:
        raise Int8confError(why)
    operands, block = kernel.operands, kernel.is_block
    domain = matrix_domain(kernel)  # operands, or "block": the matrices, scale modes and faults of the sweep
    fp8 = operands == FP8
    kind = kernel_kind(kernel)
    faults = [get_fault(f).id for f in (args.faults or [f.id for f in faults_for(operands, kind)])]
    for f in faults:
        why = not_applicable(f, operands, kind)
        if why:
            what = f"block-scaled {operands}" if block else operands
            raise Int8confError(f"--inject {f}: {get_fault(f).name} does not apply to {what} kernels: {why}")
    args.scale_modes = args.scale_modes or list(SCALE_MODES_FOR[domain])
    if fp8 or block:
        args.no_model_checks = True  # NO_MODEL_CELLS_E4M3 / NO_MODEL_CELLS_BLOCK
    covs = args.coverages or list(COVERAGES)
    bad = [c for c in covs if c not in COVERAGES]
    if bad:
        raise Int8confError(f"--coverages {bad}: known {list(COVERAGES)}")
    seeds = [check_seed(s, "--seeds: seed") for s in args.seeds]
    # refuse a tampered matrix before spending any compute
    chain = [] if args.no_score else matrix_chain(latest_matrix(args.predictions, domain))
    chain = [m for m in chain if m.operands == domain]  # an e4m3 matrix amending an int8 one scores e4m3 only
    if not args.no_score and not chain:
        raise Int8confError(f"--predictions {args.predictions}: that matrix predicts for other than {domain} kernels")

    cs, model_dir = _resolve_captures(args, kernel)
    layers = _select_layers(cs.layer_names(), args.layers)
    ck = cs.manifest.get("checkpoints", {})
    capture_digest = cs.model_digest + "|" + "|".join(f"{k}:{v.get('digest')}" for k, v in sorted(ck.items()))
    spec = SweepSpec(
        kernel=args.kernel,
        kernel_digest=kernel.source_digest,
        capture_dir=str(cs.dir),
        capture_digest=capture_digest,
        model_dir=model_dir,
        c7={
            "windows": args.c7_windows,
            "window_len": args.c7_window_len,
            "e1_prompts": args.e1_prompts,
            "e1_tokens": args.e1_tokens,
        },
        model_checks=not args.no_model_checks,
        checkpoint_dirs=_checkpoint_dirs(cs, args.scale_modes),
    )
    cells = layer_cells(layers, faults, covs, args.scale_modes, seeds, domain)
    mcells = [] if args.no_model_checks else model_cells(faults, covs, seeds)
    if fp8 or block:  # C11 / C16: one probe per (fault, coverage, seed), not per layer
        mcells = kernel_cells(faults, covs, seeds)
    kdir = kernel_label(kernel.name)
    if args.out is not None:
        out_dir = Path(args.out) / kdir
    else:  # a store given alone keeps its scorecard beside it, not over the committed one
        out_dir = Path(args.db).parent if args.db else default_out("sweep", kdir)
    db = Path(args.db) if args.db else out_dir / "sweep.sqlite"
    tasks = [SweepTask(c, spec, args.device) for c in mcells + cells]
    with removed_if_refused(out_dir):
        if args.out is None and args.db:  # the scorecard goes beside the store
            ensure_out_dir(out_dir, "--db", "directory of the store")
        else:
            ensure_out_dir(out_dir)
        # writer: a second sweep on this store is refused, not interleaved
        try:
            store = SweepStore(db, spec.identity(), writer=True)
        except DamagedStoreError:
            raise  # names the file and --db already
        except StoreError as e:  # name the option the path came from
            if not args.db:
                raise
            raise StoreError(f"--db: {e}") from None
    try:
        with store:
            runs = _compute(args, store, db, kernel, tasks, cells, mcells, layers, faults, covs, seeds)
            if args.no_score:
                return 0
            rows = store.rows()
            times = store.cell_times()
    except sqlite3.DatabaseError as e:  # damage found mid-run: what was stored stays
        raise damaged(db, e) from None
    n_rows = len(rows)
    worker_s = sum(t for _, t in times)
    n_model = sum(1 for layer, _ in times if layer in (MODEL_LAYER, KERNEL_LAYER))
    matrices = {m.id: m for m in chain}
    meta = _meta(
        args, spec, cells, mcells, layers, faults, covs, seeds, db, n_rows, runs, stored=(len(times) - n_model, n_model)
    )
    if block:
        meta.update(_block_meta(chain, operands))
    elif fp8:
        meta.update(_fp8_meta(spec, chain))
    meta["worker_s"] = round(worker_s, 1)
    meta["timing_line"] += (
        f"; summed per-cell worker time {worker_s:.1f} s (every stored cell's own compute time, all runs)"
    )
    from conformance.sweep import scorecard

    sc = scorecard.build(rows, matrices, meta)
    paths = scorecard.write(sc, out_dir)
    if not args.quiet:
        h = sc["headlines"]
        for tag, t in sc["totals"].items():
            x = t["core"]
            print(
                f"against {tag} ({meta.get('checks_core', 'C1-C7')}): TP {x['TP']} TN {x['TN']} FP {x['FP']} "
                f"FN {x['FN']} ({x['FN_no_op']} FN in no-op cells)"
            )
        if h.get("f8_fired") is not None:  # F8 (null) was swept: its false-alarm count
            print(f"F8 fired in {h['f8_fired']} check-cells")
        print("scorecard: " + ", ".join(str(p) for p in paths))
        if not any(p.suffix == ".png" for p in paths):
            print("detection.png not written: matplotlib is not installed (pip install 'int8conf[plots]')")
    return 0


def _block_meta(chain, operands: str) -> dict:
    """The scorecard's meta of a block-scaled kernel's sweep: its domain, the check spans of its
    matrices' totals, what replaced the model cells, the scale modes and the kernel cells."""
    from conformance.sweep.scoring import check_span

    m = chain[-1] if chain else None
    return {
        "operands": "block",
        "kernel_operands": operands,
        "kernel_cells_check": "C16",
        "checks_core": check_span(m.core_checks) if m else "C1-C6",
        "checks_all": check_span(m.checks) if m else "C1-C6 + C8, C12, C16",
        "c7_line": NO_MODEL_CELLS_BLOCK,
        "e1_line": NO_MODEL_CELLS_BLOCK,
        "kernel_cells_line": (
            "C16 block_accumulation once per fault x coverage x seed on its probe operands (M 16 and 128, "
            "K = 8 K-blocks, N 16, float32 output, the kernel's first declared block size; the layer plays no "
            "part), stored under both scale modes; the cell's ground truth is the fault's on the M = 16 probe"
        ),
        "scale_modes_line": (
            "group / group_ue8m0: the captured bf16 activations quantized per token and group of block_k "
            "(vLLM's per_token_group_quant), the parent model's weights in block_n x block_k blocks "
            "(compressed-tensors BLOCK), real scales or both rounded up to powers of two (ue8m0; C5 applies)"
        ),
    }


def _fp8_meta(spec, chain) -> dict:
    """The scorecard's meta of an e4m3 sweep: its dtype, the check spans of its matrices'
    totals, and what replaced the model cells."""
    from conformance.sweep.scoring import check_span

    m = chain[-1]
    return {
        "operands": "e4m3",
        "kernel_cells_check": "C11",
        "checks_core": check_span(m.core_checks),
        "checks_all": check_span(m.checks),
        "c7_line": NO_MODEL_CELLS_E4M3,
        "e1_line": NO_MODEL_CELLS_E4M3,
        "kernel_cells_line": (
            "C11 fp8_accumulator once per fault x coverage x seed on its probe operands (192 x 4096 x 16, "
            "unit scales, float32 output; the layer plays no part), stored under both scale modes; the "
            "cell's ground truth is the fault's on the probe"
        ),
        "scale_modes_line": (
            "per_token / per_tensor: the captured bf16 activations quantized to e4m3 per token or per tensor "
            "(vLLM dynamic), the parent model's weights per channel (compressed-tensors static)"
        ),
    }


def _kernel_cells_label(kernel) -> str:
    """What the non-layer cells of ``kernel``'s sweep are: kernel cells (C16 block-scaled, C11 e4m3) or model cells."""
    if kernel.is_block:
        return "kernel cells (C16)"
    return "kernel cells (C11)" if kernel.operands == FP8 else "model cells"


def _compute(args, store, db, kernel, tasks, cells, mcells, layers, faults, covs, seeds) -> list:
    """Compute and store the cells of ``tasks`` not yet in ``store``; returns
    the store's record of runs (``conformance.sweep.runlog``)."""
    from conformance.sweep.distributed import run_cells
    from conformance.sweep.runlog import RunLog

    before = len(store.done())
    if not args.quiet:
        print(
            f"sweep {args.kernel}: {len(cells)} layer cells ({len(layers)} layers x "
            f"{len(faults)} faults x {len(covs)} coverages x {len(args.scale_modes)} scale "
            f"modes x {len(seeds)} seeds) + {len(mcells)} "
            f"{_kernel_cells_label(kernel)} -> {db}" + (f" ({before} cells already stored)" if before else "")
        )
    workers, gpus = args.workers, ()
    if args.threads > 1:
        workers = 1  # threads of this process (checked against --workers/--scheduler in run)
    elif not workers and not args.scheduler:
        from conformance.sweep.distributed import default_workers

        workers, gpus = default_workers(kernel, args.device)
    done = store.done()
    log = RunLog.start(store, skipped=sum(t.cell.key in done for t in tasks))
    try:
        st = run_cells(
            tasks,
            store,
            workers=workers,
            scheduler=args.scheduler,
            quiet=args.quiet,
            gpus=gpus,
            on_stored=log.heartbeat,
            threads=args.threads,
            on_start=log.executor,
        )
    except BaseException:  # noqa: BLE001 -- cleanup then re-raise: the run log records the interruption
        with contextlib.suppress(sqlite3.DatabaseError):  # a damaged store: its own error
            log.interrupt()  # what was stored stays counted in the record
        raise
    runs = log.finish(st)
    if not args.quiet:
        print(
            f"computed {st.computed} cells in {st.elapsed_s:.1f} s "
            f"({st.cells_per_s:.2f} cells/s on average; {st.executor or 'nothing to do'}); "
            f"{st.skipped} already stored"
        )
        if st.warm_up is not None:
            w = st.warm_up
            print(
                f"warm-up: {w['skipped']}"
                if isinstance(w.get("skipped"), str)
                else f"warm-up: {w['layouts']} operand layouts compiled by an earlier run (skipped)"
                if w.get("skipped")
                else f"warm-up: {w['layouts']} operand layouts, {w.get('groups', 0)} variants compiled once before "
                f"the cells in {w['seconds']} s" + (f" ({w['error']})" if w.get("error") else "")
            )
    return runs


def _meta(args, spec, cells, mcells, layers, faults, covs, seeds, db, n_rows, runs, stored: tuple[int, int]) -> dict:
    """The scorecard's meta: this command's slice, and ``stored`` = (layer cells,
    model cells) in the whole store, which the scorecard scores."""
    cmd = (
        "int8conf " + " ".join(a if " " not in a else repr(a) for a in sys.argv[1:])
        if Path(sys.argv[0]).name in ("int8conf", "cli.py", "__main__.py")
        else "int8conf sweep"
    )
    wall = sum(r["wall_s"] for r in runs)
    done = sum(r["computed"] for r in runs)
    cut = sum(1 for r in runs if r.get("status") == "interrupted")
    timing = (
        f"{done} cells computed in {wall:.1f} s wall over {len(runs)} run(s)"
        + (f", {cut} of them interrupted" if cut else "")
        + f" ({done / wall:.2f} cells/s)"
        if wall
        else "no cells computed"
    )
    if runs:
        timing += (
            "; last run: " + f"{runs[-1]['computed']} cells, {runs[-1]['wall_s']} s, "
            f"{runs[-1].get('executor') or 'an interrupted run'} on a {runs[-1].get('cpu_count')}-core machine"
        )
    return {
        "stored_layer_cells": stored[0],
        "stored_model_cells": stored[1],
        "kernel": args.kernel,
        "kernel_digest": spec.kernel_digest,
        "capture_dir": spec.capture_dir,
        "model_dir": spec.model_dir,
        "command": cmd,
        "db": str(db),
        "rows": n_rows,
        "layer_cells": len(cells),
        "model_cells": len(mcells),
        "layers": len(layers),
        "faults": len(faults),
        "coverages": len(covs),
        "scale_modes": len(args.scale_modes),
        "seeds": len(seeds),
        "runs": runs,
        "timing_line": timing,
        "c7_line": (
            f"{spec.c7['windows']} windows x {spec.c7['window_len']} tokens per model cell "
            f"and scale mode (own, pow2-nearest), teacher-forced, fault in every linear layer"
            if spec.model_checks
            else "off"
        ),
        "e1_line": (
            f"detllm engine hash ({spec.c7['e1_prompts']} prompts x {spec.c7['e1_tokens']} "
            f"greedy tokens) with the faulty int_mm entry, "
            "once per model cell, stored under both scale modes (the integer engine has "
            "no scale mode)"
            if spec.model_checks
            else "off"
        ),
        "machine": (
            f"scored on {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
            f"cells computed by the runs listed in scorecard.json meta.runs"
        ),
    }
