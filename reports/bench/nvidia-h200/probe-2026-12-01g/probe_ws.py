"""Issue 11 follow-up probe for the warp-specialised ping-pong Gluon kernel
(``conformance.kernels.gluon_gemm.w8a8_mm_gluon_ws``, builtin_triton.GLUON_WS_CONFIGS),
which has never run on a GPU (NOTE.md next to this file: design, offline evidence).

1. Bit for bit against the built-in (probe-2026-12-01f/probe_8192.gluon_exactness: every
   output kind, with and without bias, int32; first launch and cached launcher; a launch
   not finished after 60 s -- a wrong mbarrier parity deadlocks -- stops the probe with
   KernelHang naming the configuration) on its edge shapes plus the ones that exercise
   the ping-pong protocol: several tiles per program with K steps fewer than the ring
   (the case the ordering barrier makes exact), one K step per tile, odd tile counts per
   program, fewer tiles than SMs (consumer 1 idle).
2. The exact ones timed at 8192^3 (the bench's _e2e_interleaved) next to the best
   non-ws Gluon configurations and cuBLAS fp8 (torch._scaled_mm, e4m3, bf16 out), bits
   of the timed output checked against gluon 128x256x128 g8 w8 s4.
Run on the GPU machine from the repository root (~3 minutes, mostly compiles):
    python reports/bench/nvidia-h200/probe-2026-12-01g/probe_ws.py
Needs an sm_90 device; INT8CONF_TRITON_GLUON_WS is not needed (scaled_mm_config).
"""
import importlib.util
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "..", "..")))
spec = importlib.util.spec_from_file_location(
    "probe_8192", os.path.join(HERE, "..", "probe-2026-12-01f", "probe_8192.py"))
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
bt = probe.bt
_c = bt._c

WS = list(bt.GLUON_WS_CONFIGS["large"])
#: the best non-ws Gluon configurations measured (probe-2026-12-01g: 1,318-1,367 TOPS)
BASE = [_c("gluon", 128, 256, 128, 8, 1, 8, 4), _c("gluon", 128, 256, 128, 8, 1, 8, 4,
                                                   persistent=True)]
#: 132 SMs; tiles of 128x128: (M/128) * (N/128)
SHAPES = probe.EDGE_SHAPES + (
    (3000, 2000, 320),   # 384 tiles (~3 per program, odd), 3 or 5 K steps < ring
    (2000, 3000, 64),    # one K step per tile (k_iters == 1), 384 tiles
    (4096, 4224, 528),   # 1056 tiles = 8 per program, K tail, 5 / 9 K steps
    (1000, 1000, 4096),  # 64 tiles < 132 SMs: one tile per program, consumer 1 idle
)
M = N = K = 8192


def main():
    import triton

    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0),
          f"gluon available: {probe.gluon_gemm.AVAILABLE}")
    if not (probe.gluon_gemm.AVAILABLE and torch.cuda.get_device_capability() == (9, 0)):
        print("needs an sm_90 device and Gluon's Hopper API")
        return
    g = torch.Generator(device="cuda").manual_seed(0)
    ok = probe.gluon_exactness(g, WS + BASE, SHAPES)
    a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device="cuda", generator=g)
    b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda", generator=g)
    sa = torch.rand(M, device="cuda", generator=g) * 1e-3
    sb = torch.rand(N, device="cuda", generator=g) * 1e-3
    ref = bt.scaled_mm_config(BASE[0], a, b, sa, sb, torch.bfloat16)
    fns = {}
    for c in ok:
        out = bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16)
        again = bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16)
        done = torch.cuda.Event()
        done.record()
        bt._wait(done, c.label(), 60.0)
        same = (torch.equal(out.view(torch.int16), ref.view(torch.int16))
                and torch.equal(again.view(torch.int16), ref.view(torch.int16)))
        print(f"{c.label():48s} 8192^3 bits == {BASE[0].label()}: {same}")
        if same:
            fns[c.label()] = (lambda c=c: bt.scaled_mm_config(c, a, b, sa, sb, torch.bfloat16))
    af = (torch.randn(M, K, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    bf = (torch.randn(N, K, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    fns["cuBLAS fp8 e4m3 (torch._scaled_mm, bf16 out)"] = (
        lambda: torch._scaled_mm(af, bf.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    us = probe._e2e_interleaved(fns)
    print(f"\n{'kernel':56s} {'us':>9s} {'TOPS':>8s}")
    for name, t in sorted(us.items(), key=lambda kv: kv[1]):
        print(f"{name:56s} {t:9.1f} {probe.tops(M, K, N, t):8.1f}")
    print(subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,"
                          "temperature.gpu", "--format=csv"],
                         capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
