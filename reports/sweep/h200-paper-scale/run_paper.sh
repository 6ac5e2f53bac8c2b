#!/usr/bin/env bash
# The paper-scale run on one H200 (reports/sweep/h200-paper-scale/NOTE.md).
# From the repository root: OUT=<result dir> bash reports/sweep/h200-paper-scale/run_paper.sh
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/paper-out}
mkdir -p "$OUT"
HERE=reports/sweep/h200-paper-scale
START=$(date +%s); BUDGET=${BUDGET:-190}   # seconds for the whole script (device quota)
left() { echo $(( START + BUDGET - $(date +%s) )); }
stamp() { echo "== $(date +%T) $*"; }
rm -f /tmp/warm.sqlite* /tmp/paper.sqlite*   # a fresh store: nothing resumed
TIME=""; [ -x /usr/bin/time ] && TIME="/usr/bin/time -v"
nproc; python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"
stamp "model"
python $HERE/paper_model.py /tmp/big big || exit 1
# warm-up into a scratch store: captures the 196 layers and builds the own / pow2
# checkpoints (the sweep does it itself), compiles the Triton kernels into the disk
# cache; one process (--workers 1), block 0 q_proj, own scales, 9 cells
stamp "warm-up (captures, checkpoints, kernel compile; 9 cells in one process)"
python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks --no-score \
  --workers 1 --layers 0 --scale-modes own --coverages one --db /tmp/warm.sqlite --out /tmp/warm || exit 1
python - <<'PY'
import sqlite3
t = [r[0] for r in sqlite3.connect("/tmp/warm.sqlite").execute("select elapsed_s from cells order by rowid")]
print("warm-up per-cell seconds (one process):", [round(x, 3) for x in t])
PY
stamp "timed sweep: 196 layers x 9 faults x 3 coverages x 2 scale modes"
timeout $(( $(left) - 25 )) $TIME python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
  --no-score --db /tmp/paper.sqlite --out "$OUT/sweep" 2>&1 | grep -v "^\s*\(Average\|Exit\|Socket\|Signals\|Swaps\|File system\|Page size\|Major\|Minor\|Voluntary\|Involuntary\)"
stamp "store"
gzip -6 -c /tmp/paper.sqlite > "$OUT/paper.sqlite.gz"; ls -la "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
stamp "cuda tests"
timeout $(( $(left) > 5 ? $(left) : 5 )) python -m pytest -q -p no:cacheprovider -p conformance.pytest_plugin -m cuda \
  tests/reference/test_memo_device.py tests/conformance/checks/test_device_references.py \
  tests/conformance/sweep/test_sweep_batches.py 2>&1 | tail -15
stamp "done"
