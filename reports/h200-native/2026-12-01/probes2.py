"""Device probes 2 (not shipped): int_exp at F=16/17 in small kernels; SM clock under 8192^3."""
import os, subprocess, sys, threading, time
import torch, triton, triton.language as tl
sys.path.insert(0, ".")
from detllm.kernels import intlang as IL
from detllm.kernels.intlang import int_exp, int_sigmoid
from detllm import ops

@triton.jit
def _exp(x_ptr, o_ptr, t_ptr, n, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK); m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    tl.store(o_ptr + offs, int_exp(x, t_ptr, F), mask=m)
    xc = tl.maximum(x, -(64 << F))
    v = xc * (-24204406)
    nn = (v + (1 << (F - 1))) >> F
    j = (nn & ((1 << 24) - 1)) >> 14
    tl.store(o_ptr + BLOCK + offs, nn, mask=m)
    tl.store(o_ptr + 2 * BLOCK + offs, j, mask=m)
    tl.store(o_ptr + 3 * BLOCK + offs, tl.load(t_ptr + j), mask=m)

@triton.jit
def _sig(x_ptr, o_ptr, t_ptr, n, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK); m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    tl.store(o_ptr + offs, int_sigmoid(x, t_ptr, F), mask=m)

x = torch.tensor([0, -1, -(1 << 17), -(1 << 16), -123456789, -(2 ** 31) + 1, -(64 << 17) - 1, -5, 0])
tab = IL.exp2_table(torch.device("cuda"))
print("table[0:3] on gpu:", tab[:3].tolist(), "dtype", tab.dtype, "numel", tab.numel())
for F in (16, 17):
    want = ops.int_exp(x, F).tolist()
    for block, warps in ((16, 4), (16, 1), (128, 4)):
        o = torch.zeros(4 * block, dtype=torch.int64, device="cuda")
        _exp[(1,)](x.cuda(), o, tab, x.numel(), F=F, BLOCK=block, num_warps=warps)
        o = o.cpu(); n = x.numel()
        got = o[:n].tolist()
        print(f"int_exp F={F} block={block} warps={warps}: {'OK' if got == want else 'WRONG'} got {got}"
              + ("" if got == want else f"\n   want {want}\n   n {o[block:block+n].tolist()}\n   j {o[2*block:2*block+n].tolist()}\n   t[j] {o[3*block:3*block+n].tolist()}"))
s = torch.tensor([0, 1, -1, 2 ** 31 - 1, -(2 ** 31) + 1, 123456789, -123456789, 1 << 17, -(1 << 17)])
for F in (16, 17):
    want = ops.int_sigmoid(s, F).tolist()
    for block, warps in ((16, 4), (16, 1), (128, 4)):
        o = torch.zeros(block, dtype=torch.int64, device="cuda")
        _sig[(1,)](s.cuda(), o, tab, s.numel(), F=F, BLOCK=block, num_warps=warps)
        got = o.cpu()[:s.numel()].tolist()
        print(f"int_sigmoid F={F} block={block} warps={warps}: {'OK' if got == want else 'WRONG ' + str(got)}")

print("== SM clock and power under a sustained 8192^3 triton GEMM (autotune off: the bucket's first config)")
from conformance.kernels import builtin_triton as bt
n = 8192
a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
sa = torch.rand(n, device="cuda") * 1e-3; sb = torch.rand(n, device="cuda") * 1e-3
cfg = bt.Config("tma", 128, 256, 128, 8, 1, 8, 3, True)
f = lambda: bt.scaled_mm_config(cfg, a, b, sa, sb)
for _ in range(3): f()
torch.cuda.synchronize()
samples = []; stop = threading.Event()
def sample():
    while not stop.is_set():
        samples.append(subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                       "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip())
        time.sleep(0.2)
th = threading.Thread(target=sample); th.start()
t0 = time.perf_counter(); iters = 0
st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); st.record()
while time.perf_counter() - t0 < 6.0:
    for _ in range(20): f()
    iters += 20; torch.cuda.synchronize()
en.record(); torch.cuda.synchronize(); stop.set(); th.join()
ms = st.elapsed_time(en) / iters
print(f"8192^3 {cfg}: {iters} calls, {ms * 1000:.1f} us/call, {2 * n ** 3 / (ms * 1e-3) / 1e12:.1f} TOPS")
print("samples (sm MHz, W, C, throttle):", samples[len(samples) // 2 - 3: len(samples) // 2 + 3])
clk = sorted(float(s.split(",")[0]) for s in samples[3:] if s)
pw = sorted(float(s.split(",")[1]) for s in samples[3:] if s)
print(f"sm clock under load: min {clk[0]:.0f} median {clk[len(clk)//2]:.0f} max {clk[-1]:.0f} MHz; power median {pw[len(pw)//2]:.0f} W")
