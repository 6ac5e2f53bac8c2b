"""Fused Triton kernels of the integer-only engine (GPU decode path), one op per module, each bit-identical
to the torch op it names (the readable specification and CPU path):

* ``intlang``: shared device functions (round_shift, floor_shift, bitlen, div_round_pos, isqrt_newton,
  int_exp, int_sigmoid) and the launcher;
* ``norm_quant``: ``engine.norm_quant``; ``quant_rows``: ``engine.quant_rows``;
* ``linear``: int8 GEMM + ``engine._linear``'s epilogue, with the residual add, SwiGLU or logits fused;
* ``qk_rope``: ``engine.norm_fixed`` + ``ops.apply_rope`` + K/V cache write + query quantization;
* ``attention``: scores + ``ops.int_softmax`` + ``ops.pv_matmul`` for one query row.

Every kernel runs compiled on CUDA tensors and under Triton's interpreter on CPU tensors.
"""
