"""Score a finished sweep store with the project's own scoring code
(``conformance.scorecard``, the code ``int8conf sweep`` calls after its
cells), for a store computed on another machine whose model is not here.

Usage: python score_store.py STORE.sqlite OUT_DIR "COMMAND AS RUN" "MACHINE LINE"
Writes OUT_DIR/scorecard.{json,csv,md}, mismatches.csv and detection.png.
"""
import argparse
import json
import sys
from pathlib import Path

from conformance import scorecard
from conformance.commands.sweep import _meta, latest_matrix
from conformance.sweep.cells import Cell, SweepSpec
from conformance.sweep.store import SweepStore
from predictions.lock import matrix_chain

db, out, command, machine = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
with SweepStore(db) as s:
    rows = s.rows()
    ident = json.loads(s.meta("identity"))
    runs = json.loads(s.meta("runs") or "[]")
    worker_s = sum(t for _, t in s.cell_times())
    keys = [Cell(*k) for k in s.db.execute(
        "SELECT layer, fault, coverage, scale_mode, seed FROM cells ORDER BY 1, 2, 3, 4, 5")]
cells = [c for c in keys if not c.is_model]
mcells = [c for c in keys if c.is_model]
spec = SweepSpec(ident["kernel"], ident["kernel_digest"], "(device machine)", ident["capture_digest"],
                 "(device machine)", ident["c7"], ident["model_checks"])
uniq = lambda xs: list(dict.fromkeys(xs))  # noqa: E731
args = argparse.Namespace(kernel=ident["kernel"], scale_modes=uniq(c.scale_mode for c in cells))
meta = _meta(args, spec, cells, mcells, uniq(c.layer for c in cells), uniq(c.fault for c in cells),
             uniq(c.coverage for c in cells), uniq(c.seed for c in cells), db, len(rows), runs)
meta["command"] = command
meta["machine"] = machine
meta["worker_s"] = round(worker_s, 1)
meta["timing_line"] += (f"; summed per-cell worker time {worker_s:.1f} s over "
                        f"{runs[-1].get('executor') if runs else '?'}")
chain = matrix_chain(latest_matrix())
sc = scorecard.build(rows, {m.id: m for m in chain}, meta)
for p in scorecard.write(sc, out):
    print(p)
h = sc["headlines"]
for tag, t in sc["totals"].items():
    x = t["core"]
    print(f"against {tag} (C1-C7): TP {x['TP']} TN {x['TN']} FP {x['FP']} FN {x['FN']}")
print(f"F8 fired in {h['f8_fired']} check-cells; {len(rows)} rows, {len(cells)} layer cells")
