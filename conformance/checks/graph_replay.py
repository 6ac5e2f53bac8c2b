"""C13 graph_replay: the kernel captured in a CUDA graph and replayed on new activations gives the eager call's bits.

On each case of the sample (``serving.sample_cases``: a decode and a prefill case, then a covering array over M = 1 / 8
/ 128 / 512, the scale form, bias and out dtype) the kernel is called :data:`WARMUP_CALLS` times on static input buffers
on a side stream (torch's CUDA-graph docs: warm up outside the capture), captured once in a ``torch.cuda.CUDAGraph``,
then a NEW activation ``a`` and activation scale of the same shapes / dtypes / scale form are copied into the captured
buffers (the weight, its scale and the bias stay: a serving stack's decode graph replays new tokens through the same
layer, and a kernel may pack its weight once: ``serving.fresh_like``), the graph replayed and the output it wrote
compared bit for bit with an eager call on them. A capture that raises (a host read such as ``.item()``, a sync, work on
an uncaptured stream) fails with the exception's first line; a replay whose bits differ (a value read on the host at
capture and replayed stale, a pointer cached outside the graph) fails with the count. An output the kernel allocated
outside the graph pool is fine when its bits match. CUDA only: elsewhere ``n/a`` with the reason."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from conformance.checks import serving
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import cuda_device

CHECK_ID, NAME = "C13", "graph_replay"
#: eager calls on the side stream before the capture (a JIT compiles, an allocator settles)
WARMUP_CALLS = 3
CPU_REASON = "CUDA graphs need a CUDA device: "


def na_reason(spec, device: Optional[str]) -> Optional[str]:
    """Why C13 / C15 cannot run here (None when the kernel runs on a CUDA device)."""
    if cuda_device(spec, device) is not None:
        return None
    if "cuda" not in spec.devices:
        return f"the kernel declares no CUDA device (devices {list(spec.devices)})"
    return "no CUDA device here (torch.cuda.is_available() is False)"


def replay_case(spec, ops, new, device: str) -> dict:
    """One case: ``{"case", "ok", "line"}`` (``line``: why it failed, or what passed)."""
    label = serving.case_label(ops)
    static, fresh = serving.on_device(ops, device), serving.on_device(new, device)
    cur = torch.cuda.current_stream(device)
    torch.cuda.synchronize(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(cur)
    try:
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                serving.call(serving.kernel_fn(spec, ops), static, ops.out_dtype)
        cur.wait_stream(side)
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 -- the kernel's own failure, reported
        return {
            "case": label,
            "ok": False,
            "kind": "raised",
            "line": f"eager warm-up raised {serving.exception_line(e)}",
        }
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = serving.call(serving.kernel_fn(spec, ops), static, ops.out_dtype)
    except Exception as e:  # noqa: BLE001 -- a capture that raises is the finding
        torch.cuda.synchronize(device)
        return {"case": label, "ok": False, "kind": "capture", "line": f"capture raised {serving.exception_line(e)}"}
    for k, v in fresh.items():
        if v is not None:
            static[k].copy_(v)
    graph.replay()
    torch.cuda.synchronize(device)
    replayed = out.clone() if isinstance(out, torch.Tensor) else out
    eager = serving.call(serving.kernel_fn(spec, ops), serving.on_device(new, device), ops.out_dtype)
    torch.cuda.synchronize(device)
    del graph
    diff = serving.bit_difference(replayed, eager)
    if diff is not None:
        return {"case": label, "ok": False, "kind": "replay", "line": f"replay on new activations: {diff}"}
    return {"case": label, "ok": True, "line": f"replay bit-identical to the eager call ({ops.out_dtype})"}


def check_graph_replay(spec, cases: Sequence = (), device: Optional[str] = None, seed: int = 0) -> CheckResult:
    """C13 (module docstring) for ``spec`` on ``device`` (None: where the kernel runs); ``cases`` (the suite's) are
    not used: the sample is C13's own. Evidence: ``cases`` (``case``, ``ok``, ``line`` each)."""
    why = na_reason(spec, device)
    if why is not None:
        return not_applicable(CHECK_ID, CPU_REASON + why)
    dev = str(torch.device(cuda_device(spec, device) or "cuda"))
    if dev == "cuda":
        dev = f"cuda:{torch.cuda.current_device()}"
    rows: list[dict[str, Any]] = []
    with torch.cuda.device(dev):
        for i, ops in enumerate(serving.sample_cases(spec, seed)):
            rows.append(replay_case(spec, ops, serving.fresh_like(spec, ops, seed + 100 + i), dev))
    ev: dict[str, Any] = {"cases": rows, "device": dev, "warmup_calls": WARMUP_CALLS}
    bad = [r for r in rows if not r["ok"]]
    if bad:
        kind = "raised" if all(r["kind"] == "raised" for r in bad) else "kernel"
        line = f"{bad[0]['case']}: {bad[0]['line']}" + (f" ({len(bad)} of {len(rows)} cases)" if len(bad) > 1 else "")
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, line, dict(ev, failure_kind=kind))
    return CheckResult(
        CHECK_ID,
        NAME,
        Verdict.PASS,
        f"captured and replayed on new activations: bit-identical on {len(rows)} case(s)",
        ev,
    )
