"""Full SHA-256 tensor digests (``reference.operands._digest``) per sweep cell,
per fault and by caller (issue 7d, NOTE.md). Runs the layer batches in this
process on the default model's captures.

Usage (repository root, PYTHONPATH=.):
  python reports/sweep/h200-paper-scale/count_cell_digests.py KERNEL LAYERS [FAULTS]
  e.g. ... count_cell_digests.py cpu 0,4,6
"""
import sys, collections, time, traceback
import reference.operands as O
from conformance.sweep.runner import run_unit
from _layer_units import layer_units
kernel = sys.argv[1]; layers = [int(x) for x in sys.argv[2].split(",")]
faults = sys.argv[3].split(",") if len(sys.argv) > 3 else "F1,F2,F3,F4,F5,F6,F7,F8,F9".split(",")
units = layer_units(kernel, layers, faults)
orig = O._digest
WHERE = collections.Counter(); N = [0, 0]
def counted(t):
    N[0] += 1; N[1] += t.numel() * t.element_size()
    fr = [f for f in traceback.extract_stack(limit=22)[:-1] if "/torch/" not in f.filename and "operands.py" not in f.filename and "memo.py" not in f.filename]
    WHERE[" <- ".join(f"{f.filename.rsplit('/',1)[-1]}:{f.lineno}:{f.name}" for f in fr[-5:][::-1])] += 1
    return orig(t)
O._digest = counted
import conformance.sweep.runner as R
PER = collections.defaultdict(lambda: [0, 0, 0]); origc = R.run_layer_cell
def cc(task, ctx=None):
    n0, b0 = N[0], N[1]; out = origc(task, ctx); s = PER[task.cell.fault]; s[0] += 1; s[1] += N[0]-n0; s[2] += N[1]-b0; return out
R.run_layer_cell = cc
t0 = time.perf_counter()
for u in units: run_unit(u)
dt = time.perf_counter() - t0
n = sum(len(u) for u in units)
print(f"cells {n}  digests {N[0]} ({N[0]/n:.2f}/cell)  bytes hashed {N[1]/1e6:.1f} MB ({N[1]/n/1e6:.2f} MB/cell)  {dt:.2f}s ({dt/n*1000:.1f} ms/cell)")
print("in cells per fault (cells/digests/MB):", {f: (v[0], v[1], round(v[2]/1e6,2)) for f, v in sorted(PER.items())})
for k, v in WHERE.most_common(30): print(v, k)
