"""Ground truth for W8A8 GEMM conformance: quantizers, exact accumulator, the epilogue language and its evaluator, bit
tools, operand validation, hypothesis strategies; ``reference.model`` produces real operands. Imports nothing from
``conformance``, ``faults`` or ``detllm``."""
