#!/usr/bin/env bash
# One GPU session on a CUDA machine (used through the `device` tool, where the
# repo is a plain copy, not installed). Runs: the CUDA-only tests, the native
# conformance suite for the triton and int_mm kernels, the kernel benchmark,
# and the detllm CUDA hash check + decode benchmark. Every step is bounded so
# one slow step cannot eat the others; logs and reports go to $OUT.
set -u
OUT="${OUT:-/tmp/int8conf-gpu}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=python3
step() { local name=$1 limit=$2; shift 2; echo "=== $name (limit ${limit}s)"; \
  ( time timeout "$limit" "$@" ) > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"; tail -n 25 "$OUT/$name.log"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$py -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"
step cuda-tests 110 $py -m pytest -q -m cuda -p no:cacheprovider tests
step conformance 190 $py -m pytest -q -p no:cacheprovider -p conformance.pytest_plugin \
  --kernel=triton --kernel=int_mm --against=cpu --int8conf-reports="$OUT/reports"
step bench 50 $py -m conformance.cli bench --kernel cpu --kernel int_mm --kernel triton --no-interpreter --json "$OUT/bench.json"
step detllm 190 $py -m detllm.cli bench --device cuda --hash-check --new-tokens 16
tar -C "$OUT" -czf "$OUT/reports.tgz" reports 2>/dev/null; rm -rf "$OUT/reports"
