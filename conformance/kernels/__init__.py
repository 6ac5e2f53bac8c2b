"""Kernel contract, registry and built-in kernels (cpu, int_mm, triton)."""
