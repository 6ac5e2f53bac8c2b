"""Adapters for the field's real int8 and FP8 kernels, loaded only when their library is installed. Each adapter
module has ``make_spec(name) -> KernelSpec`` declaring, as a step list (``reference.contract``), the epilogue
the library's own code implements (cited in its docstring). :data:`ADAPTERS` is the catalogue."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from reference.errors import KernelLoadError, first_line

if TYPE_CHECKING:
    from conformance.kernels.spec import KernelSpec


@dataclass(frozen=True)
class AdapterInfo:
    """One adapted kernel: ``--kernel`` name, adapter ``module``, importable names it ``requires``,
    ``install`` hint, ``devices``, one-line ``description``."""

    name: str
    module: str
    requires: tuple
    install: str
    devices: tuple
    description: str


_TA = "conformance.kernels.adapters.torchao"
_BNB = "conformance.kernels.adapters.bnb"
_VL = "conformance.kernels.adapters.vllm"
_TAF = "conformance.kernels.adapters.torchao_fp8"
_GL = "conformance.kernels.adapters.gemlite"
_GL_PIP = "pip install gemlite==0.6.0 (CUDA, triton>=3.6)"
_FG, _FG_PIP = "conformance.kernels.adapters.flaggems", "pip install flag-gems==5.0.2 (CUDA sm_90)"
_FGB = "conformance.kernels.adapters.flaggems_block"
_FB, _FB_PIP = "conformance.kernels.adapters.fbgemm", "pip install fbgemm-gpu-genai (CUDA, matching torch)"
_CU = "conformance.kernels.adapters.cutlass"
_TA_PIP, _VL_PIP, _ANY = "pip install 'int8conf[torchao]'", "pip install vllm (CUDA)", ("cuda", "cpu")
_DESCRIPTION = {
    "torchao": "torchao int_scaled_matmul (per-token scaled int8 GEMM) + torchao's per-channel rescale and bias (quantization/utils.py)",
    "torchao-w8a8": "torchao Int8DynamicActivationInt8Weight linear (Int8Tensor, float32 activation scales): bf16 rounding between the two scale multiplies",
    "torchao-w8a8-bf16": "the same Int8Tensor linear with bf16 activation scales: the int32 accumulator is cast to bf16 before any scale",
    "torchao-triton": "torchao int_scaled_matmul through its Triton kernel (one pinned config of its search list) (TORCHAO_AUTOTUNER_ENABLE path; CUDA only)",
    "torchao-fp8": "torchao Float8Tensor linear (PerRow, its default use_fast_accum) through torch._scaled_mm (CUDA only)",
    "bnb": "bitsandbytes int8_linear_matmul + int8_mm_dequant (LLM.int8 int8 path: absmax statistics, constant 1/127^2, float16 output)",
    "vllm-cutlass": "vLLM _custom_ops.cutlass_scaled_mm through the vLLM-convention adapter",
    "vllm-triton": "vLLM triton_scaled_mm through the vLLM-convention adapter",
    "sgl-int8": "sgl-kernel int8_scaled_mm through the vLLM-convention adapter",
    "gemlite-int8": "gemlite A8W8_int8_dynamic layer on the given int8 activation: GEMV / GEMM split-K (SPLIT_K=1 pinned) / GEMM by M, acc*(s_a*s_w), cast, + bias (CUDA only)",
    "gemlite-fp8": "gemlite A8W8_fp8_dynamic layer on the given e4m3 activation: the same paths and epilogue, tl.dot's sm_90 default accumulation (CUDA only)",
    "flaggems-int8": "FlagGems cutlass_scaled_mm, int8 (Triton per-tensor / per-token kernel, sm_90; vLLM's op API)",
    "flaggems-fp8": "FlagGems cutlass_scaled_mm, e4m3 (tl.dot without max_num_imprecise_acc: unpromoted wgmma sums)",
    "fbgemm-int8": "fbgemm i8i8bf16 (CUTLASS Sm80 int8 GEMM, one float scale = s_a * s_w, bf16 out, no bias)",
    "fbgemm-fp8-rowwise": "fbgemm f8f8bf16_rowwise (CUTLASS sm90 EVT: acc * x_scale, fma(w_scale, bias fp32), bf16; fast accum)",
    "fbgemm-triton-fp8": "fbgemm Triton matmul_fp8_row (persistent, fast accum, pinned config; fma(acc, s_a*s_w, bias))",
    "flaggems-block-fp8": "FlagGems w8a8_block_fp8_matmul (Triton; per K-block dot * s_a then fma s_w; cast; no bias)",
    "flaggems-cutlass-block-fp8": "FlagGems cutlass_scaled_mm with 128x128 block scales (Triton block-wise kernel, sm_90)",
    "cutlass-int8": "CUTLASS Python interface (nvidia-cutlass, cutlass_cppgen) sm90 int8 GEMM with a traced epilogue visitor (nvcc JIT; CUDA sm90 only)",
}
ADAPTERS: dict[str, AdapterInfo] = {
    name: AdapterInfo(name, module, requires, install, devices, _DESCRIPTION[name])
    for name, module, requires, install, devices in (
        ("torchao", _TA, ("torchao",), _TA_PIP, _ANY),
        ("torchao-w8a8", _TA, ("torchao",), _TA_PIP, _ANY),
        ("torchao-w8a8-bf16", _TA, ("torchao",), _TA_PIP, _ANY),
        ("torchao-triton", _TA, ("torchao", "triton"), _TA_PIP, ("cuda",)),
        ("torchao-fp8", _TAF, ("torchao",), _TA_PIP, ("cuda",)),
        ("bnb", _BNB, ("bitsandbytes",), "pip install 'int8conf[bnb]'", _ANY),
        ("vllm-cutlass", _VL, ("vllm",), _VL_PIP, ("cuda",)),
        ("vllm-triton", _VL, ("vllm",), _VL_PIP, ("cuda",)),
        ("sgl-int8", _VL, ("sgl_kernel",), "pip install sgl-kernel (CUDA)", ("cuda",)),
        ("gemlite-int8", _GL, ("gemlite",), _GL_PIP, ("cuda",)),
        ("gemlite-fp8", _GL, ("gemlite",), _GL_PIP, ("cuda",)),
        ("flaggems-int8", _FG, ("flag_gems",), _FG_PIP, ("cuda",)),
        ("flaggems-fp8", _FG, ("flag_gems",), _FG_PIP, ("cuda",)),
        ("flaggems-block-fp8", _FGB, ("flag_gems",), _FG_PIP, ("cuda",)),
        ("flaggems-cutlass-block-fp8", _FGB, ("flag_gems",), _FG_PIP, ("cuda",)),
        ("fbgemm-int8", _FB, ("fbgemm_gpu",), _FB_PIP, ("cuda",)),
        ("fbgemm-fp8-rowwise", _FB, ("fbgemm_gpu",), _FB_PIP, ("cuda",)),
        ("fbgemm-triton-fp8", _FB, ("fbgemm_gpu", "triton"), _FB_PIP, ("cuda",)),
        ("cutlass-int8", _CU, ("cutlass_cppgen", "cuda"), "pip install nvidia-cutlass (+ nvcc)", ("cuda",)),
    )
}


def availability(name: str) -> tuple[bool, str]:
    """``(available, reason)`` for adapter ``name`` here; KernelLoadError for an unknown name."""
    info = _info(name)
    for mod in info.requires:
        if importlib.util.find_spec(mod) is None:
            return False, f"{mod} is not installed ({info.install})"
    try:
        make_spec(name)
    except KernelLoadError as e:
        return False, str(e)
    return True, ""


def _info(name: str) -> AdapterInfo:
    if name not in ADAPTERS:
        raise KernelLoadError(f"unknown adapter {name!r}: one of {sorted(ADAPTERS)}")
    return ADAPTERS[name]


_CACHE: dict[str, KernelSpec] = {}


def make_spec(name: str) -> KernelSpec:
    """The KernelSpec of adapter ``name`` (cached); KernelLoadError (one line) when unknown or broken."""
    if name in _CACHE:
        return _CACHE[name]
    info = _info(name)
    try:
        mod = importlib.import_module(info.module)
        spec = mod.make_spec(name)
    except KernelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 -- a broken install must be one line
        msg = first_line(e, None)
        raise KernelLoadError(f"adapter {name!r}: {type(e).__name__}: {msg} ({info.install})") from None
    _CACHE[name] = spec
    return spec


def available_adapters() -> list[str]:
    return [n for n in ADAPTERS if availability(n)[0]]


def lookup(name: str) -> Optional[KernelSpec]:
    """KernelSpec for an adapter name, None when not one; KernelLoadError when its library is unavailable."""
    if name not in ADAPTERS:
        return None
    ok, why = availability(name)
    if not ok:
        raise KernelLoadError(f"kernel {name!r} is unavailable here: {why}")
    return make_spec(name)
