"""CUTLASS int8 adapter ``cutlass-int8`` (read from nvidia-cutlass 4.2.0, package ``cutlass_cppgen``, the CUTLASS
Python interface): ``op.Gemm`` s8 x s8 -> s32, A row-major [M,K], B column-major [K,N] (our ``b`` [N,K] row-major),
an sm90 TMA warp-specialized kernel (``kernel_cc=90``; the registry holds int8 TN sm90 kernels) with an epilogue
visitor tree traced from :func:`evt` (``epilogue/epilogue.py:117`` ``trace``; its source is parsed, never run):
``Sm90EVT`` of ``Sm90Compute`` nodes (``backend/evt/backend/sm90_nodes.py``) whose ``visit``
(``include/cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp:171-202``) converts every input to
float32 (int32 accumulator: ``NumericConverter`` generic ``static_cast``, ``numeric_conversion.h:74-90``, PTX
``cvt.rn.f32.s32``), applies ``cutlass::multiplies`` / ``plus`` (``functional.h:121-145``, ``array.h:568,658``)
and converts the root to out_dtype (bf16: ``cvt.rn.bf16x2.f32``, ``numeric_conversion.h:1076-1095``; fp16:
``__float22half2_rn``, ``:923-945``; fp32: identity, ``:890-916``). nvcc runs with ``backend/compiler.py:155-159``'s
flags (no ``-fmad=false``), so ``(acc*s_a)*s_w + bias`` is contracted: the PTX of this kernel built with nvcc 13.0
for sm_90a holds ``mul.f32`` then ``fma.rn.f32(t, s_w, bias)``. Declared: ``cast fp32; mul s_a; fma s_w bias;
cast out``; a call without a bias passes a +0.0 bias (the step's own meaning). Constraints: K, N multiples of 16
(alignment 16 picked by ``library_defaults.py:161-193`` ``find_alignment``; TMA needs 16-byte rows,
``epilogue/collective/builders/sm90_builder.inl:297``); bf16 / fp16 / fp32 out; CUDA device of capability 9.0 only
(KernelLoadError elsewhere). One compiled kernel per out dtype, cached in process and in ``$INT8CONF_CUTLASS_CACHE``
(default ``~/.cache/int8conf/cutlass-<version>``: the library's sqlite cache and nvcc temporaries)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

import torch

from conformance.kernels import trace
from conformance.kernels.digest import callable_digest, module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from conformance.kernels.torch_epilogue import scale_vectors
from reference.contract import parse_steps
from reference.errors import KernelLoadError, OperandError

DIST = "nvidia-cutlass"
STEPS = parse_steps(["cast fp32", "mul s_a", "fma s_w bias", "cast out"], "cutlass-evt-sm90")
CONSTRAINTS = ShapeConstraints(
    k_multiple=16,
    n_multiple=16,
    out_dtypes=("bfloat16", "float16", "float32"),
    note="CUTLASS sm90 int8 TN kernel, alignment 16: K and N multiples of 16",
)
KERNEL_CC = 90
ALIGNMENT = 16
CACHE_ENV = "INT8CONF_CUTLASS_CACHE"
#: out dtype -> cutlass_library.DataType member name
_ELEMENT = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_LOCK = threading.RLock()
_PLANS: dict = {}
_READY: set = set()


# The epilogue visitor (parsed by cutlass_cppgen from this source, never executed): no docstring, no host reads.
def evt(accum, scale_a, scale_b, bias):
    D = (accum * scale_a) * scale_b + bias
    return D


def install_cuda_aliases() -> None:
    """cutlass_cppgen 4.2 imports ``cuda.cuda`` / ``cuda.cudart`` / ``cuda.nvrtc`` and reads ``cuda.__version__``
    (the cuda-python 12 layout); cuda-bindings 13 ships only ``cuda.bindings.{driver,runtime,nvrtc}``: alias them.
    ImportError when cuda-bindings is missing."""
    cuda: Any = importlib.import_module("cuda")
    bindings = importlib.import_module("cuda.bindings")
    for legacy, mod in (("cuda", "driver"), ("cudart", "runtime"), ("nvrtc", "nvrtc")):
        if importlib.util.find_spec(f"cuda.{legacy}") is None and f"cuda.{legacy}" not in sys.modules:
            sys.modules[f"cuda.{legacy}"] = importlib.import_module(f"cuda.bindings.{mod}")
            setattr(cuda, legacy, sys.modules[f"cuda.{legacy}"])
    if not hasattr(cuda, "__version__"):
        cuda.__version__ = bindings.__version__


def cache_dir() -> Path:
    """Where the library's sqlite kernel cache and nvcc temporaries go (:data:`CACHE_ENV`, created)."""
    d = os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "int8conf", f"cutlass-{importlib.metadata.version(DIST)}"
    )
    Path(d).mkdir(parents=True, exist_ok=True)
    return Path(d)


@contextlib.contextmanager
def _in_cache_dir() -> Iterator[None]:
    """cutlass_cppgen writes ``compiled_cache.db`` and nvcc files into the working directory and sets
    ``tempfile.tempdir = "./"`` (``backend/compiler.py:127,141,311,334``): confine both to :func:`cache_dir`."""
    with _LOCK:
        cwd, tmp = os.getcwd(), tempfile.tempdir
        os.chdir(cache_dir())
        try:
            yield
        finally:
            os.chdir(cwd)
            tempfile.tempdir = tmp


def _cutlass() -> Any:
    install_cuda_aliases()
    with _in_cache_dir():
        return importlib.import_module("cutlass_cppgen")


def _pick_tile(plan: Any) -> Any:
    """The tile of the plan's alignment-16 kernels, fixed (not hash-order dependent): data-parallel (no stream-K)
    cooperative schedule, largest tile, then the smallest procedural name."""
    lib = importlib.import_module("cutlass_library")
    td_from_profiler_op = importlib.import_module("cutlass_cppgen.utils.datatypes").td_from_profiler_op
    ops = plan.possible_operations.operations(ALIGNMENT, ALIGNMENT, ALIGNMENT, None)
    tds = [(op, td_from_profiler_op(op)) for op in ops]
    tds = [
        (op, td)
        for op, td in tds
        if td.tile_scheduler != lib.TileSchedulerType.StreamK
        and td.kernel_schedule == lib.KernelScheduleType.TmaWarpSpecializedCooperative
    ] or tds
    vol = lambda td: td.threadblock_shape[0] * td.threadblock_shape[1] * td.threadblock_shape[2]  # noqa: E731
    return min(tds, key=lambda p: (-vol(p[1]), p[0].procedural_name()))[1]


def _plan(out_dtype: torch.dtype) -> Any:
    """The ``op.Gemm`` plan with :func:`evt` for ``out_dtype`` (built once per process)."""
    key = (str(out_dtype), ALIGNMENT)
    with _LOCK:
        if key in _PLANS:
            return _PLANS[key]
        cl = _cutlass()
        DataType, LayoutType = cl.DataType, cl.LayoutType
        el, row = getattr(DataType, _ELEMENT[out_dtype]), LayoutType.RowMajor
        m, n = 128, 256  # example shapes fix only which operand broadcasts along M or N
        examples = {
            "accum": cl.Tensor(element=DataType.s32, shape=(m, n), layout_tag=row),
            "scale_a": cl.Tensor(element=DataType.f32, shape=(m, 1), layout_tag=row),
            "scale_b": cl.Tensor(element=DataType.f32, shape=(1, n), layout_tag=row),
            "bias": cl.Tensor(element=el, shape=(1, n), layout_tag=row),
            "D": cl.Tensor(element=el, shape=(m, n), layout_tag=row),
        }
        visitor = cl.epilogue.trace(evt, examples, cc=KERNEL_CC)
        plan = cl.op.Gemm(
            element_A=DataType.s8,
            element_B=DataType.s8,
            element_C=el,
            element_D=el,
            element_accumulator=DataType.s32,
            layout_A=row,
            layout_B=LayoutType.ColumnMajor,
            layout_C=row,
            cc=KERNEL_CC,
            kernel_cc=KERNEL_CC,
        )
        plan.epilogue_visitor = visitor
        plan.tile_description = _pick_tile(plan)
        _PLANS[key] = plan
        return plan


def _check(a, b, scale_a, scale_b, out_dtype, bias) -> torch.device:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dtype != torch.int8 or b.dtype != a.dtype:
        raise OperandError("cutlass-int8: a and b must be int8 tensors")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise OperandError(f"cutlass-int8: a [M,K] and b [N,K] expected, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.device.type != "cuda":
        raise OperandError(f"cutlass-int8 runs on CUDA only, got a on {a.device}")
    if out_dtype not in _ELEMENT:
        raise OperandError(f"cutlass-int8: out_dtype {out_dtype} is not bfloat16, float16 or float32")
    if bias is not None and (bias.dtype != out_dtype or tuple(bias.shape) != (b.shape[0],)):
        raise OperandError(
            f"cutlass-int8: bias must be [{b.shape[0]}] {out_dtype}, got {bias.dtype} {tuple(bias.shape)}"
        )
    if torch.cuda.get_device_capability(a.device) != (9, 0):
        cap = "".join(map(str, torch.cuda.get_device_capability(a.device)))
        raise KernelLoadError(f"cutlass-int8 builds sm90 kernels only; {a.device} is sm_{cap}")
    return a.device


def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """int8 W8A8 GEMM through the CUTLASS Python interface with the :func:`evt` epilogue (module docstring)."""
    dev = _check(a, b, scale_a, scale_b, out_dtype, bias)
    m, n = a.shape[0], b.shape[0]
    trace.record_operands(a, b, scale_a, scale_b, bias)
    sa, sb = scale_vectors(scale_a.to(dev), scale_b.to(dev), m, n)
    plan = _plan(out_dtype)
    row = bias if bias is not None else torch.zeros(n, dtype=out_dtype, device=dev)  # +0.0: the declared fma addend
    d = torch.empty((m, n), dtype=out_dtype, device=dev)
    args = {"scale_a": sa.contiguous(), "scale_b": sb.contiguous(), "bias": row.reshape(1, n).contiguous(), "D": d}
    driver = importlib.import_module("cuda.cuda")
    stream = driver.CUstream(torch.cuda.current_stream(dev).cuda_stream)
    key = str(out_dtype)
    with torch.cuda.device(dev), contextlib.nullcontext() if key in _READY else _in_cache_dir():
        plan.run(a.contiguous(), b.contiguous().t(), d, d, visitor_args=args, stream=stream)
    _READY.add(key)
    td = plan.tile_description
    trace.record_path(
        f"cutlass/{plan.operation.procedural_name()}",
        source_digest=_digest(),
        kernel_cc=KERNEL_CC,
        alignment=ALIGNMENT,
        tile="x".join(map(str, td.threadblock_shape)),
        cluster="x".join(map(str, td.cluster_shape)),
        bias_passed=bias is not None,
    )
    return d


def _digest() -> str:
    """SHA-256 of the visitor emitter the kernel's epilogue is generated by (``backend/evt/backend/sm90_nodes.py``)."""
    spec = importlib.util.find_spec("cutlass_cppgen")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("cutlass_cppgen is not installed")
    return module_digest(str(Path(list(spec.submodule_search_locations)[0]) / "backend/evt/backend/sm90_nodes.py"))


def build_spec(name: str, fn, version: str, digest: str = "") -> KernelSpec:
    """The KernelSpec of ``cutlass-int8`` around ``fn`` (the real :func:`scaled_mm` or a stand-in; ``digest``
    defaults to ``fn``'s own)."""
    return KernelSpec(
        name=name,
        scaled_mm=fn,
        contract=STEPS.nearest_contract(),
        devices=("cuda",),
        constraints=CONSTRAINTS,
        version=version,
        source_digest=digest or callable_digest(fn),
        origin=f"adapter:{name}",
        description=f"{version} Python interface (cutlass_cppgen): sm90 int8 TN GEMM + traced EVT epilogue",
        steps=STEPS,
        warm_up=lambda a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None: str(out_dtype),
    )


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of ``cutlass-int8``; ImportError without nvidia-cutlass or cuda-bindings (imports neither here)."""
    version = importlib.metadata.version(DIST)
    if importlib.util.find_spec("cuda.bindings") is None:
        raise ImportError("cuda.bindings is not installed (pip install cuda-bindings)")
    return build_spec(name, scaled_mm, f"{DIST} {version}", _digest())
