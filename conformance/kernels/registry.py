"""Kernel registry: built-ins (``cpu``, ``int_mm``: CUTLASS_STYLE; ``triton``: TRITON_STYLE; the FP8 ones, whose
modules declare them in ``KERNELS``; imported lazily), user registrations, name resolvers, adapters,
``pkg.module:function`` names and entry points."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Callable, Optional

from conformance.kernels import adapters, loader
from conformance.kernels.spec import BUILTINS, INT8_BUILTINS, KernelSpec, ShapeConstraints
from reference.errors import KernelLoadError, first_line

_MODULES = {b: f"conformance.kernels.builtin_{b}" for b in INT8_BUILTINS}
_MODULES.update(
    {
        "fp8-cpu": "conformance.kernels.builtin_fp8_cpu",
        "torch-fp8": "conformance.kernels.builtin_torch_fp8",
        "torch-fp8-fast": "conformance.kernels.builtin_torch_fp8",
        "triton-fp8": "conformance.kernels.builtin_triton_fp8",
        "block-cpu": "conformance.kernels.builtin_block_cpu",
        "block-fp8-cpu": "conformance.kernels.builtin_block_cpu",
        "triton-block": "conformance.kernels.builtin_triton_block",
        "triton-block-fp8": "conformance.kernels.builtin_triton_block",
        "azp-cpu": "conformance.kernels.builtin_azp_cpu",
    }
)
_DESCRIPTIONS = {
    "cpu": "exact int32 GEMM on the CPU (chunked float32, exact) + torch float32 epilogue",
    "int_mm": "torch._int_mm (cuBLASLt on CUDA, oneDNN/ATen on CPU), zero-padded to its shape constraints, + torch float32 epilogue",
    "triton": "Triton int8 GEMM (tl.dot int32 accumulator, masked tails, fused epilogue; native on CUDA, interpreter on CPU)",
}
_REGISTERED: dict[str, KernelSpec] = {}
_BUILT: dict[str, KernelSpec] = {}
#: name resolvers tried first by :func:`get_kernel` (:func:`register_resolver`)
_RESOLVERS: list[Callable] = []


def register_resolver(fn: Callable) -> None:
    """Add a resolver ``fn(name) -> KernelSpec | None`` (idempotent), asked in order before the
    built-ins (``faults`` resolves injected names such as ``triton+F4@all#s0``)."""
    if fn not in _RESOLVERS:
        _RESOLVERS.append(fn)


def register(spec: KernelSpec) -> None:
    """Register or replace ``spec`` under its name; KernelLoadError for a non-spec, empty, ``all`` or built-in name."""
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
    if name not in INT8_BUILTINS:
        kw = dict(mod.KERNELS[name])
        if "contract" not in kw:  # a block-scaled kernel: the standard contract nearest its epilogue
            kw["contract"] = loader.block_contract(kw["block"])
        _BUILT[name] = spec = KernelSpec(name, source_digest=mod.SOURCE_DIGEST, origin="builtin", **kw)
        return spec
    notes = {
        "int_mm": "pads internally to torch._int_mm's native constraints (CUDA: M>16, K and N multiples of 8; CPU: none)",
        "triton": "masked tails: any M, K, N >= 1",
    }
    devices = ("cpu",) if name == "cpu" else ("cuda", "cpu")
    cons = ShapeConstraints(note=notes.get(name, "any M, K, N >= 1"))
    args = (
        mod.scaled_mm,
        mod.CONTRACT,
        devices,
        cons,
        "1",
        mod.SOURCE_DIGEST,
        mod.int_mm,
        "builtin",
        _DESCRIPTIONS[name],
    )
    dense = getattr(mod, "CONTIGUOUS_ONLY", False)
    warm = getattr(mod, "variant_key", False) if name == "triton" else False
    _BUILT[name] = spec = KernelSpec(name, *args, contiguous_only=dense, overflow=mod.OVERFLOW, warm_up=warm)
    return spec


def builtin_source_digest(name: object) -> Optional[str]:
    """Source digest of built-in ``name``, or None (not a built-in, or it does not import)."""
    if not isinstance(name, str) or name not in BUILTINS:
        return None
    try:
        return _builtin(name).source_digest
    except KernelLoadError:
        return None


def builtin_available(name: str) -> tuple[bool, str]:
    """(ok, reason): the built-in's module imports and its ``available()`` says yes."""
    try:
        _builtin(name)
    except KernelLoadError as e:
        return False, str(e)
    mod = importlib.import_module(_MODULES[name])
    check: Callable = getattr(mod, "available", lambda: (True, ""))
    return check(name) if name not in INT8_BUILTINS else check()


def get_kernel(name: str, option: str = "--kernel") -> KernelSpec:
    """Resolve a name: resolvers, built-ins, registered names, adapters, ``pkg.module:function[?query]``,
    then entry points. ``option`` is named in load errors. Raises KernelLoadError (one line)."""
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
    if loader.is_file_path(name):
        raise KernelLoadError(loader.file_path_hint(option, name))
    base = name.split("?", 1)[0]
    if base != name and (base in BUILTINS or base in _REGISTERED or adapters.lookup(base) is not None):
        raise KernelLoadError(
            f"kernel {name!r}: {base!r} declares itself; a ?query declares a 'pkg.module:function' kernel only"
        )
    if _is_module(base):
        raise KernelLoadError(f"kernel {name!r} is a module: name its kernel function, '{base}:FUNCTION'")
    raise KernelLoadError(
        f"unknown kernel {name!r}: not a built-in {list(BUILTINS)}, not registered, not 'pkg.module:function', not an '{loader.ENTRY_POINT_GROUP}' entry point"
    )


def _is_module(name: str) -> bool:
    """Whether ``name`` is an importable module's name (found on the path, not imported)."""
    try:
        return name.isidentifier() and importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def list_kernels() -> list[str]:
    """Built-in, then registered, then entry-point names (unique)."""
    out = list(BUILTINS)
    for n in sorted(_REGISTERED) + loader.entry_point_names():
        if n not in out:
            out.append(n)
    return out


def resolve_kernels(names: list[str]) -> list[KernelSpec]:
    """Specs for several names, ``"all"`` = every int8 built-in available here; duplicates dropped, order
    kept. Raises KernelLoadError for the first name that does not resolve."""
    out: list[KernelSpec] = []
    seen: set[str] = set()
    for name in names:
        specs = [_builtin(b) for b in INT8_BUILTINS if builtin_available(b)[0]] if name == "all" else [get_kernel(name)]
        for s in specs:
            if s.name not in seen:
                seen.add(s.name)
                out.append(s)
    return out
