"""Fused Triton kernels of the integer-only engine (GPU decode path).

One op per module; each reproduces, bit for bit, the unfused torch op it
names (which stays the readable specification and the CPU path) under the
frozen rules of ``detllm/README.md``:

=====================  =====================================================
module                 fuses (torch spec)
=====================  =====================================================
``intlang``            shared device functions: ``round_shift``,
                       ``floor_shift``, ``bitlen``, ``div_round_pos``,
                       ``isqrt_newton``, ``int_exp`` (Q30, dyadic/table)
``norm_quant``         ``engine.norm_quant`` (RMSNorm + per-token int8)
``linear``             int8 GEMM + ``engine._linear`` dyadic epilogue, with the
                       saturating residual add, ``ops.int_swiglu`` or the
                       int32 logits saturation fused in
``qk_rope``            ``engine.norm_fixed`` (QK-norm) + ``ops.apply_rope`` +
                       K-cache quantization + cache write + per-(token, head)
                       query quantization
``attention``          scores (q.K int8 dot) + ``ops.int_softmax`` +
                       ``ops.pv_matmul`` for one query row against the cache
``quant_rows``         ``engine.quant_rows`` (per-token activation int8)
=====================  =====================================================

Every kernel runs compiled on CUDA tensors and under Triton's interpreter on
CPU tensors (``intlang.launcher``), so the bit-exactness tests run anywhere.
"""
