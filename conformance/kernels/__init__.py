"""Kernel contract, registry and built-in kernels (cpu, int_mm, triton).

Modules: ``spec`` (KernelSpec, ShapeConstraints), ``registry`` (register,
get_kernel, list_kernels, resolve_kernels), ``loader`` (third-party kernels:
``pkg.module:function``, entry points, ``declare``, ``vllm_adapter``),
``runner`` (run_kernel, run_int_mm, KernelRun, AccRun), ``trace``
(record_path, record_operands), ``builtin_cpu``, ``builtin_int_mm``,
``builtin_triton`` (imported lazily by the registry), ``triton_probe``.
"""
