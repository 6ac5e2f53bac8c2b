"""Throughput benchmark (``int8conf bench``): the reference's exact accumulator vs each kernel, in
GMAC/s (M*K*N / seconds / 1e9) on Qwen3-1.7B layer shapes (M = 512), with the ratio kernel /
reference on the same device and shape. The Triton interpreter runs a reduced shape; on CUDA,
``int_mm`` and ``triton`` are also timed natively (``--gpu``: :func:`run_gpu_bench`). Timing:
median of ``reps`` calls after a warm-up. Prints figures, never a timed test."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import json
import multiprocessing as mp
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from conformance.kernels import builtin_triton as bt
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import pick_device
from conformance.kernels.spec import KernelSpec
from conformance.runtime.environment import environment as base_environment
from reference.accumulate import exact_int_mm
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.epilogue import apply_epilogue, reference_scaled_mm
from reference.fileio import atomic_write_json, atomic_write_text
from reference.operands import GemmOperands

QWEN3_1_7B_SHAPES = (
    (512, 2048, 2048, "q_proj/o_proj (K=N=hidden)"),
    (512, 2048, 6144, "gate_proj/up_proj"),
    (512, 6144, 2048, "down_proj"),
    (512, 6144, 6144, "K=N=6144 (bound case)"),
)
INTERPRETER_SHAPE = (64, 512, 256, "reduced shape (interpreter)")
COLUMNS = ("kernel", "device", "M", "K", "N", "layer", "ms", "GMAC/s", "best GMAC/s", "x reference", "note")


def gmacs(m: int, k: int, n: int, seconds: float) -> float:
    """Throughput in GMAC/s: ``m*k*n / seconds / 1e9`` (inf for 0 seconds)."""
    return float("inf") if seconds <= 0 else m * k * n / seconds / 1e9


def make_operands(m: int, k: int, n: int, seed: int = 0) -> GemmOperands:
    """Random full-range int8 operands, real (non-pow2) float32 scales, bf16 bias."""
    g = torch.Generator().manual_seed(seed)
    return GemmOperands(
        torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
        torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g),
        torch.rand(m, generator=g) * 0.02 + 1e-3,
        torch.rand(n, generator=g) * 0.01 + 1e-4,
        (torch.randn(n, generator=g)).to(torch.bfloat16),
        name=f"{m}x{k}x{n}",
    )


def time_call(fn: Callable[[], object], reps: int, cuda: bool = False) -> tuple[float, float]:
    """(median, best) wall seconds of ``fn()`` over ``reps`` calls after one warm-up."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    ts = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def _row(kernel: str, device: str, shape: tuple, t: tuple, ref_t: Optional[tuple], note: str = "") -> dict:
    m, k, n, label = shape
    secs, best = t
    vals = (kernel, device, m, k, n, label, secs * 1e3, gmacs(m, k, n, secs), gmacs(m, k, n, best))
    return dict(zip(COLUMNS, (*vals, (ref_t[0] / secs) if ref_t else float("nan"), note)))


def _timed_row(spec, device: str, shape: tuple, ops: GemmOperands, reps: int, ref_t: tuple, note: str) -> dict:
    """Time ``spec.scaled_mm`` on ``ops``; a kernel that raises gets a row with
    NaN figures and the exception in ``note`` (the bench goes on)."""
    try:
        t = time_call(
            lambda: spec.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, torch.bfloat16, ops.bias),
            reps,
            cuda=device == "cuda",
        )
    except Exception as e:  # noqa: BLE001 -- report, keep benchmarking the others
        msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        return _row(spec.name, device, shape, (float("nan"), float("nan")), ref_t, f"FAILED {type(e).__name__}: {msg}")
    return _row(spec.name, device, shape, t, ref_t, note)


def run_bench(
    kernels: tuple = ("cpu", "int_mm", "triton"),
    reps: int = 3,
    shapes: tuple = QWEN3_1_7B_SHAPES,
    interpreter_shape: Optional[tuple] = INTERPRETER_SHAPE,
    cuda: Optional[bool] = None,
):
    """Time the reference and each kernel (names or KernelSpecs): one row per (kernel, device, shape),
    median of ``reps`` calls (``GMAC/s``, used for ``x reference`` on the same device and shape; CUDA
    rows vs the CPU reference) and the best call. ``interpreter_shape``: the reduced shape for Triton
    interpreter kernels (None skips them). Returns a pandas DataFrame (row dicts without pandas).
    Raises KernelLoadError."""
    specs = [k if isinstance(k, KernelSpec) else get_kernel(k) for k in kernels]
    cuda = torch.cuda.is_available() if cuda is None else cuda
    rows, ref_time = [], {}
    all_shapes = list(shapes) + ([interpreter_shape] if interpreter_shape else [])
    for shape in all_shapes:
        m, k, n, _ = shape
        ops = make_operands(m, k, n)
        t_acc = time_call(lambda: exact_int_mm(ops.a, ops.b), reps)
        ref_time[shape] = t_acc
        rows.append(_row("reference exact_int_mm", "cpu", shape, t_acc, t_acc, "exact int64 accumulator only"))
        t_full = time_call(
            lambda: reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, CUTLASS_STYLE, ops.bias), reps
        )
        rows.append(_row("reference scaled_mm", "cpu", shape, t_full, t_acc, "accumulator + epilogue + validation"))
    for spec in specs:
        cpu_interp = spec.name == "triton" or "interpreter" in spec.description
        if "cpu" in spec.devices:
            for shape in all_shapes:
                is_reduced = interpreter_shape is not None and shape is interpreter_shape
                if cpu_interp != is_reduced:
                    continue  # interpreter only on the reduced shape; others only on full
                ops = make_operands(*shape[:3])
                note = "Triton interpreter (numpy); reduced shape" if cpu_interp else ""
                rows.append(_timed_row(spec, "cpu", shape, ops, reps, ref_time[shape], note))
        if cuda and "cuda" in spec.devices and pick_device(spec, "cuda")[0]:
            for shape in shapes:
                ops = make_operands(*shape[:3]).to("cuda")
                rows.append(
                    _timed_row(spec, "cuda", shape, ops, reps, ref_time[shape], "native; ratio vs CPU reference")
                )
    try:
        import pandas as pd
    except ImportError:  # bare GPU boxes: plain rows
        return rows
    return pd.DataFrame(rows)


def render(df, title: str = "int8conf bench") -> None:
    """Print the table with rich; one JSON line per row when rich or pandas is not installed (bare GPU boxes)."""
    try:
        from rich.table import Table

        from reference.command_line import make_console

        records = df.to_dict("records")
    except (ImportError, AttributeError):
        print(title)
        for r in df if isinstance(df, list) else df.to_dict("records"):
            print(json.dumps(r))
        return
    t = Table(title=title)
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("kernel", "device", "layer", "note") else "right")
    fmts = {"ms": ".2f", "GMAC/s": ".3g", "best GMAC/s": ".3g", "x reference": ".3g"}
    for r in records:
        t.add_row(*(format(r[c], fmts[c]) if c in fmts else str(r[c]) for c in COLUMNS))
    make_console().print(t)


def environment() -> dict:
    """``conformance.runtime.environment.environment()`` plus ``threads`` (torch intra-op threads), ``cuda``
    (bool) and ``device`` (GPU or CPU name)."""
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine()
    return {**base_environment(), "threads": torch.get_num_threads(), "cuda": cuda, "device": device}


# ``int8conf bench --gpu``: the built-in ``triton`` vs ``torch._int_mm`` + eager epilogue and a plain autotuned
# Triton int8 GEMM, output bits of each checked against the reference of its declared contract.
#: Qwen3 decoder linears as (layer, K = in_features, N = out_features), from config.json of Qwen/Qwen3-0.6B
#: (hidden 1024, intermediate 3072, 16 q / 8 kv heads x 128) and Qwen/Qwen3-1.7B (2048, 6144, q 2048, kv 1024).
QWEN3_LAYERS = {
    "Qwen3-0.6B": (
        ("q_proj", 1024, 2048),
        ("k_proj/v_proj", 1024, 1024),
        ("o_proj", 2048, 1024),
        ("gate_proj/up_proj", 1024, 3072),
        ("down_proj", 3072, 1024),
    ),
    "Qwen3-1.7B": (
        ("q_proj/o_proj", 2048, 2048),
        ("k_proj/v_proj", 2048, 1024),
        ("gate_proj/up_proj", 2048, 6144),
        ("down_proj", 6144, 2048),
    ),
}
GPU_M = (1, 16, 128, 512, 4096)
#: square problems, plus the issue's 16384x8192x8192 row, as (M, K, N)
SQUARES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192))
#: dense int8 tensor-core peak (TOPS, 2 ops per MAC) by device-name substring (NVIDIA H200 datasheet:
#: 3,958 TOPS INT8 with sparsity)
PEAK_TOPS = {"H200": 1979.0, "H100 80GB HBM3": 1979.0, "H100": 1979.0}
#: HBM bandwidth (TB/s) for the roofline's memory roof (H200: 4.8 TB/s)
PEAK_TBS = {"H200": 4.8, "H100 80GB HBM3": 3.35, "H100": 3.35}
ROWS_FULL_CHECK = 512  # outputs with at most this many rows are checked entirely
ROWS_SAMPLED = 256  # otherwise this many rows (first, last, random) are checked
HOST_PATH_SHAPE = (1, 2048, 6144)


def gpu_shapes(quick: bool = False) -> list[dict]:
    """The benchmarked shapes, deduplicated: ``{"M","K","N","layers"}`` with
    ``layers`` the model/layer labels that share the shape. ``quick``: only
    M in {1, 512} of Qwen3-1.7B gate/up and 4096^3."""
    out: dict = {}
    for model, layers in QWEN3_LAYERS.items():
        for layer, k, n in layers:
            for m in GPU_M:
                if quick and not (model == "Qwen3-1.7B" and layer.startswith("gate") and m in (1, 512)):
                    continue
                out.setdefault((m, k, n), []).append(f"{model} {layer}")
    for m, k, n in SQUARES[:1] if quick else SQUARES:
        out.setdefault((m, k, n), []).append("square" if m == k == n else "issue table")
    return [{"M": m, "K": k, "N": n, "layers": v} for (m, k, n), v in out.items()]


def tops(m: int, k: int, n: int, us: float) -> float:
    """Tera-ops per second, 2 ops per multiply-accumulate: ``2*m*k*n / us / 1e6``."""
    return float("nan") if not us or us != us else 2.0 * m * k * n / us / 1e6


def _plain_int8_gemm(
    a_ptr,
    b_ptr,
    sa_ptr,
    sb_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Plain autotuned Triton int8 GEMM (the benchmark's peer): grouped launch order, ``tl.dot`` int32
    accumulator, ``((acc * s_a) * s_w)`` cast to bf16 (RNE) -- TRITON_STYLE, no bias. a [M,K], b [N,K], K-contiguous."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rn[None, :] * stride_bn + rk[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    y = (acc.to(tl.float32) * tl.load(sa_ptr + rm)[:, None]) * tl.load(sb_ptr + rn)[None, :]
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(
        c_ptr + cm[:, None] * stride_cm + cn[None, :], y.to(tl.bfloat16), mask=(cm[:, None] < M) & (cn[None, :] < N)
    )


#: the plain GEMM's autotuning space: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages), the one the built-in also tries
PLAIN_CONFIGS = bt.PLAIN_SPACE
_PLAIN: dict = {}


def plain_triton_gemm():
    """The autotuned plain Triton GEMM as ``fn(a, b, sa, sb) -> bf16 [M,N]`` (keyed on M, N, K; timed as the
    built-in's own tuner)."""
    if "fn" in _PLAIN:
        return _PLAIN["fn"]
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in PLAIN_CONFIGS
    ]

    def bench_fn(fn, quantiles=None, **_):  # same timing as the built-in's tuner
        return triton.testing.do_bench(fn, warmup=2, rep=10, quantiles=quantiles)

    try:
        tuner = triton.autotune(configs=configs, key=["M", "N", "K"], do_bench=bench_fn)
    except TypeError:  # a Triton without the do_bench hook
        tuner = triton.autotune(configs=configs, key=["M", "N", "K"], warmup=2, rep=10)
    kern = tuner(triton.jit(_plain_int8_gemm))

    def run(a, b, sa, sb):
        m, k = a.shape
        n = b.shape[0]
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        kern[grid](a, b, sa, sb, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))
        return c

    _PLAIN["fn"], _PLAIN["kernel"] = run, kern
    return run


def int_mm_peer(a, b, sa, sb):
    """``torch._int_mm`` (cuBLASLt) + eager torch epilogue, CUTLASS_STYLE (``(acc * s_w) * s_a`` -> bf16); M <= 16
    is zero-padded to 17 rows (torch._int_mm needs M > 16 on CUDA; part of the measured cost)."""
    m = a.shape[0]
    ap = F.pad(a, (0, 0, 0, 17 - m)) if m <= 16 else a
    acc = torch._int_mm(ap, b.t())
    if m <= 16:
        acc = acc[:m]
    return ((acc.to(torch.float32) * sb[None, :]) * sa[:, None]).to(torch.bfloat16)


def _e2e_interleaved(fns: dict, min_batch_ms: float = 10.0, rounds: int = 7) -> dict:
    """End-to-end microseconds per call of several kernels: CUDA events around back-to-back calls after
    warm-up, batches of the kernels interleaved (a transient slowdown hits all alike); median of ``rounds``."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = {}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        s.record()
        for _ in range(5):
            fn()
        e.record()
        e.synchronize()
        reps[name] = int(min(max(min_batch_ms / max(s.elapsed_time(e) / 5, 1e-3), 5), 2000))
    ts: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            s.record()
            for _ in range(reps[name]):
                fn()
            e.record()
            e.synchronize()
            ts[name].append(s.elapsed_time(e) * 1e3 / reps[name])
    return {name: statistics.median(v) for name, v in ts.items()}


def kernel_us(fn) -> float:
    """GPU microseconds per call with a cold L2 (``triton.testing.do_bench`` median)."""
    return float(triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")) * 1e3


def _host_us(fn, n: int = 300) -> float:
    """Host microseconds per call: ``n`` back-to-back calls, wall clock until the last is issued."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def _check_rows(m: int, seed: int) -> list[int]:
    if m <= ROWS_FULL_CHECK:
        return list(range(m))
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(m - 2, generator=g)[: ROWS_SAMPLED - 2] + 1
    return sorted({0, m - 1, *pick.tolist()})


def check_bits(a, b, sa, sb, outputs: dict, seed: int = 0) -> dict:
    """Compare each kernel's bf16 output with the reference of its declared contract.

    Reference: the int32 accumulator from ``torch._int_mm`` on the GPU (exact:
    cuBLASLt int8 GEMM with int32 accumulation; M zero-padded to >= 17, which
    adds rows only), certified on up to 4 rows against the CPU's exact int64
    ``reference.accumulate.exact_int_mm``; then ``reference.epilogue.apply_epilogue``
    on the CPU for the checked rows (all rows when M <= ROWS_FULL_CHECK, else
    ROWS_SAMPLED rows: first, last, seeded random). ``outputs``: ``name -> (bf16 [M,N] CUDA tensor,
    EpilogueContract)``. Returns ``{"rows_checked", "rows_total", "acc_certified_rows", "acc_certified",
    name: mismatching element count}``."""
    m = a.shape[0]
    rows = _check_rows(m, seed)
    ap = F.pad(a, (0, 0, 0, 17 - m)) if m <= 16 else a
    idx = torch.tensor(rows, device=a.device)
    acc = torch._int_mm(ap, b.t())[:m].index_select(0, idx).cpu()
    cert = sorted(set(rows[:2] + rows[-2:] if len(rows) > 4 else rows))
    exact = exact_int_mm(a[cert].cpu(), b.cpu())
    pos = [rows.index(r) for r in cert]
    res = {
        "rows_checked": len(rows),
        "rows_total": m,
        "acc_certified_rows": len(cert),
        "acc_certified": bool(torch.equal(acc[pos].to(torch.int64), exact)),
    }
    sa_c, sb_c = sa.index_select(0, idx).cpu(), sb.cpu()
    refs: dict = {}
    for name, (out, contract) in outputs.items():
        if contract not in refs:
            refs[contract] = apply_epilogue(acc, sa_c, sb_c, contract, None, torch.bfloat16)
        got = out.index_select(0, idx).cpu()
        res[name] = int((got.view(torch.int16) != refs[contract].view(torch.int16)).sum())
    return res


def device_slug(name: str) -> str:
    """A device name as a folder name: lower case, runs of other characters as ``-`` (``cuda`` if none left)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "cuda"


def _peak(name: str, table: dict) -> Optional[float]:
    return next((v for key, v in table.items() if key in name), None)


def _precompile_task(shape: tuple, configs: list) -> int:
    """Worker: compile every candidate configuration of the built-in and the plain GEMM for one shape."""
    m, k, n = shape
    a, b, sa, sb = _gpu_operands(m, k, n, 0)
    done = 0
    for cfg in configs:
        try:
            bt.scaled_mm_config(cfg, a, b, sa, sb)
            done += 1
        except Exception:  # noqa: BLE001 -- a config that does not compile is dropped by tuning too
            pass
    plain_triton_gemm()
    kern = _PLAIN["kernel"].fn
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    args = (a, b, sa, sb, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))
    for bm, bn, bk, w, s in PLAIN_CONFIGS:
        try:
            grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
            kern[grid](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w, num_stages=s)
            done += 1
        except Exception:  # noqa: BLE001 -- a config that does not compile or launch (Triton raises many types) is skipped
            pass
    torch.cuda.synchronize()
    return done


def _tuned_configs(m: int) -> list:
    """The built-in's configurations for M = ``m`` that the tuner may try on this machine's GPU with TMA-able
    operands (``builtin_triton._candidates``: the bucket's own, then the enabled Gluon and warp-specialised
    Gluon ones; none excluded)."""
    dev = torch.device("cuda")
    return bt._candidates(m, True, bt._gluon_enabled(dev), bt._gluon_ws_enabled(dev))


def config_by_label(label: str):
    """The built-in's configuration (a bucket's, a Gluon or a warp-specialised Gluon
    one) whose ``Config.label()`` is ``label``; KeyError if none has."""
    for cs in (*bt.BUCKET_CONFIGS.values(), *bt.GLUON_CONFIGS.values(), *bt.GLUON_WS_CONFIGS.values()):
        for c in cs:
            if c.label() == label:
                return c
    raise KeyError(f"no configuration of the built-in triton kernel is labelled {label!r}")


def _probe_one(label: str) -> None:
    """Subprocess entry of :func:`probe_configs`: run the configuration labelled ``label`` once at 4096^3."""
    a, b, sa, sb = _gpu_operands(4096, 4096, 4096, 0)
    bt.scaled_mm_config(config_by_label(label), a, b, sa, sb)
    torch.cuda.synchronize()


def probe_configs(timeout_s: float = 90.0, log=print) -> dict:
    """Compile every TMA and (on sm_90) Gluon configuration the tuner may try at large M, each in its own
    subprocess, all at once, and exclude (``builtin_triton.exclude_configs``) those whose process fails or
    hangs -- a compiler crash or an mbarrier deadlock no ``except`` in the tuner could catch. Returns
    ``{label: reason}`` of the excluded ones."""
    procs = {}
    for cfg in _tuned_configs(4096) + [c for c in _tuned_configs(128) if c.kernel == "gluon"]:
        if cfg.kernel not in ("tma", "gluon") or cfg.label() in procs:
            continue
        procs[cfg.label()] = subprocess.Popen(
            [sys.executable, "-c", f"from conformance.bench.gemm import _probe_one; _probe_one({cfg.label()!r})"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    bad: dict = {}
    t_end = time.monotonic() + timeout_s
    for label, p in procs.items():
        try:
            _, err = p.communicate(timeout=max(1.0, t_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            bad[label] = "timed out"
            continue
        if p.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            bad[label] = f"exit {p.returncode}: {tail[0][:160]}"
    if bad:
        bt.exclude_configs(bad)
        log(f"excluded {len(bad)} configuration(s): {bad}")
    return bad


def precompile(shapes: list[dict], workers: int) -> float:
    """Compile all candidate kernels for ``shapes`` in ``workers`` spawned processes (Triton's on-disk cache is
    shared), so the in-process tuning only loads binaries. Returns seconds spent."""
    t0 = time.perf_counter()
    tasks = [((s["M"], s["K"], s["N"]), _tuned_configs(s["M"])) for s in shapes]
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        list(ex.map(_precompile_task, *zip(*tasks)))
    return time.perf_counter() - t0


def _gpu_operands(m: int, k: int, n: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
    sa = torch.rand(m, device="cuda", generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, device="cuda", generator=g) * 0.01 + 1e-4
    return a, b, sa, sb


def _host_path(a, b, sa, sb, plain) -> dict:
    """Host and end-to-end microseconds of a ``triton`` call vs a bare and a raw launch of its compiled kernel."""
    launch, out, cfg = bt.launch_spec(a, b, sa, sb)
    raw, _, _ = bt.launch_spec(a, b, sa, sb, raw=True)

    def alloc(fn):  # a launch plus allocating its output, as any call must
        return lambda: (torch.empty_like(out), fn())

    call = lambda: bt.scaled_mm(a, b, sa, sb)  # noqa: E731
    ways = {"call": call, "bare": launch, "bare_alloc": alloc(launch), "raw": raw, "raw_alloc": alloc(raw)}
    ways["plain"] = lambda: plain(a, b, sa, sb)
    host = {w: [] for w in ways}
    for _ in range(5):  # interleaved rounds, median
        for w, fn in ways.items():
            host[w].append(_host_us(fn))
    med = {w: statistics.median(v) for w, v in host.items()}
    e2e = _e2e_interleaved({"call": call, "bare": launch, "raw": raw})
    return {
        "shape": [a.shape[0], a.shape[1], b.shape[0]],
        "config": cfg.label(),
        "triton_host_us": med["call"],
        "bare_launch_host_us": med["bare"],
        "bare_launch_alloc_host_us": med["bare_alloc"],
        "raw_launch_host_us": med["raw"],
        "raw_launch_alloc_host_us": med["raw_alloc"],
        "triton_e2e_us": e2e["call"],
        "bare_launch_e2e_us": e2e["bare"],
        "raw_launch_e2e_us": e2e["raw"],
        "plain_triton_host_us": med["plain"],
        "host_ratio": med["call"] / med["bare"],
        "host_ratio_vs_bare_with_alloc": med["call"] / med["bare_alloc"],
        "host_ratio_vs_raw_with_alloc": med["call"] / med["raw_alloc"],
    }


def _err(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).strip()[:200]}"


def run_gpu_bench(
    shapes: Optional[list] = None, extra_kernels: tuple = (), precompile_workers: int = 0, probe: bool = True, log=print
) -> dict:
    """``triton`` vs ``int_mm`` (+ eager epilogue) vs the plain autotuned Triton GEMM on every shape,
    bits checked. ``us``: end-to-end microseconds per call (:func:`_e2e_interleaved`), ``kernel_us``:
    cold-L2 GPU time (``do_bench``), TOPS = 2*M*K*N / us; at M = 1 also host microseconds of a call and
    of a bare launch. ``probe``: compile and run each TMA / Gluon candidate in its own process first and
    exclude failures (:func:`probe_configs`). Returns ``environment, peak_tops, rows, host_path, tuning,
    acceptance``. Raises RuntimeError without CUDA."""
    if not torch.cuda.is_available():
        raise RuntimeError("int8conf bench --gpu needs a CUDA device")
    shapes = shapes or gpu_shapes()
    env = environment()
    name = env["device"]
    peak = _peak(name, PEAK_TOPS)
    extras = [get_kernel(x) for x in extra_kernels]
    excluded = probe_configs(log=log) if probe else {}
    pre_s = precompile(shapes, precompile_workers) if precompile_workers > 0 else 0.0
    if pre_s:
        log(f"precompiled in {pre_s:.1f} s with {precompile_workers} workers")
    plain = plain_triton_gemm()
    rows, host_path = [], None
    for i, s in enumerate(shapes):
        m, k, n = s["M"], s["K"], s["N"]
        a, b, sa, sb = _gpu_operands(m, k, n, i)
        fns = {
            "triton": (lambda: bt.scaled_mm(a, b, sa, sb), TRITON_STYLE),
            "int_mm": (lambda: int_mm_peer(a, b, sa, sb), CUTLASS_STYLE),
            "plain_triton": (lambda: plain(a, b, sa, sb), TRITON_STYLE),
        }
        for spec in extras:
            fns[spec.name] = ((lambda f=spec.scaled_mm: f(a, b, sa, sb)), spec.contract)
        row = {"M": m, "K": k, "N": n, "layers": s["layers"], "kernels": {}}
        outs, ok = {}, {}
        for kname, (fn, contract) in fns.items():
            try:
                outs[kname] = (fn(), contract)  # warm-up / autotune (not timed)
                ok[kname] = fn
            except Exception as e:  # noqa: BLE001 -- report it, keep going
                row["kernels"][kname] = {"error": _err(e)}
        e2e = _e2e_interleaved(ok)
        for kname, fn in ok.items():
            kus = kernel_us(fn)
            us = e2e[kname]
            row["kernels"][kname] = {
                "us": us,
                "kernel_us": kus,
                "tops": tops(m, k, n, us),
                "kernel_tops": tops(m, k, n, kus),
            }
        row["kernels"] = {x: row["kernels"][x] for x in fns if x in row["kernels"]}
        try:
            bits = check_bits(a, b, sa, sb, outs, seed=i)
        except Exception as e:  # noqa: BLE001 -- the bit check failing is the row's error, the timings stay
            bits = {"error": _err(e)}
        row["bits"] = bits
        for kname, r in row["kernels"].items():
            r["mismatches"] = bits.get(kname)
            r["bits_ok"] = bits.get(kname) == 0 and bits.get("acc_certified", False)
            if peak and "tops" in r:
                r["fraction_of_peak"] = r["tops"] / peak
        try:
            _, _, cfg = bt.launch_spec(a, b, sa, sb)
            row["kernels"]["triton"]["config"] = cfg.label()
        except Exception:  # noqa: BLE001 -- the tuned config is only a label in the row
            pass
        peers = [p for x in ("int_mm", "plain_triton") if (p := row["kernels"][x].get("tops", float("nan"))) == p]
        t = row["kernels"]["triton"].get("tops", float("nan"))
        row["best_peer_tops"] = max(peers) if peers else float("nan")
        row["triton_vs_best_peer"] = t / max(peers) if peers else float("nan")
        if (m, k, n) == HOST_PATH_SHAPE:
            host_path = _host_path(a, b, sa, sb, plain)
        rows.append(row)
        kt = row["kernels"]
        log(
            f"{m:>6}x{k:>5}x{n:>5}  "
            + "  ".join(
                f"{kn} {kv.get('us', float('nan')):9.1f} us {kv.get('tops', float('nan')):7.1f} TOPS"
                f"{'' if kv.get('bits_ok') else ' BITS!'}"
                for kn, kv in kt.items()
            )
            + f"  x{row['triton_vs_best_peer']:.2f}  {kt['triton'].get('config', '')}"
        )
    torch.cuda.empty_cache()
    return {
        "environment": env,
        "peak_tops": peak,
        "peak_tbs": _peak(name, PEAK_TBS),
        "timing": "us: CUDA events over back-to-back calls after warm-up and autotuning (median of 7 batches of "
        ">= 10 ms, batches of the kernels interleaved); kernel_us: triton.testing.do_bench median with L2 flushed "
        "before each call",
        "bits_reference": "torch._int_mm int32 accumulator on the GPU (certified against exact int64 on <= 4 rows) "
        f"+ reference.epilogue.apply_epilogue on the CPU; all rows when M <= {ROWS_FULL_CHECK}, else "
        f"{ROWS_SAMPLED} sampled rows",
        "precompile_s": pre_s,
        "excluded_configs": excluded,
        "rows": rows,
        "host_path": host_path,
        "tuning": bt.tuning_table(),
        "acceptance": acceptance(rows, host_path),
    }


def acceptance(rows: list, host_path: Optional[dict]) -> dict:
    """The issue's acceptance targets, evaluated on the measured rows:
    ``triton`` >= 1.0x the best peer everywhere, >= 1,400 TOPS at 8192^3,
    <= 45 us per call at M=1 (K=2048, N=6144), host path <= 1.2x a bare
    launch, bits identical on every shape."""
    worst = min(rows, key=lambda r: r.get("triton_vs_best_peer", float("inf")), default=None)
    sq = [r for r in rows if (r["M"], r["K"], r["N"]) == (8192, 8192, 8192)]
    m1 = [r for r in rows if (r["M"], r["K"], r["N"]) == HOST_PATH_SHAPE]
    below = [f"{r['M']}x{r['K']}x{r['N']}" for r in rows if not r.get("triton_vs_best_peer", 0) >= 1.0]
    bits_bad = [
        f"{r['M']}x{r['K']}x{r['N']}:{k}" for r in rows for k, v in r["kernels"].items() if not v.get("bits_ok")
    ]
    out = {
        "triton_ge_best_peer_everywhere": not below,
        "shapes_below_1x": below,
        "worst_ratio": worst.get("triton_vs_best_peer") if worst else None,
        "worst_shape": f"{worst['M']}x{worst['K']}x{worst['N']}" if worst else None,
        "bits_identical_everywhere": not bits_bad,
        "bits_mismatch": bits_bad,
    }
    if sq:
        t = sq[0]["kernels"]["triton"].get("tops", float("nan"))
        out.update(tops_8192=t, tops_8192_ge_1400=t >= 1400)
    if m1:
        us = m1[0]["kernels"]["triton"].get("us", float("nan"))
        out.update(us_m1_2048x6144=us, us_m1_le_45=us <= 45)
    for key in ("host_ratio", "host_ratio_vs_bare_with_alloc") if host_path else ():
        if key == "host_ratio" or key in host_path:
            out.update({key: host_path[key], f"{key}_le_1_2": host_path[key] <= 1.2})
    return out


def _kernel_names(res: dict) -> list:
    """Kernel columns: triton, int_mm, plain_triton, then any extra (JSON may sort keys)."""
    names = list(res["rows"][0]["kernels"]) if res["rows"] else []
    first = [x for x in ("triton", "int_mm", "plain_triton") if x in names]
    return first + sorted(x for x in names if x not in first)


def _fmt(v, spec=".1f") -> str:
    return "—" if v is None or v != v else format(v, spec)


def _gpu_cell(kv: dict) -> str:
    if "error" in kv:
        return f"error: {kv['error'][:60]}"
    pct = f" ({100 * kv['fraction_of_peak']:.0f} %)" if "fraction_of_peak" in kv else ""
    return f"{_fmt(kv['us'])} µs / {_fmt(kv['tops'])}{pct}"


def render_gpu_markdown(res: dict) -> str:
    """bench.md: environment, the table (µs, TOPS, % of peak; ratio to the best peer; bits), host path, acceptance."""
    env, peak = res["environment"], res["peak_tops"]
    names = _kernel_names(res)
    lines = [
        f"# int8conf bench --gpu: {env['device']}",
        "",
        f"torch {env['torch']}, triton {env['triton']}. Peak dense int8: {_fmt(peak, ',.0f')} TOPS. "
        f"Timing: {res['timing']}. Bits: {res['bits_reference']}.",
        "",
        "Kernels: `triton` = the built-in (TRITON_STYLE); `int_mm` = `torch._int_mm` + eager torch epilogue "
        "(CUTLASS_STYLE; M <= 16 zero-padded to 17 rows); `plain_triton` = a plain autotuned Triton int8 GEMM "
        "(conformance/bench/gemm.py, grouped order, same epilogue as `triton`)"
        + "".join(f"; `{x}`" for x in names if x not in ("triton", "int_mm", "plain_triton"))
        + ". Each cell: µs per call end to end / TOPS (% of peak). Ratio = `triton` TOPS / best of `int_mm` and "
        "`plain_triton`.",
        "",
    ]
    head = "| M×K×N | layers | " + " | ".join(f"`{x}`" for x in names) + " | ratio | bits | triton config |"
    lines += [head, "|" + "---|" * (len(names) + 5)]
    for r in res["rows"]:
        cells = [_gpu_cell(r["kernels"][x]) for x in names]
        bits = r["bits"]
        ok = all(r["kernels"][x].get("bits_ok") for x in names)
        btxt = (
            f"identical ({bits.get('rows_checked')}/{bits.get('rows_total')} rows)"
            if ok
            else "MISMATCH " + ", ".join(f"{x}:{bits.get(x)}" for x in names if not r["kernels"][x].get("bits_ok"))
        )
        lines.append(
            f"| {r['M']}×{r['K']}×{r['N']} | {'; '.join(r['layers'])} | "
            + " | ".join(cells)
            + f" | {_fmt(r['triton_vs_best_peer'], '.2f')}× | {btxt} | "
            f"{r['kernels']['triton'].get('config', '')} |"
        )
    hp = res.get("host_path")
    if hp:
        lines += [
            "",
            "## Host path at M = 1 (K = 2048, N = 6144)",
            "",
            f"- `triton` call: {hp['triton_host_us']:.1f} µs host, {hp['triton_e2e_us']:.1f} µs end to end; bare "
            f"launch of the same compiled kernel and configuration (`{hp['config']}`, arguments precomputed, output "
            f"preallocated): {hp['bare_launch_host_us']:.1f} µs host, {hp['bare_launch_e2e_us']:.1f} µs end to end; "
            f"ratio {hp['host_ratio']:.2f}×",
            "- bare launch plus allocating its output (`torch.empty_like`, which every call that returns a new tensor "
            f"pays): {hp.get('bare_launch_alloc_host_us', float('nan')):.1f} µs host; ratio "
            f"{hp.get('host_ratio_vs_bare_with_alloc', float('nan')):.2f}×",
            f"- plain autotuned Triton call: {hp['plain_triton_host_us']:.1f} µs host",
        ]
        if "raw_launch_host_us" in hp:
            lines.append(
                "- the compiled kernel's own launcher (`CompiledKernel.run`, what `triton` calls after its first "
                f"launch; no binding or cache lookup): {hp['raw_launch_host_us']:.1f} µs host, "
                f"{hp['raw_launch_alloc_host_us']:.1f} µs with its output allocation "
                f"(`triton` call / that: {hp['host_ratio_vs_raw_with_alloc']:.2f}×)"
            )
    acc = res["acceptance"]
    lines += ["", "## Acceptance", ""] + [f"- {k}: {v}" for k, v in acc.items()]
    return "\n".join(lines) + "\n"


def plot_roofline(res: dict, path) -> None:
    """Roofline-style PNG: TOPS against arithmetic intensity (ops per byte of
    int8 operands + bf16 output), one marker per kernel, with the compute roof
    (peak TOPS) and the memory roof (bandwidth x intensity) when known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    names = _kernel_names(res)
    markers = dict(zip(names, "osD^vx+*"))
    ais = []
    for x in names:
        xs, ys = [], []
        for r in res["rows"]:
            kv, m, k, n = r["kernels"][x], r["M"], r["K"], r["N"]
            if "tops" in kv and kv["tops"] == kv["tops"]:
                xs.append(2.0 * m * k * n / (m * k + n * k + 2 * m * n))
                ys.append(kv["tops"])
        ais += xs
        ax.scatter(xs, ys, marker=markers.get(x, "o"), label=x, alpha=0.75)
    if ais:
        lo, hi = min(ais) / 1.5, max(ais) * 1.5
        if res.get("peak_tops"):
            ax.plot([lo, hi], [res["peak_tops"]] * 2, "k--", lw=1, label=f"peak {res['peak_tops']:,.0f} TOPS")
        if res.get("peak_tbs"):  # ops/byte x TB/s = TOPS, capped by the compute roof
            xs = [lo * (hi / lo) ** (i / 64) for i in range(65)]
            ys = [min(v * res["peak_tbs"], res.get("peak_tops") or 1e9) for v in xs]
            ax.plot(xs, ys, "k:", lw=1, label=f"HBM {res['peak_tbs']} TB/s")
    ax.set(xscale="log", yscale="log")
    ax.set_xlabel("arithmetic intensity (int8 ops / byte of A, B and bf16 output)")
    ax.set_ylabel("TOPS (end to end per call)")
    ax.set_title(f"int8conf bench --gpu: {res['environment']['device']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_gpu_reports(res: dict, out_root) -> dict:
    """Write ``<out_root>/<device slug>/bench.{json,md,png}`` and ``triton_pins.json`` (the tuner's choices as a
    ``builtin_triton.PINS_ENV`` table) atomically; returns the paths written (no ``png`` key when matplotlib, the
    ``plots`` extra, is not installed)."""
    d = Path(out_root) / device_slug(res["environment"]["device"])
    d.mkdir(parents=True, exist_ok=True)
    paths = {"json": d / "bench.json", "md": d / "bench.md", "pins": d / "triton_pins.json"}
    atomic_write_json(paths["json"], res, indent=1)
    atomic_write_json(paths["pins"], bt.pins_from_tuning(res.get("tuning") or {}), indent=1)
    atomic_write_text(paths["md"], render_gpu_markdown(res))
    if importlib.util.find_spec("matplotlib") is None:
        print("bench: matplotlib not installed (pip install 'int8conf[plots]'): no bench.png")
        return paths
    with tempfile.NamedTemporaryFile(suffix=".png", dir=d, delete=False) as f:
        tmp = f.name
    plot_roofline(res, tmp)
    Path(tmp).chmod(0o644)  # NamedTemporaryFile creates 0600
    Path(tmp).replace(d / "bench.png")
    paths["png"] = d / "bench.png"
    return paths
