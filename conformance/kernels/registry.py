"""Kernel registry: built-ins, user registrations, ``pkg.module:function``
names and the ``int8conf.kernels`` entry-point group.

Built-ins (modules imported lazily -- importing triton costs about a second):

=========  ============================  ======================================
name       declared contract             what runs
=========  ============================  ======================================
``cpu``    CUTLASS_STYLE                 exact chunked-float32 int32 GEMM, torch epilogue
``int_mm`` CUTLASS_STYLE                 ``torch._int_mm`` (CUDA or CPU), padded
``triton`` TRITON_STYLE                  Triton int8 GEMM, fused epilogue
                                         (native on CUDA, interpreter on CPU)
=========  ============================  ======================================

``cpu`` and ``int_mm`` declare the CUTLASS-style epilogue (``w_then_a``, bias
in float32 before the rounding) and ``triton`` the vLLM-Triton-style one
(``a_then_w``, bias after the rounding), so a pair comparison of ``triton``
against either shows the real disagreements two legal kernels have under
non-power-of-two scales.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional

from conformance.kernels import adapters, loader
from conformance.kernels.spec import BUILTINS, KernelSpec, ShapeConstraints
from reference.errors import KernelLoadError, first_line

_MODULES = {
    "cpu": "conformance.kernels.builtin_cpu",
    "int_mm": "conformance.kernels.builtin_int_mm",
    "triton": "conformance.kernels.builtin_triton",
}
_DESCRIPTIONS = {
    "cpu": "exact int32 GEMM on the CPU (chunked float32, exact) + torch float32 epilogue",
    "int_mm": "torch._int_mm (cuBLASLt on CUDA, oneDNN/ATen on CPU), zero-padded to its "
    "shape constraints, + torch float32 epilogue",
    "triton": "Triton int8 GEMM (tl.dot int32 accumulator, masked tails, fused epilogue; "
    "native on CUDA, interpreter on CPU)",
}
#: Layout declarations of built-ins whose module does not define CONTIGUOUS_ONLY.
#: ``triton``: its kernel addresses b as ``b_ptr + n * b.stride(0) + k`` (unit
#: inner stride assumed), so the transposed view of a [K, N] buffer (strides
#: (1, N)) gives wrong results; measured, issue 8. Padded row-major a and b are
#: fine. Until the kernel reads b.stride(1), it is handed b dense and its
#: report says the column-major b layout was not covered.
_REGISTERED: dict[str, KernelSpec] = {}
_BUILT: dict[str, KernelSpec] = {}
#: Name resolvers tried first by :func:`get_kernel` (``name -> KernelSpec | None``);
#: ``faults`` registers one for injected names such as ``triton+F4@all#s0``.
_RESOLVERS: list[Callable] = []


def register_resolver(fn: Callable) -> None:
    """Add a name resolver ``fn(name) -> KernelSpec | None`` (idempotent).

    :func:`get_kernel` asks every resolver, in registration order, before the
    built-ins; the first non-None answer wins. Used by ``faults`` (imported by
    ``int8conf check``, the pytest plugin and the sweep) so that an injected
    kernel's name resolves anywhere a kernel name does.
    """
    if fn not in _RESOLVERS:
        _RESOLVERS.append(fn)


def register(spec: KernelSpec) -> None:
    """Register (or replace) a kernel under ``spec.name``.

    Raises:
        KernelLoadError: not a KernelSpec, empty name, or a built-in's name.
    """
    if not isinstance(spec, KernelSpec):
        raise KernelLoadError(f"register() needs a KernelSpec, got {type(spec).__name__}")
    if not spec.name or spec.name in BUILTINS or spec.name == "all":
        raise KernelLoadError(f"cannot register a kernel named {spec.name!r} (empty, 'all' or a built-in name)")
    _REGISTERED[spec.name] = spec


def _builtin(name: str) -> KernelSpec:
    if name in _BUILT:
        return _BUILT[name]
    try:
        mod = importlib.import_module(_MODULES[name])
    except Exception as e:  # noqa: BLE001 -- e.g. triton missing or broken
        msg = first_line(e, None)
        raise KernelLoadError(f"built-in kernel {name!r} cannot be imported: {type(e).__name__}: {msg}") from None
    if name == "int_mm":
        devices = ("cuda", "cpu")
        # it pads internally, so it accepts every shape; the note keeps the native rule
        cons = ShapeConstraints(
            note="pads internally to torch._int_mm's native constraints (CUDA: M>16, K and N multiples of 8; CPU: none)"
        )
    elif name == "triton":
        devices = ("cuda", "cpu")
        cons = ShapeConstraints(note="masked tails: any M, K, N >= 1")
    else:
        devices = ("cpu",)
        cons = ShapeConstraints(note="any M, K, N >= 1")
    spec = KernelSpec(
        name=name,
        scaled_mm=mod.scaled_mm,
        contract=mod.CONTRACT,
        devices=devices,
        constraints=cons,
        version="1",
        source_digest=mod.SOURCE_DIGEST,
        int_mm=mod.int_mm,
        origin="builtin",
        description=_DESCRIPTIONS[name],
        contiguous_only=getattr(mod, "CONTIGUOUS_ONLY", False),
        overflow=mod.OVERFLOW,
    )
    _BUILT[name] = spec
    return spec


def builtin_source_digest(name: object) -> Optional[str]:
    """The source digest of built-in ``name`` (SHA-256 hex of its module,
    ``KernelSpec.source_digest``), or None when ``name`` is not a built-in
    or its module does not import here. Imports the module on first use
    (``triton``: about a second).

    Used by the runner to accept a run-time digest recorded with
    ``digest_of=<built-in>`` only when it is that built-in's own.
    """
    if not isinstance(name, str) or name not in BUILTINS:
        return None
    try:
        return _builtin(name).source_digest
    except KernelLoadError:
        return None


def builtin_available(name: str) -> tuple[bool, str]:
    """(ok, reason) for a built-in on this machine (its module imports and
    its ``available()`` says yes)."""
    try:
        _builtin(name)
    except KernelLoadError as e:
        return False, str(e)
    mod = importlib.import_module(_MODULES[name])
    check: Callable = getattr(mod, "available", lambda: (True, ""))
    return check()


def get_kernel(name: str, option: str = "--kernel") -> KernelSpec:
    """Resolve a kernel name.

    Args:
        name: a name a resolver of :func:`register_resolver` knows (e.g. an
            injected kernel ``triton+F4@all#s0`` once ``faults`` is imported),
            a built-in (``cpu``, ``int_mm``, ``triton``), a name given to
            :func:`register`, ``pkg.module:function[?query]`` (see
            ``conformance.kernels.loader``), or an entry-point name in group
            ``int8conf.kernels``.
        option: the option the name came from, named in load errors
            (e.g. ``--against``).
    Returns:
        The KernelSpec.
    Raises:
        KernelLoadError: one line: unknown name, module that does not import,
            missing attribute, missing contract declaration.
    """
    if not isinstance(name, str) or not name.strip():
        raise KernelLoadError(f"kernel name must be a non-empty string, got {name!r}")
    name = name.strip()
    for resolve in _RESOLVERS:
        spec = resolve(name)
        if spec is not None:
            return spec
    if name in BUILTINS:
        return _builtin(name)
    if name in _REGISTERED:
        return _REGISTERED[name]
    adapted = adapters.lookup(name)
    if adapted is not None:
        return adapted
    if ":" in name.split("?", 1)[0]:
        return loader.load_module_function(name, option)
    spec = loader.load_entry_point(name)
    if spec is not None:
        return spec
    raise KernelLoadError(
        f"unknown kernel {name!r}: not a built-in {list(BUILTINS)}, not "
        f"registered, not 'pkg.module:function', not an "
        f"'{loader.ENTRY_POINT_GROUP}' entry point"
    )


def list_kernels() -> list[str]:
    """Built-in names, then registered names, then entry-point names (sorted, unique)."""
    out = list(BUILTINS)
    for n in sorted(_REGISTERED) + loader.entry_point_names():
        if n not in out:
            out.append(n)
    return out


def resolve_kernels(names: list[str]) -> list[KernelSpec]:
    """Specs for several names; ``"all"`` expands to every built-in available
    on this machine (``cpu``, ``int_mm`` if torch has ``_int_mm``, ``triton``
    if triton imports; the Triton kernel runs under the interpreter without a
    GPU). Duplicates are dropped, order kept.

    Raises:
        KernelLoadError: for the first name that does not resolve.
    """
    out: list[KernelSpec] = []
    seen: set[str] = set()
    for name in names:
        if name == "all":
            specs = [_builtin(b) for b in BUILTINS if builtin_available(b)[0]]
        else:
            specs = [get_kernel(name)]
        for s in specs:
            if s.name not in seen:
                seen.add(s.name)
                out.append(s)
    return out
