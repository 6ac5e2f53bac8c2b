"""Kernel contract (``spec``), registry, loader, runner, trace and the built-in kernels (cpu, int_mm, triton)."""
