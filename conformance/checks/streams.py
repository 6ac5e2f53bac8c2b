"""C15 streams_devices: the kernel on a non-default stream and on a second GPU gives the eager call's bits.

Stream part, per sample case (``serving.sample_cases`` with activations C13 did not use, ``serving.fresh_like``, so
no freed buffer holds their result): on a new ``torch.cuda.Stream`` ``s`` the input buffers are made (zeros), a long
kernel is queued (:data:`LONG_MATMULS` float32 matmuls of :data:`LONG_N` squared, some ms), the operands are copied
into the buffers after it, the kernel is called under ``with torch.cuda.stream(s)`` and its output copied on ``s``
right after the call (as the next layer reads it, no sync), the copy compared after ``s.synchronize()``. A kernel on
a stream of its own that does not wait for the caller's reads the zeros; one the caller's stream does not wait for is
read before it is done: its bits differ from the eager call's (default stream, synchronized) on the same operands.
Device part: the operands on the second GPU while the first stays current: the output must be on that GPU with the
eager bits (a kernel that hard-codes ``cuda:0`` or the current device fails); with one GPU that part is ``n/a`` ("one
GPU here"). CUDA only: elsewhere the check is ``n/a`` with the reason."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from conformance.checks import serving
from conformance.checks.graph_replay import na_reason
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import cuda_device

CHECK_ID, NAME = "C15", "streams_devices"
#: the long kernel queued before the inputs on the caller's stream: LONG_MATMULS matmuls [LONG_N, LONG_N] float32
LONG_N, LONG_MATMULS = 4096, 4
ONE_GPU = "one GPU here"


def _eager(spec, ops, device: str) -> Any:
    out = serving.call(serving.kernel_fn(spec, ops), serving.on_device(ops, device), ops.out_dtype)
    torch.cuda.synchronize(device)
    return out.clone() if isinstance(out, torch.Tensor) else out  # a kernel may hand back a buffer it reuses


def stream_case(spec, ops, device: str, eager) -> dict:
    """The stream part on one case: ``{"case", "ok", "line"}``."""
    label = serving.case_label(ops)
    src = serving.on_device(ops, device)
    torch.cuda.synchronize(device)
    s = torch.cuda.Stream(device)
    try:
        with torch.cuda.stream(s):
            bufs = {k: None if v is None else torch.zeros_like(v) for k, v in src.items()}
            x = torch.full((LONG_N, LONG_N), 1.0 / LONG_N, device=device)
            for _ in range(LONG_MATMULS):
                x = x @ x
            for k, v in src.items():
                buf = bufs[k]
                if v is not None and buf is not None:
                    buf.copy_(v)
            out = serving.call(serving.kernel_fn(spec, ops), bufs, ops.out_dtype)
            got = out.clone() if isinstance(out, torch.Tensor) else out  # the next layer's read, queued on s
        s.synchronize()
    except Exception as e:  # noqa: BLE001 -- the kernel's own failure, reported
        torch.cuda.synchronize(device)
        return {
            "case": label,
            "ok": False,
            "kind": "raised",
            "line": f"on a side stream raised {serving.exception_line(e)}",
        }
    torch.cuda.synchronize(device)
    diff = serving.bit_difference(got, eager)
    if diff is not None:
        return {"case": label, "ok": False, "kind": "stream", "line": f"on a side stream, read after its sync: {diff}"}
    return {"case": label, "ok": True, "line": "side stream: bit-identical"}


def device_case(spec, ops, current: str, other: str, eager) -> dict:
    """The device part on one case: the operands on ``other`` while ``current`` is the current device."""
    label = serving.case_label(ops)
    try:
        with torch.cuda.device(current):
            out = serving.call(serving.kernel_fn(spec, ops), serving.on_device(ops, other), ops.out_dtype)
            torch.cuda.synchronize(other)
    except Exception as e:  # noqa: BLE001 -- the kernel's own failure, reported
        return {"case": label, "ok": False, "kind": "raised", "line": f"on {other} raised {serving.exception_line(e)}"}
    if isinstance(out, torch.Tensor) and out.device != torch.device(other):
        return {"case": label, "ok": False, "kind": "device", "line": f"operands on {other}, output on {out.device}"}
    diff = serving.bit_difference(out, eager)
    if diff is not None:
        return {"case": label, "ok": False, "kind": "device", "line": f"on {other}: {diff}"}
    return {"case": label, "ok": True, "line": f"on {other}: bit-identical"}


def check_streams_devices(spec, cases: Sequence = (), device: Optional[str] = None, seed: int = 0) -> CheckResult:
    """C15 (module docstring) for ``spec`` on ``device`` (None: where the kernel runs); ``cases`` (the suite's) are
    not used. Evidence: ``stream`` and ``device`` (rows ``case``, ``ok``, ``line``), ``devices`` (the two GPUs, or
    ``device_part``: why that part is n/a)."""
    why = na_reason(spec, device)
    if why is not None:
        return not_applicable(CHECK_ID, "streams and devices are CUDA's: " + why)
    dev = str(torch.device(cuda_device(spec, device) or "cuda"))
    if dev == "cuda":
        dev = f"cuda:{torch.cuda.current_device()}"
    index = torch.device(dev).index or 0
    other = f"cuda:{1 if index == 0 else 0}" if torch.cuda.device_count() > 1 else None
    stream_rows: list[dict] = []
    device_rows: list[dict] = []
    with torch.cuda.device(dev):
        for i, case in enumerate(serving.sample_cases(spec, seed)):
            ops = serving.fresh_like(spec, case, seed + 200 + i)
            try:
                eager = _eager(spec, ops, dev)
            except Exception as e:  # noqa: BLE001 -- the kernel's own failure, reported
                row = {"case": serving.case_label(ops), "ok": False, "kind": "raised"}
                stream_rows.append(dict(row, line=f"eager call raised {serving.exception_line(e)}"))
                continue
            stream_rows.append(stream_case(spec, ops, dev, eager))
            if other is not None:
                device_rows.append(device_case(spec, ops, dev, other, eager))
    ev: dict[str, Any] = {"stream": stream_rows, "device": device_rows, "long_kernel": [LONG_N, LONG_MATMULS]}
    ev.update({"devices": [dev, other]} if other is not None else {"device_part": f"n/a: {ONE_GPU}"})
    bad = [r for r in stream_rows + device_rows if not r["ok"]]
    if bad:
        kind = "raised" if all(r["kind"] == "raised" for r in bad) else "kernel"
        line = f"{bad[0]['case']}: {bad[0]['line']}" + (f" ({len(bad)} failures)" if len(bad) > 1 else "")
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, line, dict(ev, failure_kind=kind))
    second = f"bit-identical on {other} too" if other is not None else f"second device n/a: {ONE_GPU}"
    line = f"on a side stream (read after its sync): bit-identical on {len(stream_rows)} case(s); {second}"
    return CheckResult(CHECK_ID, NAME, Verdict.PASS, line, ev)
