"""Offline sm_90 evidence for the warp-specialised ping-pong Gluon kernel
(``conformance.kernels.gluon_gemm.w8a8_mm_gluon_ws``; NOTE.md next to this file): compile
every :data:`builtin_triton.GLUON_WS_CONFIGS` configuration for GPUTarget("cuda", 90, 32)
with this Python's Triton, for each epilogue variant (bf16, bf16 + bias, fp16 + bias,
fp32 + bias, int32 accumulator only), and print per row:

- shared memory (Triton's metadata) and the warps launched (the default partition's 4
  plus the workers', rounded up to warp groups by Triton);
- the ``setmaxnreg`` values in the PTX (register reallocation between partitions) and
  the highest register the SASS touches (``nvdisasm`` of ``ptxas``' cubin: ``ptxas -v``
  reports only the launch budget, ``.maxnreg``, for a kernel that reallocates);
- ``ptxas -v`` stack / spill bytes;
- the wgmma shapes, the ``wgmma.wait_group`` values, and instruction counts: wgmma,
  mbarrier try_wait / arrive / arrive.expect_tx, TMA loads, named barriers (bar.sync).

ptxas / nvdisasm: the ones Triton itself uses for sm_90 (3.6: ``bin/ptxas``; 3.9:
``bin/ptxas-blackwell``). Needs a Python that imports torch (``builtin_triton`` does;
no GPU). Usage, from anywhere:
    .venv/bin/python ws_compile.py            # the Triton of this interpreter (3.9 here)
    # Triton 3.6, the H200's version, from a venv that has only triton 3.6.0, with torch
    # taken from the worktree's venv (3.6's site-packages first on the path):
    PYTHONPATH=/tmp/v36/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages \
        /tmp/v36/bin/python ws_compile.py
"""
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))
from conformance.kernels import builtin_triton as bt  # noqa: E402
from conformance.kernels import gluon_gemm  # noqa: E402

try:
    from triton.backends.nvidia.compiler import get_ptxas

    PTXAS = get_ptxas(90).path
except Exception:  # noqa: BLE001 -- another Triton layout
    PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
NVDISASM = os.path.join(os.path.dirname(PTXAS), "nvdisasm")
#: (label, sm90_source keywords)
EPILOGUES = (("bf16", dict(out_kind=0)), ("bf16+bias", dict(out_kind=0, has_bias=True)),
             ("fp16+bias", dict(out_kind=1, has_bias=True)),
             ("fp32+bias", dict(out_kind=2, has_bias=True)), ("int32", dict(acc_only=True)))


def compile_ws(cfg, **kw) -> dict:
    """Compile ``cfg`` (a ws Config) for sm_90 and return the facts of the module docstring."""
    src = gluon_gemm.sm90_source(cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages,
                                 group_m=cfg.group_m, ws=True, **kw)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg.num_warps, "enable_fp_fusion": False})
    ptx = k.asm["ptx"]
    r = dict(shared=k.metadata.shared, warps=k.metadata.num_warps,
             setmaxnreg=sorted(set(re.findall(
                 r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+);", ptx))),
             wgmma=sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\S+?)\s", ptx))),
             waits=re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx),
             n_wgmma=len(re.findall(r"wgmma\.mma_async", ptx)),
             n_try_wait=len(re.findall(r"mbarrier\.try_wait", ptx)),
             n_arrive=len(re.findall(r"mbarrier\.arrive\.shared", ptx)),
             n_expect=len(re.findall(r"mbarrier\.arrive\.expect_tx", ptx)),
             n_tma=len(re.findall(r"cp\.async\.bulk\.tensor", ptx)),
             n_bar_sync=len(re.findall(r"\bbar\.sync\b", ptx)),
             fma=bool(re.search(r"\bfma\.", ptx)))
    with tempfile.TemporaryDirectory() as d:
        p, cub = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(p, "w") as f:
            f.write(ptx)
        res = subprocess.run([PTXAS, "-v", "-arch=sm_90a", p, "-o", cub], capture_output=True,
                             text=True)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      res.stderr)
        r["stack_spill"] = tuple(int(x) for x in m.groups()) if m else res.stderr[-300:]
        r["ptxas_regs"] = int(re.search(r"Used (\d+) registers", res.stderr).group(1))
        sass = subprocess.run([NVDISASM, "-c", cub], capture_output=True, text=True).stdout
        r["sass_max_reg"] = 1 + max(int(x) for x in re.findall(r"\bR(\d+)\b", sass))
    return r


def main():
    print(f"Triton {triton.__version__}, target sm_90, ptxas {PTXAS}")
    print("| config | epilogue | shared B | warps | setmaxnreg | SASS regs | stack/spill B "
          "| wgmma | wait_group | wgmma n | try_wait | arrive | expect_tx | TMA | bar.sync |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cfg in bt.GLUON_WS_CONFIGS["large"]:
        for name, kw in EPILOGUES:
            r = compile_ws(cfg, **kw)
            nreg = ", ".join(f"{a} {n}" for a, n in r["setmaxnreg"])
            print(f"| {cfg.label()} | {name} | {r['shared']} | {r['warps']} | {nreg} "
                  f"| {r['sass_max_reg']} | {r['stack_spill']} | {','.join(r['wgmma'])} "
                  f"| {r['waits']} | {r['n_wgmma']} | {r['n_try_wait']} | {r['n_arrive']} "
                  f"| {r['n_expect']} | {r['n_tma']} | {r['n_bar_sync']} |"
                  + (" FMA!" if r["fma"] else ""))
            sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (Triton's nanobind "leaked" messages)


if __name__ == "__main__":
    main()
