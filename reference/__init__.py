"""Ground truth for W8A8 GEMM conformance: the numerics.

Quantizers, the exact accumulator, epilogue contracts and their bit-exact
emulation, bf16/fp16/fp32 bit tools, operand validation, hypothesis
strategies. The model pipeline that produces real operands (corpus,
tokenizer, training, checkpoints, power-of-two requantization, capture,
the W8A8 forward) is the subpackage ``reference.model``. Nothing here imports
from ``conformance``, ``faults`` or ``detllm``: data flows reference ->
kernels -> faults -> checks -> suite/sweep -> scoring -> reports.
"""
