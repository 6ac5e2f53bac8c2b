"""Device probes of 2026-12-01 (not shipped): int_sigmoid division, int32 overflow
behaviour of the native built-ins, SM clock under a sustained 8192^3 GEMM."""
import subprocess, sys, threading, time
import torch, triton, triton.language as tl
sys.path.insert(0, ".")

print("== 1. int_sigmoid: old (2n+d)//2d form vs new, and raw int64 division")
from detllm.kernels import intlang as IL
from detllm.kernels.intlang import int_exp
from detllm import ops

@triton.jit
def _old(x_ptr, o_ptr, t_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK); m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    one = x * 0 + 1
    e = int_exp(tl.where(x >= 0, -x, x), t_ptr, 17)
    den = e + (one << 30)
    pos = ((one << 61) + den) // (2 * den)
    neg = (2 * (e << 30) + den) // (2 * den)
    tl.store(o_ptr + offs, tl.where(x >= 0, pos, neg), mask=m)
    tl.store(o_ptr + BLOCK + offs, den, mask=m)
    tl.store(o_ptr + 2 * BLOCK + offs, (one << 61) + den, mask=m)

@triton.jit
def _div(a_ptr, b_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK); m = offs < n
    tl.store(o_ptr + offs, tl.load(a_ptr + offs, mask=m, other=0) // tl.load(b_ptr + offs, mask=m, other=1), mask=m)

s = torch.tensor([0, 1, -1, 2 ** 31 - 1, -(2 ** 31) + 1, 123456789, -123456789, 1 << 17, -(1 << 17)])
want = ops.int_sigmoid(s, 17)
x = s.cuda(); o = torch.zeros(48, dtype=torch.int64, device="cuda")
_old[(1,)](x, o, IL.exp2_table(x.device), 9, BLOCK=16)
o = o.cpu()
print("want      ", want.tolist()); print("old gpu   ", o[:9].tolist())
print("den       ", o[16:25].tolist()); print("2^61+den  ", o[32:41].tolist())
A = torch.tensor([2 ** 61 + 2 ** 31, 2 ** 61, 2 ** 61 - 1, 2 ** 62 + 5, 2 ** 60 + 2 ** 30, 2305843010287435776 + 3, 10 ** 18])
B = torch.tensor([2 ** 32, 2 ** 32, 2 ** 32, 2 ** 31 + 1, 2 ** 31, 2 ** 31 + 2, 2 ** 32 + 12345])
q = torch.zeros_like(A).cuda(); _div[(1,)](A.cuda(), B.cuda(), q, 7, BLOCK=8)
print("div want  ", (A // B).tolist()); print("div gpu   ", q.cpu().tolist())
try:
    k = _old.warmup(x, o.cuda(), IL.exp2_table(x.device), 9, BLOCK=16, grid=(1,))
    ptx = k.asm["ptx"]
    print("ptx div lines:", [l.strip() for l in ptx.splitlines() if "div" in l or "rem" in l][:12])
except Exception as e:
    print("ptx dump failed:", type(e).__name__, str(e)[:200])
from detllm.kernels import intlang as IL2
import importlib
print("new helper via test kernel: see detllm-cuda log")

print("== 2. int32 overflow, native built-ins")
from conformance.kernels import builtin_triton as bt, builtin_int_mm as bi
K = 131073
def case(pattern):
    if pattern == "monotone":
        a = torch.full((17, K), -128, dtype=torch.int8)
    else:  # positives first (sum 2^31 + 2^14), then 20,000 products of -16256
        a = torch.cat([torch.full((17, K), -128, dtype=torch.int8), torch.full((17, 20000), 127, dtype=torch.int8)], 1)
    b = torch.full((16, a.shape[1]), -128, dtype=torch.int8)
    return a.cuda(), b.cuda()
for pattern in ("monotone", "mixed"):
    a, b = case(pattern)
    kk = a.shape[1]; P = 16384 * K; Q = 16256 * (kk - K)
    exact = P - Q
    wrap = ((exact + 2 ** 31) % 2 ** 32) - 2 ** 31
    clamp_steps = min(P, 2 ** 31 - 1) - Q
    print(f"{pattern}: exact {exact} wrap {wrap} clamp-per-step(positives first) {clamp_steps} clamp(exact) {max(min(exact, 2**31-1), -2**31)}")
    r = {"int_mm(cuBLAS)": int(bi.int_mm(a, b)[0, 0])}
    for sk in (1, 2, 4):
        cfg = bt.Config("ptr", 16, 16, 256, 2, sk, 4, 1)
        try:
            r[f"triton ptr16x16x256 sk{sk}"] = int(bt.scaled_mm_config(cfg, a, b, None, None, None)[0, 0])
        except Exception as e:
            r[f"triton sk{sk}"] = f"{type(e).__name__}: {str(e)[:100]}"
    r["triton int_mm (default config)"] = int(bt.int_mm(a, b)[0, 0])
    for k2, v in r.items():
        print(f"   {k2:34s} {v}")

print("== 3. SM clock and power under a sustained 8192^3 triton GEMM")
n = 8192
a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
sa = torch.rand(n, device="cuda") * 1e-3; sb = torch.rand(n, device="cuda") * 1e-3
for _ in range(3):
    bt.scaled_mm(a, b, sa, sb)
torch.cuda.synchronize()
samples = []
stop = threading.Event()
def sample():
    while not stop.is_set():
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
        samples.append(out); time.sleep(0.25)
th = threading.Thread(target=sample); th.start()
t0 = time.perf_counter(); iters = 0
st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
st.record()
while time.perf_counter() - t0 < 6.0:
    for _ in range(20):
        bt.scaled_mm(a, b, sa, sb)
    iters += 20
    torch.cuda.synchronize()
en.record(); torch.cuda.synchronize(); stop.set(); th.join()
ms = st.elapsed_time(en) / iters
print(f"8192^3: {iters} calls, {ms * 1000:.1f} us/call, {2 * n ** 3 / (ms * 1e-3) / 1e12:.1f} TOPS")
print("samples (sm MHz, W, C, throttle):", samples[len(samples) // 2 - 3: len(samples) // 2 + 3])
clk = [float(x.split(",")[0]) for x in samples[2:] if x]
print(f"sm clock under load: min {min(clk):.0f} median {sorted(clk)[len(clk)//2]:.0f} max {max(clk):.0f} MHz")
