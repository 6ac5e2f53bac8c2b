#!/usr/bin/env bash
# The paper-scale sweep on one GPU, in one device call (reports/sweep/h200-paper-scale/):
# random Qwen3-1.7B-shaped model -> Triton pre-compile of the F6/F7 variants -> warm-up sweep
# (captures, own + pow2 checkpoints) -> the timed sweep (196 layers x 9 faults x 3 coverages
# x 2 scale modes = 10,584 cells) with its scorecard -> store -> CUDA tests.
# From the repository root:  OUT=<result dir> bash conformance/bench/paper_scale.sh
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INT8CONF_TRITON_AUTOTUNE=0
OUT=${OUT:-/tmp/paper-out}
mkdir -p "$OUT"
START=$(date +%s); BUDGET=${BUDGET:-480}
left() { echo $(( START + BUDGET - $(date +%s) )); }
stamp() { echo "== $(date +%T) (+$(( $(date +%s) - START )) s) $*"; }
ps() { python -m conformance.bench.paper_scale "$@"; }
rm -rf /tmp/warm.sqlite* /tmp/paper.sqlite* /tmp/warm
nproc; python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"

stamp "model"; ps model /tmp/big || exit 1
stamp "pre-compile"; timeout 150 python -m conformance.bench.paper_scale precompile
stamp "warm-up (captures, own + pow2 checkpoints; block 0 q_proj, 18 cells)"
timeout $(( $(left) - 200 )) python -m conformance.cli sweep --kernel triton --model /tmp/big \
  --no-model-checks --no-score --layers 0 --coverages one --db /tmp/warm.sqlite --out /tmp/warm || exit 1
stamp "timed sweep"
timeout $(( $(left) - 25 )) python -m conformance.cli sweep --kernel triton --model /tmp/big --no-model-checks \
  --db /tmp/paper.sqlite --out "$OUT/sweep" 2>&1 | grep -v "━"
ps per-fault /tmp/paper.sqlite | tee "$OUT/per-fault.txt"
gzip -6 -c /tmp/paper.sqlite > "$OUT/paper.sqlite.gz"
stamp "cuda tests"
timeout $(( $(left) > 5 ? $(left) : 5 )) python -m pytest -q -p no:cacheprovider -m cuda \
  tests/reference/test_memo_device.py tests/conformance/checks/test_device_references.py \
  tests/conformance/sweep/test_sweep_batches.py 2>&1 | tail -15
stamp "done"
