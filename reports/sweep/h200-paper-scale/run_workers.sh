#!/usr/bin/env bash
# Worker-count probe for the paper-scale sweep on one GPU (issue 7 speed target):
# do several processes sharing one GPU beat one process now that a cell costs ~2-4
# read-backs? Model + warm-up as in run_paper.sh, then the same 7 layers (378 cells)
# with --workers 1, 2, 4, 6 into fresh stores, then the full 10,584-cell grid with the
# fastest count. From the repository root: OUT=<dir> BUDGET=<s> bash <this script>
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INT8CONF_TRITON_AUTOTUNE=0
OUT=${OUT:-/tmp/workers-out}; mkdir -p "$OUT"
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { echo $(( START + BUDGET - $(date +%s) )); }
stamp() { echo "== $(date +%T) (+$(( $(date +%s) - START )) s) $*"; }
rm -rf /tmp/w*.sqlite* /tmp/wout* /tmp/paper.sqlite*
sweep() { python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks "$@" 2>&1 | sed "/━/d"; }
rate() { python - "$1" "$2" <<'PY'
import json, sqlite3, sys
r = json.loads(sqlite3.connect(sys.argv[1]).execute("select value from meta where key='runs'").fetchone()[0])[-1]
print(f"RATE workers={sys.argv[2]} {r['cells_per_s']} cells/s, {r['computed']} cells in {r['wall_s']} s ({r['executor']})")
PY
}
stamp model; python reports/sweep/h200-paper-scale/paper_model.py /tmp/big big || exit 1
stamp warm-up; sweep --no-score --layers 0 --coverages one --db /tmp/wwarm.sqlite --out /tmp/wout-warm --quiet || exit 1
for w in 1 3 6; do
  stamp "layers 0-3 (216 cells), --workers $w"
  sweep --no-score --layers 0,1,2,3 --workers $w --db /tmp/w$w.sqlite --out /tmp/wout$w --quiet
  rate /tmp/w$w.sqlite $w
done | tee "$OUT/probe.txt"
best=$(grep ^RATE "$OUT/probe.txt" | sort -k3 -gr | head -1 | sed 's/RATE workers=\([0-9]*\).*/\1/')
stamp "full grid (10,584 cells) with --workers ${best:-1}"
timeout $(( $(left) - 15 )) python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
  --workers "${best:-1}" --db /tmp/paper.sqlite --out "$OUT/sweep" 2>&1 | sed "/━/d"
rate /tmp/paper.sqlite "${best:-1}" | tee -a "$OUT/probe.txt"
gzip -6 -c /tmp/paper.sqlite > "$OUT/paper.sqlite.gz"
stamp done
