"""Warm-up of a JIT-compiled kernel before a CUDA suite (``KernelSpec.warm_up``): the suite knows its cases, so
worker processes call the kernel once per distinct operand layout on zero-filled device tensors of that layout
(shape, strides, dtype, storage offset; dense copies where the kernel declares ``contiguous_only``), both
``scaled_mm`` and ``int_mm``. The JIT's disk cache (Triton's) then holds every variant the cases need, so the
cases never wait on a compiler. Outputs are discarded: nothing here decides a verdict. Layouts are grouped by
the compiled variant the kernel names for them (``warm_up`` a callable: one compile each), else by what a JIT
usually specializes on (:func:`_jit_key`); idle workers take the next group, largest first, so no worker is left
with a long queue of compiles while the others wait. A warm-up that called every layout leaves a marker in the
artifact cache (``<cache>/warm-up/<key>``; key: kernel source digest, the layouts (the property test's examples'
included), device, torch / Triton versions, ``TRITON_CACHE_DIR`` and ``INT8CONF_TRITON_SPECIALIZE``), and the
same warm-up is then skipped."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

import torch
import triton

import faults  # noqa: F401 -- registers the resolver of injected names (triton+F4@all#s0) in every worker
from conformance.checks import batch_invariance
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import SPECIALIZE_ENV
from conformance.runtime.import_noise import silence_import_noise
from conformance.runtime.threads import available_cores
from reference.fileio import atomic_write_text, cache_location

#: the most worker processes a warm-up starts
MAX_WORKERS = 16


def _layout(t: Optional[torch.Tensor], dense: bool) -> Optional[tuple]:
    """``(shape, strides, dtype name, storage offset)`` of an operand as the kernel receives it: the runner hands a
    copy with storage offset 0 (``reference.operands.copy_keep_layout``), so its base is as aligned as an allocation
    (a JIT specializes on pointer alignment)."""
    if t is None:
        return None
    if dense:
        t = t.contiguous()
    return tuple(t.shape), tuple(t.stride()), str(t.dtype).replace("torch.", ""), 0


def case_layout(ops, dense_operands=frozenset()) -> tuple:
    """A case's call signature: the five operand layouts and the output dtype (hashable, picklable)."""
    names = ("a", "b", "scale_a", "scale_b", "bias")
    return tuple(_layout(getattr(ops, n), n in dense_operands) for n in names) + (str(ops.out_dtype),)


def c9_layouts(cases: Sequence, dense_operands=frozenset()) -> list:
    """The call signatures C9 (``checks.batch_invariance``) will make: each case it selects (and its own probes)
    alone (M = 1) and in every ``BATCH_SIZES`` batch, built by C9's own builders."""
    out = []
    g = torch.Generator().manual_seed(0)  # values do not matter: only layouts are kept
    for ops, _ in batch_invariance.select_cases(list(cases)) + [(p, None) for p in batch_invariance.probe_cases()]:
        out.append(case_layout(batch_invariance.alone_operands(ops, 0), dense_operands))
        for m in batch_invariance.BATCH_SIZES:
            out.append(case_layout(batch_invariance.batch_operands(ops, [0], m, g)[0], dense_operands))
    return out


def _zeros(layout: Optional[tuple], device: str) -> Optional[torch.Tensor]:
    if layout is None:
        return None
    shape, stride, dtype, offset = layout
    span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
    flat = torch.zeros(offset + span, dtype=getattr(torch, dtype), device=device)
    return flat.as_strided(shape, stride, offset)


_SPECS: dict = {}


def _worker_spec(kernel_name: str):
    """Worker: the KernelSpec of ``kernel_name``, resolved once per worker process."""
    if kernel_name not in _SPECS:
        silence_import_noise()
        _SPECS[kernel_name] = get_kernel(kernel_name)
    return _SPECS[kernel_name]


def _call_args(lay: tuple, device: str) -> tuple:
    """``(a, b, scale_a, scale_b, bias, out_dtype)`` of a layout: zero-filled device tensors of that layout."""
    return tuple(_zeros(x, device) for x in lay[:5]) + (getattr(torch, lay[5].replace("torch.", "")),)


def _warm_group(kernel_name: str, layouts: list, device: str) -> tuple[int, str, float, int]:
    """Worker: call ``kernel_name`` once per layout; ``(calls made, first error line or "", seconds, process id)``."""
    t0 = time.perf_counter()
    spec = _worker_spec(kernel_name)
    done, err = 0, ""
    for lay in layouts:
        a, b, sa, sb, bias, out_dtype = _call_args(lay, device)
        try:
            spec.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, bias=bias)
            if spec.int_mm is not None and lay[6]:
                spec.int_mm(a, b)
            done += 1
        except Exception as e:  # noqa: BLE001 -- the case itself reports a kernel's error
            err = err or f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return done, err, time.perf_counter() - t0, os.getpid()


def _variant_keys(kernel_name: str, layouts: list, device: str) -> list:
    """Worker: the kernel's own variant key (``KernelSpec.warm_up`` callable) of each layout, or None where it
    raised (that layout is then grouped alone)."""
    key_of = _worker_spec(kernel_name).warm_up
    keys = []
    for lay in layouts:
        a, b, sa, sb, bias, out_dtype = _call_args(lay, device)
        try:
            keys.append(key_of(a, b, sa, sb, out_dtype=out_dtype, bias=bias))
        except Exception:  # noqa: BLE001 -- a layout the kernel refuses: its own group, the case reports the error
            keys.append(None)
    return keys


def reload_name(spec) -> str:
    """The name a fresh process resolves ``spec`` by: a loaded kernel's module / entry point / adapter name,
    else its own name (built-ins, fault-injected names)."""
    kind, _, rest = spec.origin.partition(":")
    return rest if kind in ("module", "entry-point", "adapter") and rest else spec.name


def _jit_key(lay: tuple) -> tuple:
    """What a JIT such as Triton specializes a variant on, roughly: M's size class, the out dtype, bias or not, and
    which sizes, strides and offsets are 1 or multiples of 16."""
    (m, k), n = lay[0][0], lay[1][0][0]
    ints = (m, n, k, *lay[0][1], *lay[1][1], lay[0][3], lay[1][3])
    return ((m > 16) + (m > 256), lay[5], lay[4] is None) + tuple((v == 1, v % 16 == 0) for v in ints)


def plan_groups(layouts: Sequence[tuple], keys: Optional[Mapping] = None) -> list[list]:
    """Distinct layouts grouped by ``keys`` (layout -> the kernel's own variant key; None: by :func:`_jit_key`), so
    a variant is compiled by one worker, not by several at once; largest group first: the order idle workers take
    them in. A layout whose key is None is a group of its own."""
    groups: dict = {}
    for lay in dict.fromkeys(layouts):
        key = _jit_key(lay) if keys is None else keys.get(lay)
        groups.setdefault(("alone", lay) if key is None else key, []).append(lay)
    return sorted(groups.values(), key=len, reverse=True)


def marker_path(spec, layouts: list, device: str) -> Path:
    """Where a complete warm-up of ``layouts`` for ``spec`` on ``device`` leaves its marker (module docstring)."""
    # no CUDA call: this process must not initialize CUDA before the suite forks its workers
    key = [spec.source_digest, spec.name, layouts, str(device), torch.__version__, torch.version.cuda]
    key += [triton.__version__, os.environ.get("TRITON_CACHE_DIR", ""), os.environ.get(SPECIALIZE_ENV, "")]
    return cache_location() / "warm-up" / hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


def warm_layouts(spec, cases: Sequence, extra: Sequence = ()) -> list:
    """The distinct call signatures (:func:`case_layout`) a warm-up of ``spec`` covers, each with one more element,
    whether the suite also calls ``int_mm`` on it: the fixed ``cases`` and the ``extra`` operands (the property test's
    examples) in first-use order (True), then C9's other calls on them (:func:`c9_layouts`; ``scaled_mm`` only)."""
    dense = spec.dense_operands()
    both = list(dict.fromkeys([case_layout(c, dense) for c in cases] + [case_layout(o, dense) for o in extra]))
    seen = set(both)
    c9 = [lay for lay in dict.fromkeys(c9_layouts(cases, dense)) if lay not in seen]
    return [lay + (True,) for lay in both] + [lay + (False,) for lay in c9]


def warm_up(
    spec, cases: Sequence, device: str, workers: Optional[int] = None, say=lambda s: None, extra: Sequence = ()
) -> dict:
    """Warm ``spec`` (resolved by name in each worker) for :func:`warm_layouts` of ``cases`` and ``extra`` (operands
    the suite also evaluates) on CUDA ``device``: :func:`warm_up_layouts`."""
    return warm_up_layouts(spec, warm_layouts(spec, cases, extra), device, workers, say)


def warm_up_layouts(
    spec, layouts: Sequence[tuple], device: str, workers: Optional[int] = None, say=lambda s: None, executor=None
) -> dict:
    """Compile ``spec`` for ``layouts`` (:func:`warm_layouts`' form: a :func:`case_layout` plus whether ``int_mm`` is
    called too) on CUDA ``device``, each variant once (:func:`plan_groups`), in ``executor`` (a process pool whose
    workers may resolve ``spec`` by name; its ``workers`` processes) or a pool of its own; returns ``{"layouts",
    "workers", "seconds", "calls", "error"}`` (``"skipped"`` when its marker exists). Never raises: a failed warm-up
    only costs time."""
    layouts = list(layouts)
    marker = marker_path(spec, layouts, device)
    if os.path.exists(marker):
        say(f"{spec.name}: {len(layouts)} operand layouts compiled by an earlier run (warm-up skipped)")
        return {"layouts": len(layouts), "workers": 0, "seconds": 0.0, "calls": 0, "error": "", "skipped": True}
    distinct = list(dict.fromkeys(layouts))
    own_keys = callable(spec.warm_up)
    n = workers or max(1, min(MAX_WORKERS, available_cores(), len(distinct)))  # this process only waits
    n = min(n, len(distinct))
    say(f"{spec.name}: compiling {len(layouts)} operand layouts in {n} processes before the cases run")
    t0 = time.perf_counter()
    calls, err = 0, ""
    busy: dict[int, float] = {}
    groups: list = []
    try:
        with contextlib.ExitStack() as stack:
            ex = executor or stack.enter_context(
                cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
            )
            name = reload_name(spec)
            keys = None
            if own_keys:  # the workers name each layout's variant (no launch), then each variant compiles once
                chunks = [distinct[i::n] for i in range(n)]
                got = ex.map(_variant_keys, [name] * n, chunks, [device] * n)
                keys = {lay: k for chunk, ks in zip(chunks, got) for lay, k in zip(chunk, ks)}
            groups = plan_groups(distinct, keys)
            say(f"{spec.name}: {len(groups)} {'compiled variants' if own_keys else 'groups'} to compile")
            for fut in cf.as_completed([ex.submit(_warm_group, name, g, device) for g in groups]):
                done, e, took, pid = fut.result()
                calls, err = calls + done, err or e
                busy[pid] = busy.get(pid, 0.0) + took
    except Exception as e:  # noqa: BLE001 -- e.g. a kernel a fresh process cannot resolve
        err = f"{type(e).__name__}: {str(e).strip()[:160]}"
    secs = time.perf_counter() - t0
    if calls == len(layouts):
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(marker, f"{spec.name}: {len(layouts)} layouts\n")
        except OSError:  # a read-only cache only costs the next run its warm-up
            pass
    per_process = sorted(round(v, 2) for v in busy.values())
    spread = f"; busy per process {per_process[0]:.1f}-{per_process[-1]:.1f} s" if per_process else ""
    say(
        f"{spec.name}: compiled in {secs:.1f} s ({calls} of {len(layouts)} layouts warm{spread}{'; ' + err if err else ''})"
    )
    return {
        "layouts": len(layouts),
        "workers": len(per_process),
        "groups": len(groups),
        "seconds": round(secs, 2),
        "calls": calls,
        "error": err,
        "process_seconds": per_process,
    }
