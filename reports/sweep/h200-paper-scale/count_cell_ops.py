"""Deterministic per-cell cost proxy of the sweep (issue 7c, NOTE.md): aten ops
(kernel launches on a GPU) and scalar read-backs (_local_scalar_dense / equal /
is_nonzero / nonzero: a host-device sync each on a GPU) per layer cell, per fault,
counted with a TorchDispatchMode on the default model's captures. ``Tensor.tolist``
is counted as a read-back too (a device-to-host copy and sync on a GPU; on the CPU
it dispatches no aten op, so the mode alone would not see it).

Read-backs made inside the kernel's own call (``runner._guarded_call``: e.g. the ``cpu``
kernel validating its ``int_mm`` operands with a fresh unit scale; none for ``triton``,
which validates no values) are also counted apart: ``ops/read-backs(in kernel)`` (7g).

Usage (repository root, PYTHONPATH=.):
  python reports/sweep/h200-paper-scale/count_cell_ops.py KERNEL LAYERS FAULTS [v] [w|all]
  e.g. ... count_cell_ops.py triton 1 F1,F2,F3,F4,F5,F6,F7,F8,F9
  ``v``: the most frequent ops; ``w``: where the read-backs come from (``all``: every op).
"""
import sys, collections
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from conformance.sweep.runner import run_unit
from _layer_units import layer_units
import conformance.sweep.runner as R
WHERE = collections.Counter() if len(sys.argv) > 5 else None
ALL = len(sys.argv) > 5 and sys.argv[5] == 'all'
SYNC = {"_local_scalar_dense", "equal", "is_nonzero", "item", "nonzero", "masked_select", "_to_copy"}
import conformance.kernels.runner as KR
IN_KERNEL = [0]
_guarded = KR._guarded_call
def _counted_call(*a, **k):
    """``_guarded_call`` marked, so read-backs inside the kernel's own call count apart."""
    IN_KERNEL[0] += 1
    try:
        return _guarded(*a, **k)
    finally:
        IN_KERNEL[0] -= 1
KR._guarded_call = _counted_call
class Count(TorchDispatchMode):
    def __init__(self): super().__init__(); self.ops = 0; self.sync = 0; self.kern = 0; self.by = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        name = func.overloadpacket.__name__
        self.by[name] += 1
        if name in ("_local_scalar_dense", "equal", "is_nonzero", "nonzero"):
            self.sync += 1; self.kern += bool(IN_KERNEL[0])
        if WHERE is not None and (ALL or name in ("_local_scalar_dense", "equal", "is_nonzero", "nonzero")):
            where()
        return func(*args, **(kwargs or {}))
def where():
    """Count the caller (three frames outside torch) of a read-back in WHERE."""
    import traceback
    fr = [f for f in traceback.extract_stack(limit=12)[:-2]
          if "/torch/" not in f.filename and "count_cell_ops" not in f.filename]
    WHERE[" <- ".join(f"{f.filename.rsplit('/',1)[-1]}:{f.lineno}:{f.name}" for f in fr[-3:][::-1])] += 1
_tolist = torch.Tensor.tolist
_ACTIVE = []
def _counted_tolist(self):
    """``Tensor.tolist`` counted as one read-back of the innermost Count."""
    if _ACTIVE:
        _ACTIVE[-1].sync += 1; _ACTIVE[-1].kern += bool(IN_KERNEL[0]); _ACTIVE[-1].by["tolist"] += 1
        if WHERE is not None:
            where()
    return _tolist(self)
torch.Tensor.tolist = _counted_tolist
kernel = sys.argv[1]; layers = [int(x) for x in sys.argv[2].split(",")]; faults = sys.argv[3].split(",")
units = layer_units(kernel, layers, faults)
orig = R.run_layer_cell
stats = collections.defaultdict(lambda: [0, 0, 0, 0]); tot = collections.Counter()
def counted(task, ctx=None):
    with Count() as c:
        _ACTIVE.append(c)
        try:
            out = orig(task, ctx)
        finally:
            _ACTIVE.pop()
    s = stats[task.cell.fault]; s[0] += 1; s[1] += c.ops; s[2] += c.sync; s[3] += c.kern; tot.update(c.by)
    return out
R.run_layer_cell = counted
for u in units:
    run_unit(u)
n = sum(s[0] for s in stats.values())
print("per cell (aten ops / scalar read-backs (of which in the kernel's call)):",
      " ".join(f"{f}:{s[1]//s[0]}/{s[2]/s[0]:.1f}({s[3]/s[0]:.1f})" for f, s in sorted(stats.items())),
      f"| all: {sum(s[1] for s in stats.values())/n:.0f}/{sum(s[2] for s in stats.values())/n:.1f}"
      f"({sum(s[3] for s in stats.values())/n:.1f})")
if len(sys.argv) > 4: print([(k, round(v / n, 1)) for k, v in tot.most_common(25)])

if WHERE is not None:
    for k, v in WHERE.most_common(45): print(round(v / n, 2), k)
