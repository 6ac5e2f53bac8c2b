#!/usr/bin/env bash
# Steady-state worker probe (issue 7): 28 layers (1,512 cells) with --workers 3, then
# serially, on the random 1.7B-shaped model; prints cells/s and the summed per-cell time.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INT8CONF_TRITON_AUTOTUNE=0
python reports/sweep/h200-paper-scale/paper_model.py /tmp/big big >/dev/null || exit 1
L=$(seq -s, 0 27)
for w in 3 1; do
  echo "== $(date +%T) --workers $w"
  python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks --no-score --quiet \
    --layers "$L" --workers $w --db /tmp/p$w.sqlite --out /tmp/po$w 2>&1 | sed "/━/d" | tail -3
  python - /tmp/p$w.sqlite $w <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
r = json.loads(c.execute("select value from meta where key='runs'").fetchone()[0])[-1]
n, s = c.execute("select count(*), sum(elapsed_s) from cells").fetchone()
print(f"RATE workers={sys.argv[2]} {r['cells_per_s']} cells/s, {r['computed']} cells in {r['wall_s']} s; "
      f"summed per-cell {s:.1f} s = {1000 * s / n:.2f} ms/cell")
PY
done
