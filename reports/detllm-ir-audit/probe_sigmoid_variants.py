"""Device probe 3 (not shipped): which formulation of -|x| -> int_exp gives torch's bits on the GPU."""
import sys
import torch, triton, triton.language as tl
sys.path.insert(0, ".")
from detllm.kernels import intlang as IL
from detllm.kernels.intlang import int_exp, int_sigmoid, round_shift
from detllm import ops

@triton.jit
def _exp_abs(ax, table_ptr, F: tl.constexpr):
    xc = tl.minimum(ax, 64 << F)
    v = xc * 24204406
    n = (v + (1 << (F - 1))) >> F
    q = n >> 24
    r = n & ((1 << 24) - 1)
    j = r >> 14
    rr = r & ((1 << 14) - 1)
    t0 = tl.load(table_ptr + j)
    t1 = tl.load(table_ptr + j + 1)
    mant = t0 - round_shift((t0 - t1) * rr, rr * 0 + 14)
    qq = tl.minimum(q, 62)
    half = ((qq * 0 + 1) << qq) >> 1
    return (mant + half) >> qq

@triton.jit
def _tail(x, e):
    one = x * 0 + 1
    den = e + (one << 30)
    num = tl.where(x >= 0, one << 60, e << 30)
    return (num + (den >> 1)) // den

@triton.jit
def _k(x_ptr, o_ptr, t_ptr, n, V: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK); m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    if V == 0:
        y = int_sigmoid(x, t_ptr, F)
    elif V == 1:
        y = _tail(x, int_exp(tl.minimum(x, -x), t_ptr, F))
    elif V == 2:
        y = _tail(x, _exp_abs(tl.where(x < 0, -x, x), t_ptr, F))
    elif V == 3:
        y = _tail(x, int_exp(tl.maximum(-tl.abs(x), -(64 << F)), t_ptr, F))
    elif V == 4:
        xc = tl.minimum(tl.maximum(x, -(64 << F)), 64 << F)
        y = _tail(x, int_exp(tl.where(xc >= 0, -xc, xc), t_ptr, F))
    else:
        xc = tl.minimum(tl.maximum(x, -(64 << F)), 64 << F)
        y = _tail(x, _exp_abs(tl.where(xc < 0, -xc, xc), t_ptr, F))
    tl.store(o_ptr + offs, y, mask=m)

s = torch.tensor([0, 1, -1, 2 ** 31 - 1, -(2 ** 31) + 1, 123456789, -123456789, 1 << 17, -(1 << 17),
                  2 ** 62, -(2 ** 62), 5, -5, 8388608, -8388609, 3 << 20])
tab = IL.exp2_table(torch.device("cuda"))
for F in (16, 17):
    want = ops.int_sigmoid(s, F).tolist()
    for V in range(6):
        o = torch.zeros(16, dtype=torch.int64, device="cuda")
        _k[(1,)](s.cuda(), o, tab, s.numel(), V=V, F=F, BLOCK=16)
        got = o.cpu().tolist()
        bad = sum(g != w for g, w in zip(got, want))
        print(f"V{V} F={F}: {'OK' if not bad else f'WRONG at {bad}/16'}" + ("" if not bad else f" got {got[:9]}"))
