"""Compile detllm's fused Triton kernels for sm_90 on a CPU-only machine and
write TTIR / LLVM IR / PTX per kernel into the folder given as argv[1].

The signatures and constexprs are those the cuda-marked tests in
tests/detllm/test_fused_kernels.py launch (element-wise OP 0/5/6, quant_rows
at H=3072, norm_quant at H=1024, linear SwiGLU with decode and R=300 tiles);
pointers and H carry the divisibility-16 hint Triton's launcher gives them.
Run with any Triton (e.g. PYTHONPATH=<unzipped triton 3.6 wheel>, chmod +x its
backends/nvidia/bin/*): python reports/detllm-ir-audit/compile_sm90_ir.py OUT
"""
import sys, os, inspect, triton
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests/helpers"), str(ROOT / "tests/detllm")]
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import test_fused_kernels as T
from detllm.kernels import norm_quant as KN, quant_rows as KR, linear as KL
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
def comp(name, fn, sig, const, div16, nw=4, ns=3):
    params = list(inspect.signature(fn).parameters)
    sig = {p: ("constexpr" if p in const else sig[p]) for p in params}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in div16}
    src = ASTSource(fn=triton.jit(fn), signature=sig, constexprs=const, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw, num_stages=ns))
    for ext in ("ttir", "llir", "ptx"):
        open(f"{out}/{name}.{ext}", "w").write(k.asm[ext])
    print("ok", name)
P = ["x_ptr", "k_ptr", "o_ptr", "table_ptr"]
for op in (0, 5, 6):
    comp(f"elem{op}", T._elementwise_kernel, dict(x_ptr="*i64", k_ptr="*i64", o_ptr="*i64", n="i32", table_ptr="*i64"), dict(OP=op, BLOCK=32 if op == 0 else (8 if op == 5 else 16)), P)
comp("quant_rows", KR._quant_rows_kernel, dict(v_ptr="*i64", q_ptr="*i8", tm_ptr="*i64", tk_ptr="*i64", H="i32"), dict(BLOCK_H=4096), ["v_ptr", "q_ptr", "tm_ptr", "tk_ptr", "H"], nw=8)
comp("norm_quant", KN._norm_quant_kernel, dict(x_ptr="*i64", g_ptr="*i64", q_ptr="*i8", tm_ptr="*i64", tk_ptr="*i64", H="i32", eps_int="i32", P="i32"), dict(BLOCK_H=1024), ["x_ptr", "g_ptr", "q_ptr", "tm_ptr", "tk_ptr", "H"])
lsig = dict(a_ptr="*i8", w_ptr="*i8", tm_ptr="*i64", tk_ptr="*i64", m_ptr="*i64", k_ptr="*i64", out_ptr="*i64", table_ptr="*i64", R="i32", N="i32", K="i32", W_OFF_UP="i32")
comp("linear3_r8", KL._linear_kernel, lsig, dict(MODE=3, FG=17, SW_SHIFT=0, BLOCK_M=16, BLOCK_N=32, BLOCK_K=256), ["a_ptr","w_ptr","tm_ptr","tk_ptr","m_ptr","k_ptr","out_ptr","table_ptr","N","K","W_OFF_UP"], nw=4, ns=4)
comp("linear3_r300", KL._linear_kernel, lsig, dict(MODE=3, FG=17, SW_SHIFT=0, BLOCK_M=64, BLOCK_N=128, BLOCK_K=64), ["a_ptr","w_ptr","tm_ptr","tk_ptr","m_ptr","k_ptr","out_ptr","table_ptr","N","K","W_OFF_UP"], nw=4, ns=3)
