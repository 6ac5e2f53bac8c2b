"""Re-runnable reproducers of cases that crashed or hung (CUTLASS-testbed style).

:func:`save_reproducer` writes a directory::

    <dir>/operands.safetensors   a, b, scale_a, scale_b[, bias]  (exact bits)
    <dir>/case.json              kernel (name + fault), case id, out dtype,
                                 scale mode, meta, what happened, operand digests
    <dir>/command.sh             the exact command that re-runs it

``python -m conformance.runtime.repro DIR [--timeout S]`` loads the operands,
resolves the kernel and calls it **in this process, without isolation**, so
a segfault or abort reproduces as itself (exit status -11 / -6 in a shell:
139 / 134); ``--timeout S`` makes ``faulthandler`` print every thread's
stack after S seconds and exit with status 1 (where a hang hangs). On a
normal return it prints the runner's verdict line and the output digest and
exits 0 (the kernel ran) or 1 (the kernel raised / returned garbage).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import torch

from reference.errors import Int8confError
from reference.fileio import atomic_write_text
from reference.operands import GemmOperands

_DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16, "torch.float32": torch.float32}


def save_reproducer(directory, ops: GemmOperands, kernel_ref: Optional[dict], case: str, what: dict) -> Path:
    """Write the reproducer of one case (module docstring).

    Args:
        directory: target directory (created; existing files replaced).
        ops: the case's operands.
        kernel_ref: ``KernelRef.to_dict()`` or None for an in-memory kernel
            (the command then cannot re-resolve it; case.json says so).
        case: case id.
        what: ``{"status", "error", "signal", "exitcode", "log_tail", ...}``.

    Returns:
        The directory.
    """
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {"a": ops.a, "b": ops.b, "scale_a": ops.scale_a, "scale_b": ops.scale_b}
    if ops.bias is not None:
        tensors["bias"] = ops.bias
    # safetensors wants contiguous tensors; strides of the case are recorded in case.json
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(d / "operands.safetensors"))
    info = {
        "format": "int8conf.gate.repro",
        "version": 1,
        "case": case,
        "kernel": kernel_ref,
        "out_dtype": str(ops.out_dtype),
        "scale_mode": ops.scale_mode,
        "name": ops.name,
        "meta": {
            k: v for k, v in (ops.meta or {}).items() if isinstance(v, (str, int, float, bool, type(None), list, dict))
        },
        "shape": [ops.m, ops.k, ops.n],
        "operand_digests": ops.digests(),
        "strides": {k: list(v.stride()) for k, v in tensors.items()},
        "what_happened": what,
    }
    atomic_write_text(d / "case.json", json.dumps(info, indent=1, default=str) + "\n")
    # the directory the gate ran in comes first: a kernel module found there (the loader puts
    # the working directory on sys.path, as pytest and python -m do) must resolve from anywhere
    pp = os.pathsep.join([os.getcwd()] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = f"export PYTHONPATH={shlex.quote(pp)}\n"
    cmd = f'{shlex.quote(sys.executable)} -m conformance.runtime.repro "$(dirname "$0")" "$@"'
    atomic_write_text(
        d / "command.sh",
        "#!/bin/sh\n"
        f"# Re-runs kernel {kernel_ref['label'] if kernel_ref else '(in-memory)'} on "
        f"case {case} in this process, no isolation (the gate saw: "
        f"{what.get('status')}{': ' + str(what.get('error')) if what.get('error') else ''}).\n"
        f"# Add --timeout S to print the stack of a hang after S seconds.\n"
        f"{env}exec {cmd}\n",
    )
    os.chmod(d / "command.sh", 0o755)
    return d


def load_reproducer(directory) -> tuple[GemmOperands, dict]:
    """``(operands, case.json dict)`` of a reproducer directory.

    Raises:
        Int8confError: missing / malformed files (one line).
    """
    from reference.fileio import read_json_object

    d = Path(directory)
    info = read_json_object(d / "case.json", missing_hint="not a gate reproducer directory")
    if info.get("format") != "int8conf.gate.repro":
        raise Int8confError(f"{d / 'case.json'}: not an int8conf gate reproducer")
    try:
        from safetensors.torch import load_file

        t = load_file(str(d / "operands.safetensors"))
    except Exception as e:  # noqa: BLE001 -- missing or truncated file
        raise Int8confError(f"{d / 'operands.safetensors'}: cannot load ({type(e).__name__})") from None
    ops = GemmOperands(
        a=t["a"],
        b=t["b"],
        scale_a=t["scale_a"],
        scale_b=t["scale_b"],
        bias=t.get("bias"),
        out_dtype=_DTYPES[info["out_dtype"]],
        name=info.get("name", ""),
        scale_mode=info.get("scale_mode", "synthetic"),
        meta=dict(info.get("meta") or {}),
    )
    if ops.digests() != info.get("operand_digests"):
        raise Int8confError(f"{d}: operand digests do not match case.json (files modified?)")
    return ops, info


def main(argv=None) -> int:
    """``python -m conformance.runtime.repro DIR [--timeout S]`` (module docstring)."""
    import faulthandler

    p = argparse.ArgumentParser(
        prog="python -m conformance.runtime.repro", description="Re-run a gate reproducer in this process."
    )
    p.add_argument("dir")
    p.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="print every thread's stack and exit 1 after S seconds"
    )
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    from conformance.kernels.runner import run_kernel
    from conformance.runtime.pool import KernelRef

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
    print(
        f"repro: {info['kernel']['label']} on {info['case']} (M,K,N={info['shape']}); "
        f"the gate saw: {info['what_happened'].get('status')}",
        flush=True,
    )
    run = run_kernel(spec, ops, device=args.device)
    faulthandler.cancel_dump_traceback_later()
    if run.output is None or run.error:
        print(f"repro: kernel returned, with error: {run.error}", flush=True)
        return 1
    from reference.operands import tensor_digest

    print(f"repro: kernel returned normally; output digest {tensor_digest(run.output)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
