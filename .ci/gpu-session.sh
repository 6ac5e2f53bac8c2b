#!/usr/bin/env bash
# One GPU session on a CUDA machine, in priority order (used through the `device`
# tool, where the repo is a plain copy, not installed). What is left to measure,
# as of 2026-12-01 (reports/h200-native/2026-12-01/README.md):
#   1. issue 12: which formulation of -|x| -> int_exp the GPU computes right
#      (reports/detllm-ir-audit/NOTE.md), then the detllm CUDA tests;
#   2. issue 8: a COMPLETE native `--kernel=triton --kernel=int_mm --against=cpu`
#      pass (1,556 items; the last one reached 1,470 in 484 s, 0 failed);
#   3. issue 9: `study pow2` on CUDA with its end-to-end part, default model;
#   4. issue 7: the paper-scale sweep (reports/sweep/h200-paper-scale/run_paper.sh).
# A fresh H200 pays every Triton compile single-threaded, and the device limits a
# command to 600 s: run STAGE=1, 2, 3 or 4 as separate calls. Carry .devwork/whl
# (pytest-xdist and execnet wheels, 87 KB). Logs go to $OUT/all.tgz (at most 8
# files come back). Every step is bounded, SIGINT first so pytest prints its summary.
set -u
OUT="${OUT:-/tmp/int8conf-gpu}"; mkdir -p "$OUT/logs"
[ -d .devwork/whl ] && python3 -m pip install -q --no-index --no-deps --no-compile \
  --target /tmp/site .devwork/whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step() { local name=$1 limit=$2; shift 2; echo "=== $name (limit ${limit}s) $(date +%T)"; \
  ( time timeout -s INT -k 15 "$limit" "$@" ) > "$OUT/logs/$name.log" 2>&1; \
  echo "rc=$?" >> "$OUT/logs/$name.log"; grep -v "━" "$OUT/logs/$name.log" | tail -n 25 | cut -c1-600; }
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider -p conformance.pytest_plugin"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${STAGE:-1}" in
1) step sigmoid-variants 90 python3 reports/detllm-ir-audit/probe_sigmoid_variants.py
   # no xdist: it hides a failure's message while a slow test runs
   step detllm-cuda 200 $P -m cuda tests/detllm -k "not pinned_hash"
   step cuda-tests 250 $P -n 15 -m cuda tests/conformance tests/reference ;;
2) step conformance 560 $P -n 15 --durations=20 --kernel=triton --kernel=int_mm --against=cpu \
     --int8conf-reports="$OUT/reports" ;;
3) INT8CONF_TRITON_AUTOTUNE=0 step study 560 python3 -m conformance.cli study pow2 \
     --kernels triton,int_mm --device cuda --fresh-process both --out "$OUT/pow2" --time-budget 540 ;;
4) OUT="$OUT" BUDGET=540 bash reports/sweep/h200-paper-scale/run_paper.sh > "$OUT/logs/paper.log" 2>&1
   grep -v "━" "$OUT/logs/paper.log" | tail -60 | cut -c1-300 ;;
esac
cd "$OUT" && tar -czf all.tgz logs $(ls -d reports pow2 sweep 2>/dev/null) 2>/dev/null
rm -rf logs reports pow2
