#!/usr/bin/env bash
# One GPU session on a CUDA machine (used through the `device` tool, where the
# repo is a plain copy, not installed). Lessons of 2026-12-01: a fresh H200 pays
# every Triton compile single-threaded (autotune buckets: decode 8, large ~30
# configurations), so tests run under pytest-xdist; carry the pytest-xdist and
# execnet wheels (87 KB) as .devwork/whl and name it in `carry`. Every step is
# bounded, SIGINT first so pytest prints its summary; logs go to $OUT/all.tgz
# (the device returns at most 8 files).
set -u
OUT="${OUT:-/tmp/int8conf-gpu}"; mkdir -p "$OUT/logs"
[ -d .devwork/whl ] && python3 -m pip install -q --no-index --no-deps --no-compile \
  --target /tmp/site .devwork/whl/*.whl >/dev/null 2>&1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step() { local name=$1 limit=$2; shift 2; echo "=== $name (limit ${limit}s) $(date +%T)"; \
  ( time timeout -s INT -k 15 "$limit" "$@" ) > "$OUT/logs/$name.log" 2>&1; \
  echo "rc=$?" >> "$OUT/logs/$name.log"; tail -n 20 "$OUT/logs/$name.log" | cut -c1-400; }
P="python3 -m pytest -q -rfE --tb=line -p no:cacheprovider -p conformance.pytest_plugin"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# detllm kernel tests without xdist (xdist hides a failure while a slow test runs)
step detllm-cuda 200 $P -m cuda tests/detllm -k "not pinned_hash"
step cuda-tests 200 $P -n 14 -m cuda tests/conformance tests/reference
step conformance 300 $P -n 14 --kernel=triton --kernel=int_mm --against=cpu \
  --int8conf-reports="$OUT/reports"
step bench 60 python3 -m conformance.cli bench --kernel cpu --kernel int_mm --kernel triton \
  --no-interpreter --json "$OUT/bench.json"
cd "$OUT" && tar -czf all.tgz logs reports bench.json 2>/dev/null; rm -rf logs reports
