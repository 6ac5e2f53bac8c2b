#!/usr/bin/env bash
# The paper-scale run on one H200 (reports/sweep/h200-paper-scale/NOTE.md), self-contained,
# one device call of at most ~500 s:
#   model -> Triton pre-compile of the F6/F7 shape variants -> warm-up sweep (captures,
#   both checkpoints) -> cProfile of 108 cells alone (profile_cells.py) -> the full timed sweep
#   (196 layers x 9 faults x 3 coverages x 2 scale modes = 10,584 cells, one process:
#   the default on one GPU) with its scorecard -> store -> cuda tests.
# From the repository root:  OUT=<result dir> bash reports/sweep/h200-paper-scale/run_paper.sh
# Writes under $OUT: run steps on stdout, profile-cumtime.txt / profile-tottime.txt (the
# profiled cells alone), per-fault.txt (timed sweep), sweep/triton/scorecard.{md,json,csv,png},
# mismatches.csv, paper.sqlite.gz.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/paper-out}
mkdir -p "$OUT"
HERE=reports/sweep/h200-paper-scale
START=$(date +%s); BUDGET=${BUDGET:-480}   # seconds for the whole script
left() { echo $(( START + BUDGET - $(date +%s) )); }
stamp() { echo "== $(date +%T) (+$(( $(date +%s) - START )) s) $*"; }
rm -rf /tmp/warm.sqlite* /tmp/paper.sqlite* /tmp/prof.sqlite* /tmp/warm /tmp/prof   # fresh stores
export INT8CONF_TRITON_AUTOTUNE=0   # what the sweep uses anyway (conformance.sweep.runner._worker_env)
nproc; python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"

per_fault() { python $HERE/per_fault.py "$1"; }  # per-fault per-cell seconds of a store

stamp "model (random Qwen3-1.7B shape: hidden 2048, intermediate 6144, 28 blocks -> 196 linears)"
python $HERE/paper_model.py /tmp/big big || exit 1

# compile every F6/F7 kernel variant into Triton's disk cache (precompile.py says which)
stamp "pre-compile the F6/F7 kernel variants; F6-window call time, K aligned vs not"
timeout 150 python $HERE/precompile.py

# warm-up into a scratch store: captures the 196 layers, builds the own and pow2 checkpoints
# (the sweep does it itself), loads the compiled kernels; block 0 q_proj, 18 cells
stamp "warm-up (captures, own + pow2 checkpoints; 18 cells in one process)"
timeout $(( $(left) - 200 )) python -m conformance.cli sweep --kernel triton --model /tmp/big \
  --no-model-checks --no-score --layers 0 --coverages one --db /tmp/warm.sqlite --out /tmp/warm || exit 1
per_fault /tmp/warm.sqlite

# where the time goes: the cells alone (profile_cells.py wraps run_layer_batch; the start-up
# and the first two batches, layer 1 own / pow2, are not profiled), layers 2-3: 108 cells
stamp "cProfile of the cells alone: layers 2-3 (108 cells) after layer 1"
timeout 90 python $HERE/profile_cells.py "$OUT/profile" --skip 2 -- sweep --kernel triton --model /tmp/big \
  --no-model-checks --no-score --workers 1 --layers 1,2,3 --db /tmp/prof.sqlite --out /tmp/prof --quiet
per_fault /tmp/prof.sqlite | tee "$OUT/profile-per-fault.txt"

if [ -n "${PROFILE_ONLY:-}" ]; then   # per-fault cProfile + torch.profiler, no timed sweep
  for f in F6 F7 F1 F8; do
    stamp "cProfile + torch.profiler of $f cells alone: layers 2-6 after layer 1"
    rm -f /tmp/prof-$f.sqlite*
    timeout 80 python $HERE/profile_cells.py "$OUT/profile-$f" --skip 2 --torch -- sweep --kernel triton \
      --model /tmp/big --no-model-checks --no-score --workers 1 --layers 1,2,3,4,5,6 --faults $f \
      --db /tmp/prof-$f.sqlite --out /tmp/prof-$f --quiet
    per_fault /tmp/prof-$f.sqlite
  done
  stamp "done (profile only)"; exit 0
fi

stamp "timed sweep: 196 layers x 9 faults x 3 coverages x 2 scale modes (default workers: one process per GPU)"
timeout $(( $(left) - 25 )) python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
  --db /tmp/paper.sqlite --out "$OUT/sweep" 2>&1 | grep -v "━"
stamp "per-fault per-cell seconds of the timed sweep"
per_fault /tmp/paper.sqlite | tee "$OUT/per-fault.txt"
python - <<'PY'
import json, sqlite3
runs = json.loads(sqlite3.connect("/tmp/paper.sqlite").execute("select value from meta where key='runs'").fetchone()[0])
for r in runs:
    print(f"sweep time {r['wall_s']} s for {r['computed']} cells: {r['cells_per_s']} cells/s ({r['executor']}); "
          f"target 10,584 cells in < 60 s = 177 cells/s: {'MET' if r['computed'] >= 10584 and r['wall_s'] < 60 else 'not met'}")
PY
stamp "store"
gzip -6 -c /tmp/paper.sqlite > "$OUT/paper.sqlite.gz"; ls -la "$OUT" "$OUT/sweep"/*
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
stamp "cuda tests"
timeout $(( $(left) > 5 ? $(left) : 5 )) python -m pytest -q -p no:cacheprovider -p conformance.pytest_plugin -m cuda \
  tests/reference/test_memo_device.py tests/conformance/checks/test_device_references.py \
  tests/conformance/sweep/test_sweep_batches.py "tests/conformance/kernels/test_triton_cuda.py::test_split_k_natively_exact" 2>&1 | tail -15
stamp "done"
