"""The pre-14eac41 form of intlang.int_sigmoid (-tl.abs(x), (1 << 61)
literal) in a one-op kernel, compiled for sm_90; writes argv[1].llir/.ttir.
Its LLVM body equals the current form's (int_sigmoid_*.triton36.sm90.llir).
"""
import sys, os, inspect, triton
import triton.language as tl
sys.path[:0] = [str(__import__("pathlib").Path(__file__).resolve().parents[2])]
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from detllm.kernels.intlang import int_exp

@triton.jit
def int_sigmoid_old(x, table_ptr, F: tl.constexpr):
    e = int_exp(-tl.abs(x), table_ptr, F)
    den = e + (1 << 30)
    pos = ((e * 0 + (1 << 61)) + den) // (2 * den)
    neg = (2 * (e << 30) + den) // (2 * den)
    return tl.where(x >= 0, pos, neg)

@triton.jit
def k_old(x_ptr, o_ptr, n, table_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    tl.store(o_ptr + offs, int_sigmoid_old(x, table_ptr, 17), mask=m)

src = ASTSource(fn=k_old, signature=dict(x_ptr="*i64", o_ptr="*i64", n="i32", table_ptr="*i64", BLOCK="constexpr"), constexprs=dict(BLOCK=16))
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
open(sys.argv[1] + ".llir", "w").write(k.asm["llir"]); open(sys.argv[1] + ".ttir", "w").write(k.asm["ttir"])
print("ok")
