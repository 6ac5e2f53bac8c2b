"""Ground truth for W8A8 GEMM conformance.

Quantizers, the exact accumulator, epilogue emulation, bf16 bit tools,
checkpoint I/O, layer capture and replay and power-of-two requantization.
Nothing here imports from ``conformance``, ``faults`` or ``detllm``: data
flows reference -> kernels -> faults -> checks -> scoring -> reports.
"""
