"""Issue 11 probe: why every Triton schedule of the built-in stops near 1,140 TOPS at 8192^3.

Offline sm_90 compiles (Triton 3.6, see NOTE.md) show that Triton's wgmma pipeliner never
keeps an int32-accumulator wgmma in flight across K iterations ("Rule 2.1" of
WGMMAPipeline.cpp: only fp32 accumulators are made properly async), so each K step of
an int8 GEMM ends in ``wgmma.wait_group 0``, and that int8 wgmma uses at most n128
instructions. This measures, in one process, CUDA events over back-to-back calls
(conformance.bench._e2e_interleaved, the bench's method):
  1. the built-in's current best against configurations that keep two programs resident
     per SM (one fills the other's wait_group 0 drains and epilogue) or take a larger
     BLOCK_K (fewer K steps, fewer drains), bits checked against the current best;
  2. the same plain Triton GEMM with e4m3 inputs and an fp32 accumulator (same tensor
     core rate, async wgmma allowed): what the int8 restriction costs;
  3. cuBLAS fp8 (torch._scaled_mm, e4m3, bf16 out): the vendor library's rate at the
     same tensor-core peak, under the same timing;
  4. the Gluon kernel (conformance/kernels/gluon_gemm.py: the int8 wgmma kept in flight
     across K steps by hand, wait_group 1), never run on a GPU before: first bit for bit
     against the built-in on awkward shapes (M / N edges, a K tail, K shorter than the
     ring, more tiles than SMs for the persistent variant) for every output kind, bias
     and the int32 accumulator, then timed with the rest.
Run on the GPU machine from the repository root:
    INT8CONF_TRITON_GLUON=1 python <this file>
(the variable also lets the tuner try the Gluon candidates in the same process; this
script times them through scaled_mm_config, which needs only an sm_90 device.)
"""
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

from conformance.bench import _e2e_interleaved, tops
from conformance.kernels import builtin_triton as bt
from conformance.kernels import gluon_gemm
from conformance.kernels.builtin_triton import Config

M = N = K = int(sys.argv[1]) if len(sys.argv) > 1 else 8192


@triton.jit
def fp8_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rn[None, :] * stride_bn + rk[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(tl.bfloat16))


#: every Gluon configuration the tuner may try with the opt-in (small and large buckets)
GLUON = list(dict.fromkeys(c for cs in bt.GLUON_CONFIGS.values() for c in cs))


#: (M, N, K) the Gluon configurations are checked on by default
EDGE_SHAPES = ((3000, 2000, 1168),  # edges, K tail, 10 K steps (not a multiple of 3), 192+ tiles
               (300, 1000, 48))     # K shorter than the ring (predicated prologue)


def gluon_exactness(g, configs=None, shapes=EDGE_SHAPES) -> list:
    """The Gluon configurations (``configs``, default :data:`GLUON`) whose outputs equal
    the built-in's bit for bit on awkward shapes, every output kind, with and without
    bias, and int32 (printed)."""
    ok = []
    ref_cfg = Config("ptr", 64, 128, 64, 8, 1, 4, 3)
    for c in (GLUON if configs is None else configs):
        bad = []
        try:
            for m, n, k in shapes:
                a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
                b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
                sa = torch.rand(m, device="cuda", generator=g) * 1e-2
                sb = torch.rand(n, device="cuda", generator=g) * 1e-2
                for dt in (torch.bfloat16, torch.float16, torch.float32, None):
                    for bias in ((None,) if dt is None else
                                 (None, torch.randn(n, device="cuda", generator=g).to(dt))):
                        want = bt.scaled_mm_config(ref_cfg, a, b, sa, sb, dt, bias)
                        bt.scaled_mm_config(c, a, b, sa, sb, dt, bias)  # first launch: kernel[grid]
                        got = bt.scaled_mm_config(c, a, b, sa, sb, dt, bias)  # the cached launcher
                        done = torch.cuda.Event()
                        done.record()
                        bt._wait(done, c.label(), 60.0)  # a first launch may hang (mbarriers)
                        bits = torch.int16 if want.element_size() == 2 else torch.int32
                        w, h = want.view(bits), got.view(bits)
                        if not torch.equal(w, h):
                            bad.append(f"{m}x{n}x{k} {dt} bias={bias is not None}: "
                                       f"{int((w != h).sum())} elements differ")
        except bt.KernelHang:
            raise  # the device is stuck behind it: nothing later would run
        except Exception as e:  # noqa: BLE001 -- a config this compiler / device cannot run
            bad.append(f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        print(f"{c.label():48s} exact on edge shapes: {'yes' if not bad else bad[:3]}")
        if not bad:
            ok.append(c)
    return ok


def main():
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0), f"{M}x{K}x{N}",
          f"INT8CONF_TRITON_GLUON={os.environ.get('INT8CONF_TRITON_GLUON', '')!r}",
          f"gluon available: {gluon_gemm.AVAILABLE}")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device="cuda", generator=g)
    b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda", generator=g)
    sa = torch.rand(M, device="cuda", generator=g) * 1e-3
    sb = torch.rand(N, device="cuda", generator=g) * 1e-3
    base = Config("ptr", 128, 256, 128, 8, 1, 8, 3)
    cands = [base,
             Config("tma", 128, 256, 128, 8, 1, 8, 3, persistent=True),
             # two programs per SM (the hypothesis of NOTE.md)
             Config("ptr", 128, 128, 128, 8, 1, 8, 3),
             Config("ptr", 128, 128, 128, 8, 1, 4, 3),
             Config("tma", 128, 128, 128, 8, 1, 4, 3),
             Config("ptr", 128, 128, 64, 8, 1, 4, 4),
             Config("ptr", 128, 128, 64, 8, 1, 8, 4),
             # one per SM, fewer K steps (fewer wait_group 0 drains)
             Config("ptr", 128, 256, 256, 8, 1, 8, 2),
             Config("tma", 128, 256, 256, 8, 1, 8, 2),
             Config("tma", 256, 128, 256, 8, 1, 8, 2, persistent=True),
             Config("tma", 128, 256, 256, 8, 1, 8, 2, persistent=True, warp_spec=True)]
    # the Gluon kernel (int32 accumulator in flight across K steps), if its edges are exact
    if gluon_gemm.AVAILABLE and torch.cuda.get_device_capability() == (9, 0):
        cands += gluon_exactness(g)
    else:
        print("gluon candidates skipped: no Gluon Hopper API or not an sm_90 device")
    ref = bt.scaled_mm_config(base, a, b, sa, sb, torch.bfloat16)
    fns = {}
    for c in cands:
        t0 = time.perf_counter()
        try:
            out = bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 -- a config this compiler cannot build
            print(f"{c.label():48s} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        # a second call goes through the cached direct launcher (builtin_triton._launch_raw),
        # the path the timing loop runs: its bits are checked too
        again = bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16)
        same = (torch.equal(out.view(torch.int16), ref.view(torch.int16))
                and torch.equal(again.view(torch.int16), ref.view(torch.int16)))
        print(f"{c.label():48s} compiled+ran in {time.perf_counter() - t0:5.1f} s, bits == base "
              f"(first and cached launch): {same}")
        if same:
            fns[c.label()] = (lambda c=c: bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16))
    # fp8 peers at the same tensor-core peak
    af = (torch.randn(M, K, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    bf = (torch.randn(N, K, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    fns["cuBLAS fp8 e4m3 (torch._scaled_mm, bf16 out)"] = (
        lambda: torch._scaled_mm(af, bf.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    c8 = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
    for bm, bn, bk, w, s in ((128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (128, 256, 128, 8, 4)):
        def f(bm=bm, bn=bn, bk=bk, w=w, s=s):
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
            fp8_gemm[grid](af, bf, c8, M, N, K, af.stride(0), bf.stride(0), c8.stride(0),
                           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w, num_stages=s)
        try:
            f()
            torch.cuda.synchronize()
            fns[f"plain Triton fp8 {bm}x{bn}x{bk} w{w} s{s} (fp32 acc)"] = f
        except Exception as e:  # noqa: BLE001
            print(f"fp8 {bm}x{bn}x{bk} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    us = _e2e_interleaved(fns)
    print(f"\n{'kernel':56s} {'us':>9s} {'TOPS':>8s}")
    for name, t in sorted(us.items(), key=lambda kv: kv[1]):
        print(f"{name:56s} {t:9.1f} {tops(M, K, N, t):8.1f}")
    print(subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu",
                          "--format=csv"], capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
