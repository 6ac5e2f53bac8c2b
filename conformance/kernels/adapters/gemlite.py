"""gemlite adapters ``gemlite-int8`` / ``gemlite-fp8`` (read from gemlite 0.6.0; paths below under ``gemlite/``).

Layer: ``helper.py:619-686`` ``A8W8_{int8,fp8}_dynamic(dtype=out_dtype).from_weights(b, scales=s_w [N,1], bias)``,
its pre-quantized branch (658-670: no weight re-quantization, fp32 scales, bias cast to out_dtype), ``pack``
(``core.py:606`` W_q = b.t(); 659 scales [1,N]), ``channel_scale_mode`` 3 (685). The call replays
``core.py:194-274`` ``forward_functional`` minus its activation quantization (231-232 would re-quantize x per
token): ``data_contiguous = bool(meta_args[1])`` and ``type_id`` verbatim (202-210), x made contiguous (212-213),
``scales_x`` float32 [M,1] as ``quant_utils.py:2680, 520`` makes it, ``core.py:171-179`` picks GEMV_SPLITK (M<=2),
GEMM_SPLITK (M<64) or GEMM, 264-266 call that kernel's ``forward``, 271-272 ``out += bias`` in out_dtype. Epilogue,
one per kernel (``triton_kernels/gemm_kernels.py:479-488``, ``gemm_splitK_kernels.py:498-507``,
``gemv_splitK_kernels.py:454-457`` + implicit cast at 466-471): ``acc.to(fp32) * (s_a * s_w)``, cast to out_dtype,
bias after: ``fused/after_round``. Config: the library's autotuner would time its list; the adapter pins
``get_default_config_nvidia()[0]`` of the kernel's module (SPLIT_K=1) through ``GEMLITE_TRITON_CONFIG_CACHE``
(the cache hit of each ``kernel_config_pruner``): split-K > 1 scales and rounds each K-slice to out_dtype and sums
slices by atomic adds in unordered sequence (``gemm_splitK_kernels.py:503-518``), which no step list describes
(``configs/h100.json`` ships SPLIT_K 8 / 16 for many A8W8 M<64 shapes: this adapter does not certify those).
FP8 accumulator: ``tl.dot`` without ``max_num_imprecise_acc`` (gemm_kernels.py:452): Triton's sm_90 default 2**30
(triton 3.9 ``backends/nvidia/compiler.py:255``, ``language/semantic.py:1636-1640``), never promoted: ``fp32 bits=14
truncate`` (torch-fp8-fast's measured model); the GEMV path sums exact fp32 products (gemv_splitK_kernels.py:416)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

from conformance.kernels import trace
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from conformance.kernels.torch_epilogue import scale_vectors
from reference.contract import NAMED
from reference.errors import OperandError
from reference.fp8 import parse_accumulator

#: the declared epilogue of every path: acc -> fp32, * (s_a * s_w) in fp32, cast out, + bias in out_dtype
STEPS = NAMED["fused/after_round"]
#: e4m3 accumulator on CUDA: Triton's sm_90 default max_num_imprecise_acc (2**30) never promotes the wgmma sum
FP8_ACCUMULATOR = "fp32 bits=14 truncate"
#: GemLiteLinearTriton.MIN_SIZE (core.py:307, 333-341: in_features % 32 else NotImplementedError)
CONSTRAINTS = ShapeConstraints(k_multiple=32, note="gemlite: in_features (K) a multiple of 32 (core.py:333)")
#: gemlite matmul type -> (trace path, kernel module under gemlite.triton_kernels)
PATHS = {
    "GEMV_SPLITK": ("gemlite/gemv_splitK", "gemv_splitK_kernels"),
    "GEMM_SPLITK": ("gemlite/gemm_splitK", "gemm_splitK_kernels"),
    "GEMM": ("gemlite/gemm", "gemm_kernels"),
}
_FILES = ("core.py", "helper.py", *(f"triton_kernels/{m}.py" for _p, m in PATHS.values()))


def config_text(cfg: Any) -> str:
    """``BLOCK_SIZE_M=.. ... num_warps=.. num_stages=..`` of a triton.Config (or a mapping), keys sorted."""
    kw = dict(cfg) if isinstance(cfg, dict) else {**cfg.kwargs, "num_warps": cfg.num_warps}
    kw.setdefault("num_stages", getattr(cfg, "num_stages", None))
    return " ".join(f"{k}={kw[k]}" for k in sorted(kw) if not k.startswith("EVEN_"))


class Gemlite:
    """The pieces of gemlite the adapter calls (a stand-in with the same methods replaces it in tests)."""

    def __init__(self) -> None:
        import gemlite.core as core
        import gemlite.helper as helper

        self.core, self.helper = core, helper

    def make_layer(self, b, scale_b, bias, out_dtype, fp8: bool):
        """helper.py:619-686 pre-quantized ``from_weights``: b [N,K], scale_b float32 [N,1], bias out_dtype."""
        dev = str(b.device)
        if fp8:
            q = self.helper.A8W8_fp8_dynamic(device=dev, dtype=out_dtype, fp8=torch.float8_e4m3fn)
        else:
            q = self.helper.A8W8_int8_dynamic(device=dev, dtype=out_dtype)
        return q.from_weights(weight=b, scales=scale_b, bias=bias)

    def matmul_type(self, m: int, w_nbits: int) -> str:
        return self.core.get_matmul_type(m, w_nbits, False)

    def _kmod(self, mt: str):
        return sys.modules[self.core.GEMLITE_TRITON_MAPPING[mt].__module__]

    def forward(self, mt: str):
        return self.core.GEMLITE_TRITON_MAPPING[mt].forward

    def m_closest(self, mt: str, m: int) -> int:
        return int(self._kmod(mt).get_closest_m(m))

    @contextlib.contextmanager
    def pinned(self, mt: str, m: int, n: int, k: int, type_id: int) -> Iterator[str]:
        """The kernel module's first NVIDIA default config as the config-cache entry of this call's signature
        (``kernel_config_pruner``'s cache hit: ``str((get_closest_m(m), n, k, group_size=k, 1, type_id))``)."""
        cfg = self._kmod(mt).get_default_config_nvidia()[0]
        if cfg.kwargs.get("SPLIT_K", 1) != 1:
            raise OperandError(f"gemlite {mt}: its default config has SPLIT_K={cfg.kwargs['SPLIT_K']}, not 1")
        entry = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        cache = self.core.GEMLITE_TRITON_CONFIG_CACHE.setdefault(mt, {})
        sig = str((self.m_closest(mt, m), n, k, k, 1, type_id))
        old = cache.get(sig)
        cache[sig] = entry
        try:
            yield config_text(entry)
        finally:
            if old is None:
                cache.pop(sig, None)
            else:
                cache[sig] = old

    def launched(self, mt: str) -> Optional[Any]:
        """The config the INT kernel's autotuner last launched (``Autotuner.best_config``), None if unknown."""
        return getattr(self.core.GEMLITE_TRITON_MAPPING[mt].kernel[0], "best_config", None)


#: the layers built for the last calls: (operand identities and versions) -> layer; a serving stack builds the
#: layer once per weight, so a repeated call (a CUDA graph's warm-up and capture) does no host-side building
_LAYERS: "OrderedDict[tuple, Any]" = OrderedDict()
_LAYERS_KEPT = 4


def _layer(lib: Any, b, scale_b, bias, given: tuple):
    """``lib.make_layer`` for these weight operands (``scale_b`` the float32 [N, 1] column), reused while the
    caller's tensors ``given`` (its ``b``, ``scale_b``, ``bias``: a derived view is a new object on every call) are
    the same objects holding the same values (storage, data pointer and in-place version in the key: an in-place
    update of the weight builds a new layer)."""

    def ident(t) -> tuple:
        return () if t is None else (id(t), t.data_ptr(), t._version, tuple(t.shape), str(t.dtype))

    def build(out_dtype, fp8: bool):
        key = (*(ident(t) for t in given), str(out_dtype), fp8, id(lib))
        if key not in _LAYERS:  # the entry holds the tensors: their ids cannot be reused while it is kept
            _LAYERS[key] = (lib.make_layer(b, scale_b, bias, out_dtype, fp8), given)
            while len(_LAYERS) > _LAYERS_KEPT:
                _LAYERS.popitem(last=False)
        _LAYERS.move_to_end(key)
        return _LAYERS[key][0]

    return build


def _scaled_mm(lib: Any, fp8: bool, digest: str):
    @torch.compiler.disable
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        """W8A8 GEMM through gemlite's A8W8 dynamic layer with the given activation (module docstring). Eager also
        inside a ``torch.compile``d caller (a graph break): the layer cache and the config pinning are this
        adapter's Python, which dynamo cannot trace; a serving stack compiles gemlite's registered custom op
        ``gemlite::forward_functional`` instead, which re-quantizes the activation (so C14 here checks the call,
        not that op's fake)."""
        dev = a.device
        (m, k), n = a.shape, b.shape[0]
        sa, sb = scale_vectors(scale_a.to(dev), scale_b.to(dev), m, n)
        trace.record_operands(a, b, scale_a, scale_b, bias)
        bias_dev = None if bias is None else bias.to(dev)
        layer = _layer(lib, b.to(dev), sb.reshape(n, 1).contiguous(), bias_dev, (b, scale_b, bias))
        layer = layer(out_dtype, fp8)
        tensor_args, meta_args = layer.get_tensor_args(), layer.get_meta_args()
        data_contiguous, w_nbits = bool(meta_args[1]), meta_args[1]  # core.py:202-203, verbatim
        type_id = meta_args[5] * 100 + w_nbits  # core.py:206-210 (INT8 / FP8 inputs: no bf16 remap)
        x = a.contiguous()  # core.py:212-213
        scales_x = sa.reshape(m, 1).contiguous()  # float32 [M,1], as scale_activations_per_token returns
        mt = lib.matmul_type(m, w_nbits)  # core.py:261
        with lib.pinned(mt, m, n, k, type_id) as pinned:
            out = lib.forward(mt)(
                x, *tensor_args[:3], scales_x, *meta_args[1:-1], data_contiguous, type_id, meta_scale=0.0
            )
        cfg = lib.launched(mt)
        if cfg is not None and cfg.kwargs.get("SPLIT_K", 1) != 1:
            raise OperandError(f"gemlite {mt} launched SPLIT_K={cfg.kwargs['SPLIT_K']} (an earlier tuning)")
        if layer.bias is not None:  # core.py:271-272
            out += layer.bias
        path, _mod = PATHS[mt]
        trace.record_path(
            path,
            source_digest=digest,
            matmul_type=mt,
            m_closest=lib.m_closest(mt, m),
            config=pinned,
            config_rule="pinned: get_default_config_nvidia()[0] via GEMLITE_TRITON_CONFIG_CACHE",
            launched=None if cfg is None else config_text(cfg),
            split_k=1,
            type_id=type_id,
        )
        return out

    return scaled_mm


def source_digest(root: Path) -> str:
    """SHA-256 over this adapter and gemlite's dispatch, helper and kernel files under ``root``."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for rel in _FILES:
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def build_spec(name: str, lib: Any, version: str = "standin", digest: str = "") -> KernelSpec:
    """KernelSpec of ``gemlite-int8`` / ``gemlite-fp8`` calling ``lib`` (:class:`Gemlite` or a stand-in)."""
    fp8 = name == "gemlite-fp8"
    return KernelSpec(
        name=name,
        scaled_mm=_scaled_mm(lib, fp8, digest),
        contract=STEPS.nearest_contract(),
        devices=("cuda",),
        constraints=CONSTRAINTS,
        version=version,
        source_digest=digest,
        origin=f"adapter:{name}",
        description=f"gemlite A8W8_{'fp8' if fp8 else 'int8'}_dynamic layer, given activation, "
        "GEMV_SPLITK / GEMM_SPLITK / GEMM by M, pinned SPLIT_K=1 config, bias after the cast",
        steps=STEPS,
        warm_up=True,
        operands="e4m3" if fp8 else "int8",
        accumulator={"cuda": parse_accumulator(FP8_ACCUMULATOR)} if fp8 else None,
    )


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of ``gemlite-int8`` / ``gemlite-fp8``; ImportError without gemlite (or without CUDA: gemlite
    reads the device at import)."""
    gl = importlib.import_module("gemlite")
    version = getattr(gl, "__version__", None) or importlib.metadata.version("gemlite")
    digest = source_digest(Path(str(gl.__file__)).parent)
    return build_spec(name, Gemlite(), f"gemlite {version}", digest)
