"""Reproducers: a case's operands (exact bits) in one safetensors file whose metadata says what to
re-run (:func:`save_operands` / :func:`load_operands`).

* Scoreboard: ``<kernel>-<device>-<check>.safetensors`` with metadata kernel, device, check, summary;
  ``int8conf scoreboard --repro FILE`` (``scoreboard.board.rerun_repro``) re-evaluates it.
* Gate and check (a case that crashed or hung): a directory ``operands.safetensors`` + ``case.json`` (kernel
  name and fault, case id, what happened, operand digests) + ``command.sh``, which runs
  ``python -m conformance.runtime.repro DIR [--timeout S]``: the kernel **in this process, without
  isolation**, so a segfault or abort reproduces as itself (shell status 139 / 134); ``--timeout S`` dumps every
  thread's stack and exits 1. Exit 0: the kernel returned; 1: it raised or returned garbage. (``int8conf replay
  DIR`` re-judges the checks on it, the kernel in a child process.)
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open
from safetensors.torch import save

from conformance.kernels.runner import run_kernel
from conformance.runtime.pool import KernelRef
from reference.errors import Int8confError
from reference.fileio import atomic_write_bytes, atomic_write_text, read_json_object
from reference.model.checkpoint import SAFETENSORS_READ_ERRORS
from reference.operands import GemmOperands, storage_span, tensor_digest

_DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16, "torch.float32": torch.float32}


def _tensors(ops: GemmOperands) -> dict:
    tensors = {"a": ops.a, "b": ops.b, "scale_a": ops.scale_a, "scale_b": ops.scale_b}
    return tensors if ops.bias is None else {**tensors, "bias": ops.bias}


#: the key suffix of a strided operand's storage span (its first element to its last, padding bytes included)
SPAN = ".span"


def save_operands(path, ops: GemmOperands, meta: dict) -> None:
    """Write ``a, b, scale_a, scale_b[, bias]`` (contiguous values) and ``meta`` (str values) plus the out dtype,
    scale mode and case name as safetensors metadata; a strided operand (a padded or ``w.t()`` view) also as its
    storage span (key ``<name>.span``) and strides (metadata ``<name>.stride``), so that it loads with its layout."""
    info = {"out_dtype": str(ops.out_dtype), "scale_mode": ops.scale_mode, "case": ops.name or "", **meta}
    blob_tensors = {}
    for k, v in _tensors(ops).items():
        v = v.detach().cpu()
        blob_tensors[k] = v.contiguous()
        if v.numel() and not v.is_contiguous():
            blob_tensors[k + SPAN] = v.as_strided((storage_span(v),), (1,), v.storage_offset()).clone()
            info[k + ".stride"] = json.dumps(list(v.stride()))
    blob = save(blob_tensors, metadata=info)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(path), blob)


def load_operands(path, what: str = "--repro") -> tuple[GemmOperands, dict]:
    """``(ops, metadata)`` of a :func:`save_operands` file. Raises Int8confError (one line)."""
    p = Path(path)
    if not p.is_file():
        raise Int8confError(f"{what} {str(path)!r}: no such file")
    try:
        with safe_open(str(p), "pt") as f:
            meta = dict(f.metadata() or {})
            t = {k: f.get_tensor(k) for k in f.keys()}
    except SAFETENSORS_READ_ERRORS as e:  # missing or truncated file
        raise Int8confError(f"{what} {str(path)!r}: not a reproducer file ({type(e).__name__})") from None
    if not {"a", "b", "scale_a", "scale_b"} <= set(t):
        raise Int8confError(f"{what} {str(path)!r}: missing operands")
    for k in [k for k in t if k.endswith(SPAN)]:  # a strided operand: its layout back over its storage span
        name, span = k[: -len(SPAN)], t.pop(k)
        try:
            t[name] = span.as_strided(tuple(t[name].shape), tuple(json.loads(meta[name + ".stride"])), 0)
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise Int8confError(f"{what} {str(path)!r}: bad layout of {name} ({type(e).__name__})") from None
    dtype = _DTYPES[meta.get("out_dtype", "torch.bfloat16")]
    name, mode = meta.get("case", ""), meta.get("scale_mode", "synthetic")
    ops = GemmOperands(
        t["a"], t["b"], t["scale_a"], t["scale_b"], t.get("bias"), dtype, name, mode, {"source": "repro"}
    )
    return ops, meta


def save_repro(path: Path, ops, kernel: str, device: str, check: str, summary: str) -> None:
    """The scoreboard's reproducer of one failing (kernel, device, check)."""
    save_operands(path, ops, {"kernel": kernel, "device": device, "check": check, "summary": summary[:500]})


def load_repro(path) -> tuple:
    """``(ops, meta)`` of a scoreboard reproducer. Raises Int8confError."""
    ops, meta = load_operands(path)
    if "kernel" not in meta:
        raise Int8confError(f"--repro {str(path)!r}: missing operands or kernel metadata")
    return ops, meta


def reproducer_dirname(case: str) -> str:
    """The folder name of ``case``'s reproducer: its id with every run of other characters than
    ``[A-Za-z0-9._-]`` as one ``_``, at most 120 characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", case).strip("_")[:120] or "case"


def save_reproducer(directory, ops: GemmOperands, kernel_ref: Optional[dict], case: str, what: dict) -> Path:
    """Write the gate's reproducer directory of one case (module docstring); returns it.

    ``kernel_ref``: ``KernelRef.to_dict()``, or None for an in-memory kernel (not re-runnable by name);
    ``what``: ``{"status", "error", "signal", "exitcode", "log_tail", ...}``.
    """
    d = Path(directory)
    label = kernel_ref["label"] if kernel_ref else "(in-memory)"
    save_operands(d / "operands.safetensors", ops, {"kernel": label})
    tensors = _tensors(ops)
    json_meta = (str, int, float, bool, type(None), list, dict)
    info = {
        "format": "int8conf.gate.repro",
        "version": 1,
        "case": case,
        "kernel": kernel_ref,
        "out_dtype": str(ops.out_dtype),
        "scale_mode": ops.scale_mode,
        "name": ops.name,
        "meta": {k: v for k, v in (ops.meta or {}).items() if isinstance(v, json_meta)},
        "shape": [ops.m, ops.k, ops.n],
        "operand_digests": ops.digests(),
        "strides": {k: list(v.stride()) for k, v in tensors.items()},  # kept in the file too (save_operands)
        "what_happened": what,
    }
    atomic_write_text(d / "case.json", json.dumps(info, indent=1, default=str) + "\n")
    # the gate's working directory first: a kernel module found there must resolve from anywhere
    entries = [os.getcwd()] + (os.environ.get("PYTHONPATH") or "").split(os.pathsep)
    pp = os.pathsep.join(dict.fromkeys(e for e in entries if e))  # each entry once, in order
    cmd = f'{shlex.quote(sys.executable)} -m conformance.runtime.repro "$(dirname "$0")" "$@"'
    seen = f"{what.get('status')}{': ' + str(what.get('error')) if what.get('error') else ''}"
    atomic_write_text(
        d / "command.sh",
        "#!/bin/sh\n"
        f"# Re-runs kernel {label} on case {case} in this process, no isolation (int8conf saw: {seen}).\n"
        f"# Add --timeout S to print the stack of a hang after S seconds. To re-judge the checks with the kernel\n"
        "# in a child process instead: int8conf replay DIR (DIR: this directory).\n"
        f"export PYTHONPATH={shlex.quote(pp)}\nexec {cmd}\n",
    )
    os.chmod(d / "command.sh", 0o755)
    return d


def load_reproducer(directory) -> tuple[GemmOperands, dict]:
    """``(operands, case.json dict)`` of a gate reproducer directory. Raises Int8confError (one line)."""
    d = Path(directory)
    info = read_json_object(d / "case.json", missing_hint="not a reproducer directory")
    if info.get("format") != "int8conf.gate.repro":
        raise Int8confError(f"{d / 'case.json'}: not an int8conf gate reproducer")
    try:
        ops, _ = load_operands(d / "operands.safetensors", what="reproducer")
    except Int8confError:
        raise Int8confError(f"{d / 'operands.safetensors'}: cannot load") from None
    ops.meta = dict(info.get("meta") or {})
    if ops.digests() != info.get("operand_digests"):
        raise Int8confError(f"{d}: operand digests do not match case.json (files modified?)")
    return ops, info


def main(argv=None) -> int:
    """``python -m conformance.runtime.repro DIR [--timeout S] [--device D]`` (module docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m conformance.runtime.repro", description="Re-run a gate reproducer in this process."
    )
    p.add_argument("dir")
    p.add_argument("--timeout", type=float, metavar="S", help="print every thread's stack and exit 1 after S seconds")
    p.add_argument("--device")
    args = p.parse_args(argv)
    try:
        ops, info = load_reproducer(args.dir)
        if not info.get("kernel"):
            raise Int8confError("this reproducer's kernel was an in-memory KernelSpec; it cannot be resolved by name")
        spec = KernelRef.from_dict(info["kernel"]).resolve()
    except Int8confError as e:
        print(f"repro: error: {e}", file=sys.stderr)
        return 2
    faulthandler.enable(all_threads=True)
    if args.timeout:
        faulthandler.dump_traceback_later(args.timeout, exit=True)
    seen = info["what_happened"].get("status")
    print(
        f"repro: {info['kernel']['label']} on {info['case']} (M,K,N={info['shape']}); int8conf saw: {seen}", flush=True
    )
    run = run_kernel(spec, ops, device=args.device)
    faulthandler.cancel_dump_traceback_later()
    if run.output is None or run.error:
        print(f"repro: kernel returned, with error: {run.error}", flush=True)
        return 1
    print(f"repro: kernel returned normally; output digest {tensor_digest(run.output)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
