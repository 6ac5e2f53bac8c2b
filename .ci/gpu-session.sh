#!/usr/bin/env bash
# One GPU session on a CUDA machine (used through the `device` tool, where the repo is a
# plain copy, not installed). Stages:
#   1: the CUDA tests; 2a/2b: triton and int_mm conformance natively;
#   3 / 3b: the pow2 studies; 4: the paper-scale sweep (conformance/bench/paper_scale.sh);
#   5 / 5b: int8conf bench --main-job rows a,b / c,d (ROWS= overrides);
#   7: every built-in's default suite natively (check --device cuda), then main-job rows a,b;
#   6: FP8 natively: the FP8 CUDA tests, int8conf check of torch-fp8 and torchao-fp8 (torchao as a
#      wheel in .whl, carried), then 6s: the FP8 paper-scale sweep (torch-fp8) with its scorecard;
#   8: the field adapters and block built-ins through the default suite + the full-suite scoreboard;
#   9: the serving checks' share of the warm check (alternated with --no-serving).
# Device budget note: a fresh machine's start-up counts; four calls used 1,800 s in
# 2026-12-01e. Batch stages into as few calls as the 600 s limit allows.
# A fresh H200 pays every Triton compile single-threaded, and the device limits a
# command to 600 s: run STAGE=1, 2a, 2b, 3 or 4 as separate calls. Carry .devwork/whl
# (pytest-xdist and execnet wheels, 87 KB). Logs go to $OUT/all-STAGE.tgz (at most 8
# files come back). Every step is bounded, SIGINT first so pytest prints its summary and
# writes the reports of what finished (40 s of grace before SIGKILL).
# The plugin caps each xdist worker's torch threads at cores // workers (15 workers
# with 16 threads each spent 147 CPU-minutes in one 9.5-minute call).
set -u
OUT="${OUT:-/tmp/int8conf-gpu}"; mkdir -p "$OUT/logs"
for w in .devwork/whl .whl; do [ -d $w ] && python3 -m pip install -q --no-index --no-deps --no-compile \
  --target /tmp/site $w/*.whl >/dev/null 2>&1; done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# `pip install` writes bytecode; this image's site-packages has none (each process compiled ~8 s of
# source, profile in reports/h200-native/2026-12-03-main-job): compile it once, as an install does (PYC=0 skips)
if [ "${PYC:-1}" = 1 ]; then
  unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/pycache}"
  echo "=== bytecode: $( { time python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" /tmp/site "$PWD" >/dev/null 2>&1; } 2>&1 | grep real)"
fi
step() { local name=$1 limit=$2; shift 2; echo "=== $name (limit ${limit}s) $(date +%T)"; \
  ( time timeout -s INT -k 40 "$limit" "$@" ) > "$OUT/logs/$name.log" 2>&1; \
  echo "rc=$?" >> "$OUT/logs/$name.log"; grep -E " (FAILED|ERROR) " "$OUT/logs/$name.log" | head -20; \
  grep -v -e "━" -e " PASSED " -e PytestBenchmarkWarning "$OUT/logs/$name.log" | tail -n 25 | cut -c1-600; }
# faulthandler: an item still running after 240 s prints every thread's stack (a stall
# is named in the log even when the step is killed)
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider -p conformance.pytest_plugin -o faulthandler_timeout=240"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${STAGE:-1}" in
1) INT8CONF_CONFIG_REPORT="$OUT/logs/configs.jsonl" step cuda-tests "${LIMIT:-300}" $P -n 15 -vv -m cuda \
     ${TESTS:-tests/conformance tests/reference}
   # no xdist: it hides a failure's message while a slow test runs. DETLLM=0 skips it.
   [ "${DETLLM:-1}" = 1 ] && step detllm-cuda 200 $P -m cuda tests/detllm ;;
2a|2b) kern=triton; [ "$STAGE" = 2b ] && kern=int_mm
   step "conformance-$kern" "${LIMIT:-530}" $P -n 15 -vv --durations=20 --kernel=$kern --against=cpu \
     --int8conf-reports="$OUT/reports" ;;
3) INT8CONF_TRITON_AUTOTUNE=0 step study 560 python3 -m conformance.cli study pow2 \
     --kernels triton,int_mm --device cuda --fresh-process both --out "$OUT/pow2" --time-budget 540 ;;
3b) step model 60 python3 -m conformance.bench.paper_scale model /tmp/big
   # RESUME=<dir carried in, holding a previous call's pow2/.parts>: the study reuses its parts
   [ -n "${RESUME:-}" ] && mkdir -p "$OUT/pow2" && cp -r "$RESUME/." "$OUT/pow2/"
   INT8CONF_TRITON_AUTOTUNE=0 step study-1.7b "${LIMIT:-500}" python3 -m conformance.cli study pow2 \
     --model /tmp/big --kernels triton,int_mm --device cuda --fresh-process none --new-tokens 16 --windows 8 --flip-windows 4 \
     --out "$OUT/pow2" --time-budget "$(( ${LIMIT:-500} - 60 ))" ;;
5|5b) rows=a,b; [ "$STAGE" = 5b ] && rows=c,d; rows="${ROWS:-$rows}"
   # the main job timed against issue 29's targets: reports/bench/<device>/main_job.{json,md} under $OUT/bench
   step "main-job-$rows" "${LIMIT:-590}" python3 -m conformance.cli bench --main-job --rows "$rows" --timeout "${TIMEOUT:-280}" \
     --out "$OUT/bench" ;;
6) step fp8-cuda-tests "${LIMIT:-220}" $P -n 8 -vv -m cuda tests/conformance/kernels/test_fp8_kernels.py \
     tests/faults/test_fp8_faults.py tests/conformance/test_fp8_suite.py tests/conformance/checks/test_fp8_accumulator.py \
     tests/reference/test_fp8.py tests/conformance/kernels/adapters
   for k in ${FP8_KERNELS:-torch-fp8 torchao-fp8}; do
     step "check-$k" 120 python3 -m conformance.cli check --kernel "$k" --device cuda --out "$OUT/reports"; done ;&
6s) # the FP8 paper-scale sweep (SWEEP=0 skips it); RESUME_DB=<a carried sweep.sqlite> resumes a previous call's store
   [ "${SWEEP:-1}" = 0 ] && { cd "$OUT" && tar -czf all-6.tgz logs reports 2>/dev/null; rm -rf logs reports; exit 0; }
   step fp8-model 60 python3 -m conformance.bench.paper_scale model /tmp/big
   mkdir -p "$OUT/sweep/torch-fp8"; [ -n "${RESUME_DB:-}" ] && cp "$RESUME_DB" "$OUT/sweep/torch-fp8/sweep.sqlite"
   # without SWEEP_LIMIT: what is left of BUDGET_S (default 580 s) after the steps before, less 60 s of grace
   step fp8-sweep "${SWEEP_LIMIT:-$(( ${BUDGET_S:-580} - SECONDS - 60 ))}" python3 -m conformance.cli sweep --kernel torch-fp8 --model /tmp/big --device cuda \
     --workers "${WORKERS:-8}" --out "$OUT/sweep" ;;
7) # issue 41's acceptance: every built-in through the default suite natively (the covering array's native-only
   # cases included), then the main job's rows a,b when time is left (ROWS= overrides, NOBENCH=1 skips)
   for k in ${KERNELS:-triton int_mm torch-fp8 triton-fp8}; do
     step "check-$k" "${LIMIT:-150}" python3 -m conformance.cli check --kernel "$k" --device cuda --out "$OUT/reports"; done
   [ "${NOBENCH:-0}" = 1 ] || step "main-job-${ROWS:-a,b}" "$(( ${BUDGET_S:-580} - SECONDS - 20 ))" python3 -m conformance.cli \
     bench --main-job --rows "${ROWS:-a,b}" --timeout 200 --out "$OUT/bench" ;;
8) # issue 44 / 46: every field adapter and the block built-ins through the default suite, eight at once on two cores
   # each, then the full-suite scoreboard with throughput. Carry the wheels in .whl: flag-gems==5.0.2, gemlite 0.6.0
   # (built here: pip wheel --no-deps gemlite==0.6.0), nvidia-cutlass==4.2.0, cuda-python / cuda-bindings 13.0.3,
   # cuda-pathfinder, treelib, pydot, pyparsing, sqlalchemy==2.0.48 (cp312 manylinux); fbgemm-gpu-genai 1.6.0's wheel
   # is 36 MB: carry it unpacked and xz-compressed as .whl/fbg.tar.xz (9 MB), unpacked into /tmp/site here.
   [ -f .whl/fbg.tar.xz ] && tar -xJf .whl/fbg.tar.xz -C /tmp/site
   end=$(( $(date +%s) + ${DEAD:-440} ))
   one() { local left=$(( end - $(date +%s) )); [ "$left" -gt 300 ] && left=300; [ "$left" -lt 30 ] && return
     taskset -c "$1" timeout -s INT -k 20 "$left" python3 -m conformance.cli check --kernel "$2" --device cuda --jobs 2 \
       --out "$OUT/reports" > "$OUT/logs/check-$2.log" 2>&1; echo "=== $2 rc=$?"; }
   two() { local c=$1; shift; for k in "$@"; do one "$c" "$k"; done; }
   two 0-1 triton-block gemlite-int8 & two 2-3 triton-block-fp8 gemlite-fp8 & two 4-5 flaggems-block-fp8 flaggems-int8 &
   two 6-7 flaggems-cutlass-block-fp8 flaggems-fp8 & two 8-9 fbgemm-int8 & two 10-11 fbgemm-fp8-rowwise &
   two 12-13 fbgemm-triton-fp8 & two 14-15 cutlass-int8 & wait
   step scoreboard "$(( 575 - SECONDS ))" python3 -m conformance.cli scoreboard --from-checks "$OUT/reports" --throughput \
     --out "$OUT/reports/scoreboard" ;;
9) # issue 45: the serving checks' share of the warm check, alternated after a warm-up (C13-C15 beside the cases)
   step warm 120 python3 -m conformance.cli check --kernel triton --device cuda --no-serving --out "$OUT/reports"
   for i in 1 2; do step "serving-$i" 90 python3 -m conformance.cli check --kernel triton --device cuda --out "$OUT/reports"
     step "no-serving-$i" 90 python3 -m conformance.cli check --kernel triton --device cuda --no-serving --out "$OUT/reports"; done
   grep -h "^real" "$OUT"/logs/*serving-*.log ;;
4) OUT="$OUT" BUDGET=540 bash conformance/bench/paper_scale.sh > "$OUT/logs/paper.log" 2>&1
   grep -v "━" "$OUT/logs/paper.log" | tail -60 | cut -c1-300 ;;
esac
cd "$OUT" && tar -czf "all-${STAGE:-1}.tgz" logs $(ls -d reports pow2 sweep bench 2>/dev/null) 2>/dev/null
rm -rf logs reports pow2 bench
