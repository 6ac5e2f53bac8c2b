"""Compile the built-in's Triton kernels for sm_90 on a machine without a GPU and report,
per configuration, what bounds it (issue 11; NOTE.md next to this file):

- the wgmma instruction shapes and the ``wgmma.wait_group N`` values in the PTX (N = 0
  only: no wgmma is left in flight across K steps);
- shared memory (Triton's metadata) and registers per thread (``ptxas -v``, the ptxas
  bundled with Triton), hence resident programs per SM (65,536 registers, 228 KiB shared
  of which 1 KiB is reserved per program);
- the same for a minimal pointer-load GEMM with fp16 / e4m3 inputs and an fp32
  accumulator, the control: its dot is kept in flight (``wait_group 1`` in the loop);
- the same for the Gluon kernel (``conformance/kernels/gluon_gemm.py``, rows ``gluon``):
  an int8 GEMM whose wgmma is kept in flight by hand (``wait_group 1``), bf16 out,
  the scale strides the probe's [M] / [N] scales get (1).

ptxas: the one Triton itself uses for sm_90 (``get_ptxas(90)``: Triton 3.6's
``bin/ptxas``; Triton 3.9's ``bin/ptxas-blackwell``, CUDA 13 -- its plain ``bin/ptxas``,
CUDA 12.9, cannot read the PTX 9.x that 3.9 emits, hence "no registers" in the first
version of NOTE.md).

Arguments get the divisibility-by-16 specialisation the JIT gives aligned tensors and
sizes (without it no load is vectorised and nothing is pipelined). Usage:
    python sm90_compile.py            # the table of NOTE.md
"""
import inspect
import os
import re
import subprocess
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))
from conformance.kernels import gluon_gemm, triton_gemm  # noqa: E402

try:  # the ptxas this Triton runs for sm_90
    from triton.backends.nvidia.compiler import get_ptxas

    PTXAS = get_ptxas(90).path
except Exception:  # noqa: BLE001 -- another Triton layout
    PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
DIVISIBLE = {"a_ptr", "b_ptr", "sa_ptr", "sb_ptr", "bias_ptr", "out_ptr", "ws_ptr", "cnt_ptr", "c_ptr",
             "M", "N", "K", "stride_am", "stride_bn", "stride_om", "stride_sa", "stride_sb", "sam", "sbn",
             "scm"}


def control_gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbn, scm,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Minimal pointer-load GEMM, b [N, K], fp32 accumulator (the control)."""
    pid = tl.program_id(0)
    npn = tl.cdiv(N, BN)
    rm = ((pid // npn) * BM + tl.arange(0, BM)) % M
    rn = ((pid % npn) * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :]
    b_ptrs = b_ptr + rn[None, :] * sbn + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in tl.range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc)


def compile_one(kernel: str, bm: int, bn: int, bk: int, warps: int, stages: int, dtype: str = "i8"):
    common = dict(sa_ptr="*fp32", sb_ptr="*fp32", bias_ptr="*i16", out_ptr="*i16", M="i32", N="i32",
                  K="i32", stride_sa="i32", stride_sb="i32", stride_bias="constexpr", stride_om="i32",
                  HAS_BIAS="constexpr", OUT_KIND="constexpr", ACC_ONLY="constexpr",
                  BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, stride_bias=1, HAS_BIAS=False, OUT_KIND=0,
                 ACC_ONLY=False, GROUP_M=8)
    if kernel == "gluon":
        src = gluon_gemm.sm90_source(bm, bn, bk, stages)
    elif kernel == "control":
        fn = control_gemm
        sig = dict(a_ptr=f"*{dtype}", b_ptr=f"*{dtype}", c_ptr="*fp32", M="i32", N="i32", K="i32",
                   sam="i32", sbn="i32", scm="i32", BM="constexpr", BN="constexpr", BK="constexpr")
        const = dict(BM=bm, BN=bn, BK=bk)
    elif kernel == "ptr":
        fn = triton_gemm.w8a8_mm
        sig = dict(common, a_ptr="*i8", b_ptr="*i8", ws_ptr="*i32", cnt_ptr="*i32", stride_am="i32",
                   stride_ak="constexpr", stride_bn="i32", stride_bk="constexpr",
                   SPLIT_K="constexpr", EVEN_K="constexpr", INT64_IDX="constexpr",
                   K_ITERS_STATIC="constexpr")
        const.update(stride_ak=1, stride_bk=1, SPLIT_K=1, EVEN_K=True, INT64_IDX=False, K_ITERS_STATIC=0)
    else:
        fn = triton_gemm.w8a8_mm_tma
        sig = dict(common, a_desc=f"tensordesc<i8[{bm}, {bk}]>", b_desc=f"tensordesc<i8[{bn}, {bk}]>",
                   NUM_PROGS="i32", FLATTEN="constexpr", WARP_SPEC="constexpr")
        const.update(FLATTEN=False, WARP_SPEC=0)
    if kernel != "gluon":
        params = list(inspect.signature(fn).parameters)
        attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params)
                 if p in DIVISIBLE and sig[p] != "constexpr"}
        src = ASTSource(fn=triton.jit(fn), signature={p: sig[p] for p in params},
                        constexprs=const, attrs=attrs)
    opts = dict(num_warps=warps, num_stages=stages)
    if kernel == "gluon":  # its ring depth is a constexpr; launched without FMA contraction
        opts = {"num_warps": warps, "enable_fp_fusion": False}
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    ptx = k.asm["ptx"]
    path = f"/tmp/sm90_{kernel}_{dtype}_{bm}x{bn}x{bk}_w{warps}s{stages}.ptx"
    with open(path, "w") as f:
        f.write(ptx)
    out = subprocess.run([PTXAS, "-v", "-arch=sm_90a", path, "-o", os.devnull],
                         capture_output=True, text=True).stderr if os.path.exists(PTXAS) else ""
    found = re.findall(r"Used (\d+) registers", out)  # none without a ptxas that reads this PTX
    regs = int(found[0]) if found else None
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    shared = k.metadata.shared
    by_smem = 233472 // (shared + 1024)
    by_regs = 65536 // (((regs + 7) // 8 * 8) * 32 * warps) if regs else by_smem
    shapes = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
    waits = sorted(set(int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx)))
    return dict(kernel=kernel, dtype=dtype, tile=f"{bm}x{bn}x{bk}", warps=warps, stages=stages,
                wgmma=",".join(shapes), wait_groups=waits, shared=shared, regs=regs,
                per_sm=min(by_regs, by_smem),
                spills=sum(int(x) + int(y) for x, y in spill) if spill else None)


ROWS = [("control", 128, 256, 64, 8, 3, "fp16"), ("control", 128, 256, 128, 8, 3, "fp8e4nv"),
        ("ptr", 128, 256, 128, 8, 3), ("tma", 128, 256, 128, 8, 3), ("ptr", 256, 128, 128, 8, 3),
        ("ptr", 128, 128, 128, 8, 4), ("ptr", 128, 128, 128, 4, 4), ("tma", 128, 128, 128, 8, 4),
        ("ptr", 128, 128, 128, 8, 3), ("ptr", 128, 128, 128, 4, 3), ("tma", 128, 128, 128, 4, 3),
        ("tma", 128, 128, 128, 8, 3), ("ptr", 128, 128, 64, 4, 4), ("ptr", 128, 256, 256, 8, 2)]
if gluon_gemm.AVAILABLE:  # the hand-pipelined Gluon kernel (int8, wait_group 1)
    ROWS += [("gluon", 128, 256, 128, 8, 3), ("gluon", 128, 128, 128, 4, 3),
             ("gluon", 256, 128, 128, 8, 3), ("gluon", 64, 128, 128, 4, 4),
             ("gluon", 128, 256, 64, 8, 4)]

if __name__ == "__main__":
    print(f"Triton {triton.__version__}, target sm_90")
    print(f"ptxas: {PTXAS}")
    print("| kernel | inputs | tile | warps | stages | wgmma | wait_group N | shared B | regs | programs/SM |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    spilled = []
    for row in ROWS:
        r = compile_one(*row)
        print(f"| {r['kernel']} | {r['dtype']} | {r['tile']} | {r['warps']} | {r['stages']} | {r['wgmma']} "
              f"| {r['wait_groups']} | {r['shared']} | {r['regs']} | {r['per_sm']} |")
        if r["spills"]:
            spilled.append(f"{r['kernel']} {r['tile']} w{r['warps']} s{r['stages']}: "
                           f"{r['spills']} B")
    print("spills (bytes stored + loaded):", "; ".join(spilled) or "none")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: Triton's nanobind module reports "leaked" objects
