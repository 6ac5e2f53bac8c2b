"""Device read-backs a sweep layer cell makes: pinned per fault, so a change
that brings back a per-check or per-count read-back (an ``int()`` /
``bool()`` / ``.item()`` / ``.tolist()`` of a tensor, ``torch.equal``,
``nonzero``: one host-device sync each on a GPU) on the per-cell hot path
fails here (issue 7f; ``reports/sweep/h200-paper-scale/NOTE.md``).

Counted with a ``TorchDispatchMode`` (``_local_scalar_dense``, ``equal``,
``is_nonzero``, ``nonzero``) plus every ``Tensor.tolist`` call (on the CPU it
dispatches no aten op, on a GPU it is a device-to-host copy). On the CPU the
count also includes a few host-only reads that are no device sync on a GPU
(the subnormal-flush probe of ``reference.bits.ieee_subnormals``, fault
masks built on the CPU); they are deterministic, so they are pinned too.
"""

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import conformance.sweep.runner as R
from conformance.sweep.cells import layer_cells
from conformance.sweep.runner import SweepTask, run_layer_batch
from sweep_spec import default_capture_sweep_spec

LAYER = "model.layers.0.self_attn.k_proj"   # 64 x 384 x 128
_SYNCS = ("_local_scalar_dense", "equal", "is_nonzero", "nonzero")
#: most read-backs per cell, by (fault, scale mode), kernel ``cpu``, coverage
#: ``one``, after the batch's first cell (before issue 7f, d77a9ed: 17-59 per cell)
BUDGET = {("F1", "own"): 11, ("F2", "own"): 14, ("F3", "own"): 10, ("F4", "own"): 13,
          ("F5", "own"): 10, ("F8", "own"): 7, ("F9", "own"): 14,
          ("F1", "pow2"): 11, ("F2", "pow2"): 14, ("F3", "pow2"): 10, ("F4", "pow2"): 13,
          ("F5", "pow2"): 10, ("F8", "pow2"): 7, ("F9", "pow2"): 11}


class _ReadBacks(TorchDispatchMode):
    """Counts the read-back ops dispatched inside the mode."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in _SYNCS:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _spec():
    return default_capture_sweep_spec("readbacks")


@pytest.mark.parametrize("scale_mode", ["own", "pow2"])
def test_a_sweep_cell_reads_back_at_most_its_budget(monkeypatch, scale_mode):
    spec = _spec()
    per_cell = collections.OrderedDict()
    active = []
    orig_cell, orig_tolist = R.run_layer_cell, torch.Tensor.tolist

    def tolist(self):
        if active:
            active[-1].n += 1
        return orig_tolist(self)

    def cell(task, ctx=None):
        with _ReadBacks() as rb:
            active.append(rb)
            try:
                out = orig_cell(task, ctx)
            finally:
                active.pop()
        per_cell[(task.cell.fault, task.cell.scale_mode)] = rb.n
        return out

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    monkeypatch.setattr(R, "run_layer_cell", cell)
    faults = ["F8", "F1", "F2", "F3", "F4", "F5", "F9"]
    cells = layer_cells([LAYER], faults, ["one"], [scale_mode], [0])
    first = cells[0]
    assert (first.fault, first.coverage) == ("F8", "one")
    # a warm-up F8 cell pays the batch's set-up (loads, memoized references)
    run_layer_batch([SweepTask(c, spec) for c in [first] + cells])
    over = {k: (per_cell[k], b) for k, b in BUDGET.items()
            if k[1] == scale_mode and per_cell[k] > b}
    assert not over, f"read-backs per cell (got, budget): {over}"
