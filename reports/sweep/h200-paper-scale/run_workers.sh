#!/usr/bin/env bash
# Executor probe for the paper-scale sweep on one GPU (issue 7 speed target), at steady
# state. A cell is host-bound (~6.6 ms of host work, ~0.6 ms of GPU work:
# profiles-2026-12-01e), so cells in flight at once could overlap their host work:
#   --threads N: N threads of one process, one CUDA stream each (one CUDA context; torch's
#                operator calls and the device waits release the GIL);
#   --workers N: N processes sharing the GPU (N CUDA contexts, which the GPU time-slices).
# Model + pre-compile + warm-up as in run_paper.sh; then the same 28 layers (1,512 cells)
# serially and with each option into fresh stores; then the full 10,584-cell grid with the
# fastest, scored (the committed triton/ result), with per-fault times.
# From the repository root: OUT=<dir> BUDGET=<s> bash <this script>
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INT8CONF_TRITON_AUTOTUNE=0
HERE=reports/sweep/h200-paper-scale
OUT=${OUT:-/tmp/workers-out}; mkdir -p "$OUT"
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { echo $(( START + BUDGET - $(date +%s) )); }
stamp() { echo "== $(date +%T) (+$(( $(date +%s) - START )) s) $*"; }
rm -rf /tmp/w*.sqlite* /tmp/wout* /tmp/paper.sqlite*
sweep() { python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks "$@" 2>&1 | sed "/━/d"; }
rate() { python - "$1" "$2" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
r = json.loads(c.execute("select value from meta where key='runs'").fetchone()[0])[-1]
n, s = c.execute("select count(*), sum(elapsed_s) from cells").fetchone()
print(f"RATE {sys.argv[2]} | {r['cells_per_s']} cells/s, {r['computed']} cells in {r['wall_s']} s "
      f"({r['executor']}); summed per-cell {s:.1f} s = {1000 * s / max(n, 1):.2f} ms/cell")
PY
}
nproc; python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"
stamp model; python $HERE/paper_model.py /tmp/big big || exit 1
stamp pre-compile; timeout 150 python $HERE/precompile.py
stamp warm-up; sweep --no-score --layers 0 --coverages one --db /tmp/wwarm.sqlite --out /tmp/wout-warm --quiet || exit 1
L=$(seq -s, 0 27)
for opt in "--workers 1" "--threads 2" "--threads 3" "--threads 4" "--workers 2" "--workers 4"; do
  tag=$(echo "$opt" | tr -d ' -')
  stamp "layers 0-27 (1,512 cells), $opt"
  # GPU busy % every 200 ms while it runs: host-bound (low) or device-bound (high)?
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$OUT/util-$tag.txt" 2>/dev/null &
  smi=$!
  timeout $(( $(left) - 170 )) python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
    --no-score --quiet --layers "$L" $opt --db /tmp/w$tag.sqlite --out /tmp/wout$tag 2>&1 | tail -2
  kill $smi 2>/dev/null
  rate /tmp/w$tag.sqlite "$opt"
  awk '{s += $1; n++} END {if (n) printf "  GPU utilization: mean %.0f %% over %d samples\n", s / n, n}' "$OUT/util-$tag.txt"
done | tee "$OUT/probe.txt"
best=$(grep ^RATE "$OUT/probe.txt" | sort -t'|' -k2 -gr | head -1 | sed 's/RATE \(.*\) |.*/\1/')
stamp "full grid (10,584 cells) with ${best:---workers 1}"
timeout $(( $(left) - 15 )) python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
  ${best:---workers 1} --db /tmp/paper.sqlite --out "$OUT/sweep" 2>&1 | sed "/━/d"
rate /tmp/paper.sqlite "${best:---workers 1}" | tee -a "$OUT/probe.txt"
python $HERE/per_fault.py /tmp/paper.sqlite | tee "$OUT/per-fault.txt"
gzip -6 -c /tmp/paper.sqlite > "$OUT/paper.sqlite.gz"
stamp done
