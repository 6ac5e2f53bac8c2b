"""One-line reports of where two integer tensors first differ (test helper).

The CUDA-marked bit-exactness tests run on a GPU machine whose output is
often cut short, so a failure must name its cause in one line: which check,
the first differing index, both values, how many elements differ, and the
input values at that index when the caller passes them.
"""

from __future__ import annotations

import torch


def first_difference(got: torch.Tensor, want: torch.Tensor, what: str = "", inputs: dict | None = None) -> str:
    """Describe how ``got`` differs from ``want`` ('' when bit-identical).

    Args:
        got, want: tensors on any device (compared on the CPU, dtype and
            shape included; values as Python ints/floats).
        what: name of the check, printed first.
        inputs: optional name -> tensor of the inputs, indexed at the first
            differing flat index when they have the same number of elements
            (e.g. ``{"x": x, "k": k}`` of an element-wise op).
    Returns:
        '' if equal, else one line: ``what: first diff at index (i, j)
        [flat f]: got G want W (n of N differ) x=... k=...``, or the shape /
        dtype mismatch.
    """
    g, w = got.detach().cpu(), want.detach().cpu()
    head = f"{what}: " if what else ""
    if g.shape != w.shape:
        return f"{head}shape {tuple(g.shape)} != expected {tuple(w.shape)}"
    if g.dtype != w.dtype:
        return f"{head}dtype {g.dtype} != expected {w.dtype}"
    if torch.equal(g, w):
        return ""
    ne = (g != w).reshape(-1)
    flat = int(ne.nonzero()[0, 0])
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape)) if g.dim() else ()
    gv, wv = g.reshape(-1)[flat].item(), w.reshape(-1)[flat].item()
    msg = (
        f"{head}first diff at index {idx} [flat {flat}]: got {gv} want {wv} "
        f"(diff {gv - wv}; {int(ne.sum())} of {ne.numel()} differ)"
    )
    for name, t in (inputs or {}).items():
        t = torch.as_tensor(t).detach().cpu().reshape(-1)
        if t.numel() == ne.numel():
            msg += f" {name}={t[flat].item()}"
    return msg


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str = "", inputs: dict | None = None) -> None:
    """``assert torch.equal(got.cpu(), want.cpu())`` whose failure message is
    ``first_difference`` (see there for the arguments)."""
    msg = first_difference(got, want, what, inputs)
    assert not msg, msg
