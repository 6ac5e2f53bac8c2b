"""Built-in kernel ``triton``: a Triton int8 GEMM with a fused epilogue (kernels: ``triton_gemm``, ``gluon_gemm``).

Contract ``reference.contract.TRITON_STYLE``: ``y = (float32(acc) * s_a) * s_w`` rounded RNE to out_dtype, then
``rnd(float32(y) + float32(bias))``; bf16 is rounded with integer ops, so native and interpreted bits agree.
Modes (``trace.record_path``): ``triton-native`` (CUDA, ``triton.jit``, ``enable_fp_fusion=False``) and
``triton-interpreter`` (CPU tensors through an explicit ``InterpretedFunction``, or any tensors with
``TRITON_INTERPRET=1``). Native configuration: the candidates of M's bucket (:func:`bucket`; Gluon ones on sm_90) are
timed end to end once per (device, M, N, K rounded up to powers of two, layout) and the fastest cached; small shapes,
CUDA-graph captures, ``INT8CONF_TRITON_AUTOTUNE=0`` and conformance runs (``spec.in_conformance_run``: nothing is
timed, K is padded as a tuned call pads it) take :func:`_untuned`, a pure function of shape, layout and device;
a table named by ``INT8CONF_TRITON_PINS`` (:func:`load_pins`, read on import) pins a native call's choice per bin,
tuned or not.
Every configuration gives the same bits (``tests/conformance/kernels/test_triton_configs_cuda.py`` runs each
candidate on suite cases). Interpreter: fixed small tiles (:func:`_interp_config`). Operands are read through their strides, never copied, except
natively an odd K, zero-padded to a multiple of 16 (:func:`_padded_k`; the manifest records ``k_padded_to``)."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import torch
import triton
from torch import Tensor
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from conformance.kernels import gluon_gemm, trace, triton_gemm
from conformance.kernels.spec import SPECIALIZE_ENV, in_conformance_run
from conformance.kernels.triton_probe import probe
from reference.contract import TRITON_STYLE
from reference.errors import OperandError

CONTRACT = TRITON_STYLE
#: int32 overflow (KernelSpec.overflow): the interpreter's numpy int32 wraps; natively a tile's K loop clamps
#: while split-K atomics wrap, so nothing is promised on CUDA
OVERFLOW = {"cpu": "wrap", "cuda": "undefined"}
#: sha256 over this module and the kernel modules (they define what runs).
SOURCE_DIGEST = hashlib.sha256(
    b"".join(Path(p).read_bytes() for p in (__file__, triton_gemm.__file__, gluon_gemm.__file__))
).hexdigest()
_OUT_KIND = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_OUT_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
#: below this many multiply-accumulates a shape is not timed (heuristic config)
AUTOTUNE_MIN_MACS = 1 << 20
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Config:
    """One launch configuration.

    ``kernel``: ``"ptr"`` (``triton_gemm.w8a8_mm``), ``"tma"`` (``w8a8_mm_tma``: CUDA, aligned K-contiguous a, b) or
    ``"gluon"`` (``gluon_gemm``, sm_90; with ``warp_spec`` the ping-pong ``w8a8_mm_gluon_ws``, ``num_warps`` 4 being the
    default partition). ``split_k``: ``ptr`` only; ``persistent``: one program per SM (``tma`` / ``gluon``); ``flatten``:
    ``tma`` persistent; ``warp_spec`` on ``tma``: compiler warp specialisation. ``num_stages`` is ``gluon``'s ``STAGES``.
    """

    kernel: str = "ptr"
    block_m: int = 64
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    persistent: bool = False
    flatten: bool = False
    warp_spec: bool = False

    def label(self) -> str:
        """Short text, e.g. ``ptr 16x64x256 g8 sk4 w4 s4``, ``gluon 128x256x128 g8 w8 s3``."""
        sk = "" if self.kernel == "gluon" else f"sk{self.split_k} "
        flags = "".join(
            t for t, on in ((" persistent", self.persistent), (" flat", self.flatten), (" ws", self.warp_spec)) if on
        )
        return f"{self.kernel} {self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} {sk}w{self.num_warps} s{self.num_stages}{flags}"


def _c(kernel, bm, bn, bk, g, sk, w, s, persistent=False, flatten=False, ws=False) -> Config:
    return Config(kernel, bm, bn, bk, g, sk, w, s, persistent, flatten, ws)


#: the plain autotuned Triton GEMM's space (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages; GROUP_M 8), also the bench's
#: peer kernel; added to the small and large buckets so the tuner never has only worse choices
PLAIN_SPACE = (
    (128, 256, 128, 8, 3),
    (256, 128, 128, 8, 3),
    (128, 128, 128, 8, 4),
    (128, 128, 128, 4, 4),
    (64, 128, 128, 4, 4),
    (128, 64, 128, 4, 4),
    (64, 64, 128, 4, 4),
    (32, 64, 256, 4, 4),
    (16, 64, 256, 4, 4),
)


def _with_plain(cfgs: tuple) -> tuple:
    """``cfgs`` followed by the pointer-kernel twins of ``PLAIN_SPACE`` not in it."""
    extra = tuple(_c("ptr", bm, bn, bk, 8, 1, w, s) for bm, bn, bk, w, s in PLAIN_SPACE)
    return cfgs + tuple(c for c in extra if c not in cfgs)


#: candidate configurations per bucket, heuristic default first; every one is exact
BUCKET_CONFIGS: dict[str, tuple[Config, ...]] = {
    "decode": (
        _c("ptr", 16, 64, 256, 1, 1, 4, 4),
        _c("ptr", 16, 64, 128, 1, 1, 4, 4),
        _c("ptr", 16, 32, 256, 1, 1, 4, 4),
        _c("ptr", 16, 128, 256, 1, 1, 4, 3),
        _c("ptr", 16, 64, 256, 1, 2, 4, 4),
        _c("ptr", 16, 64, 256, 1, 4, 4, 4),
        _c("ptr", 16, 32, 256, 1, 4, 4, 4),
        _c("ptr", 16, 64, 128, 1, 8, 4, 4),
    ),
    "small": _with_plain(
        (
            _c("ptr", 64, 128, 128, 8, 1, 4, 4),
            _c("ptr", 32, 64, 256, 8, 1, 4, 4),
            _c("ptr", 64, 64, 128, 8, 1, 4, 4),
            _c("ptr", 128, 128, 128, 8, 1, 8, 4),
            _c("ptr", 64, 128, 128, 8, 2, 4, 4),
            _c("ptr", 32, 64, 128, 8, 4, 4, 4),
            _c("tma", 64, 128, 128, 8, 1, 4, 4),
            _c("tma", 128, 128, 128, 8, 1, 8, 4),
        )
    ),
    "large": _with_plain(
        (
            _c("ptr", 128, 256, 128, 8, 1, 8, 3),
            _c("ptr", 128, 128, 128, 8, 1, 8, 4),
            _c("ptr", 128, 128, 128, 8, 1, 4, 4),
            _c("ptr", 256, 128, 128, 8, 1, 8, 3),
            _c("tma", 128, 256, 128, 8, 1, 8, 3),
            _c("tma", 128, 256, 128, 8, 1, 8, 4),
            _c("tma", 128, 128, 128, 8, 1, 8, 4),
            _c("tma", 256, 128, 128, 8, 1, 8, 3),
            _c("tma", 128, 256, 64, 8, 1, 8, 5),
            _c("tma", 128, 256, 128, 8, 1, 8, 3, persistent=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 3, persistent=True, flatten=True),
            _c("tma", 128, 256, 128, 16, 1, 8, 3, persistent=True, flatten=True),
            _c("tma", 128, 128, 128, 8, 1, 8, 4, persistent=True, flatten=True),
            # compiler warp specialisation (Hopper: TMA producer + MMA consumer warps)
            _c("tma", 128, 256, 128, 8, 1, 8, 3, persistent=True, ws=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 4, persistent=True, ws=True),
            _c("tma", 128, 256, 64, 8, 1, 8, 5, persistent=True, ws=True),
            _c("tma", 128, 128, 128, 8, 1, 8, 4, persistent=True, ws=True),
            # (no "tma 128x128x128 g8 sk1 w4 s4 persistent ws": it hangs with Triton 3.6 on sm_90)
            _c("tma", 256, 128, 128, 8, 1, 8, 3, persistent=True, ws=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 3, ws=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 4, ws=True),
            # two programs per SM: a second resident program fills the wgmma drain Triton leaves at
            # every K step of an int32-accumulator dot
            _c("ptr", 128, 128, 128, 8, 1, 8, 3),
            _c("ptr", 128, 128, 128, 8, 1, 4, 3),
            _c("tma", 128, 128, 128, 8, 1, 4, 3),
            _c("ptr", 128, 128, 64, 8, 1, 4, 4),
        )
    ),
}

#: Gluon candidates, appended to their bucket's when :func:`_gluon_enabled` (read when a key is first planned)
GLUON_CONFIGS: dict[str, tuple[Config, ...]] = {
    "small": (_c("gluon", 128, 128, 128, 8, 1, 4, 3), _c("gluon", 64, 128, 128, 8, 1, 4, 4)),
    "large": (
        _c("gluon", 128, 256, 128, 8, 1, 8, 4, persistent=True),
        _c("gluon", 128, 256, 128, 8, 1, 8, 4),
        _c("gluon", 128, 256, 128, 8, 1, 8, 3),
        _c("gluon", 128, 256, 128, 8, 1, 8, 3, persistent=True),
        _c("gluon", 128, 128, 128, 8, 1, 4, 3),
        _c("gluon", 256, 128, 128, 8, 1, 8, 3),
        _c("gluon", 128, 256, 64, 8, 1, 8, 4),
    ),
}

#: warp-specialised ping-pong Gluon candidates (:func:`_gluon_ws_enabled`); ``num_warps`` 4 is the default
#: partition (12 warps launched); ring: STAGES * (block_m + block_n) * block_k bytes (<= 227 KiB)
GLUON_WS_CONFIGS: dict[str, tuple[Config, ...]] = {
    "large": (
        _c("gluon", 128, 128, 128, 8, 1, 4, 6, persistent=True, ws=True),  # 192 KiB
        _c("gluon", 128, 128, 128, 8, 1, 4, 4, persistent=True, ws=True),  # 128 KiB
    )
}

#: labels never tried (``exclude_configs``, ``INT8CONF_TRITON_EXCLUDE`` ``;``-separated): e.g. a variant that
#: crashes this Triton's compiler (a crash is not an exception the tuner could catch)
_EXCLUDED: set = {x.strip() for x in os.environ.get("INT8CONF_TRITON_EXCLUDE", "").split(";") if x.strip()}


def exclude_configs(labels) -> None:
    """Never try the configurations with these :meth:`Config.label` s again in this process."""
    _EXCLUDED.update(labels)


def bucket(m: int) -> str:
    """Shape bucket of M: ``decode`` (<= 16), ``small`` (<= 256), ``large``."""
    return "decode" if m <= 16 else ("small" if m <= 256 else "large")


def _interp_tile(size: int, small: int, limit: int) -> int:
    """An interpreter block: ``small`` up to 4 blocks of it, else a power of two >= size / 4 (<= ``limit``): the
    interpreter's cost is its number of programs, so a long dimension takes about 4 blocks."""
    if size <= 4 * small:
        return small
    return min(limit, 1 << (-(-size // 4) - 1).bit_length())


#: the interpreter's largest block (``triton`` refuses tensors of more elements)
INTERP_MAX_NUMEL = 1 << 20


def _interp_config(m: int, n: int, k: int = 0, split_k: int = 1) -> Config:
    """Interpreter tiles: >= 16 and small for small M / N, K blocks of <= 128 (or K rounded up to a
    power of two), long dimensions in ~4 blocks, every block <= :data:`INTERP_MAX_NUMEL` elements."""
    bk = _interp_tile(k, 128, 4096) if k > 128 else max(16, 1 << (k - 1).bit_length())
    bm = 16 if m <= 16 else (32 if m <= 32 else _interp_tile(m, 64, INTERP_MAX_NUMEL // bk))
    bn = 16 if n <= 16 else (32 if n <= 32 else _interp_tile(n, 64, INTERP_MAX_NUMEL // bk))
    while bm * bn > INTERP_MAX_NUMEL:
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    return Config("ptr", bm, bn, bk, 4, split_k, 4, 1)


_KERNELS: dict = {}


def _kernel_name(cfg: Config) -> str:
    """``cfg.kernel``, or ``"gluon_ws"`` for a warp-specialised ``gluon`` configuration."""
    return "gluon_ws" if cfg.kernel == "gluon" and cfg.warp_spec else cfg.kernel


#: integer arguments Triton does not specialize (on == 1 or % 16): M only bounds masks and the scale / bias strides
#: index one vector per tile, so a variant per value class would only multiply compiles (one per case layout)
UNSPECIALIZED = {
    "ptr": ("M", "stride_sa", "stride_sb", "stride_bias"),
    "tma": ("M", "stride_sa", "stride_sb", "stride_bias", "NUM_PROGS"),
}
#: ... and in a conformance run (``spec.in_conformance_run``): no integer argument. Specializing on a value class
#: only adds alignment and unit-stride hints (wider loads, folded multiplies), never a different sum or rounding,
#: while each class is one more compile: the suite's hundreds of operand layouts would cost a compile each.
#: ``tests/conformance/kernels/test_triton_configs_cuda.py`` runs the specialized variants on the suite's cases.
#: ``INT8CONF_TRITON_SPECIALIZE=full`` keeps :data:`UNSPECIALIZED` in a conformance run too.
UNSPECIALIZED_IN_CONFORMANCE = {
    "ptr": UNSPECIALIZED["ptr"] + ("N", "K", "stride_am", "stride_ak", "stride_bn", "stride_bk", "stride_om"),
    "tma": UNSPECIALIZED["tma"] + ("N", "K", "stride_om"),
}


def _unspecialized(name: str) -> tuple:
    """The integer arguments of kernel ``name`` Triton must not specialize in this process (see above)."""
    full = os.environ.get(SPECIALIZE_ENV, "").strip() == "full"
    return (UNSPECIALIZED if full or not in_conformance_run() else UNSPECIALIZED_IN_CONFORMANCE)[name]


def _kernel(name: str, native: bool):
    """``(kernel object, is_interpreter)`` for ``ptr`` / ``tma`` / ``gluon`` / ``gluon_ws``, built once."""
    key = (name, native, _unspecialized(name) if name in UNSPECIALIZED else ())
    got = _KERNELS.get(key)
    if got is None:
        if name in ("gluon", "gluon_ws"):
            if not (native and gluon_gemm.AVAILABLE):
                raise ValueError(
                    "the gluon kernel needs CUDA and a Triton with Gluon's Hopper API (conformance.kernels.gluon_gemm.AVAILABLE)"
                )
            fn = gluon_gemm.w8a8_mm_gluon_ws if name == "gluon_ws" else gluon_gemm.w8a8_mm_gluon
            got = _KERNELS[key] = (fn, False)
            return got
        fn = triton_gemm.w8a8_mm if name == "ptr" else triton_gemm.w8a8_mm_tma
        if not native:
            _skip_dead_overflow_checks()
        k = triton.jit(fn, do_not_specialize=key[2]) if native else InterpretedFunction(fn)
        got = _KERNELS[key] = (k, isinstance(k, InterpretedFunction))
    return got


def _skip_dead_overflow_checks() -> None:
    """Turn the interpreter's integer-overflow sanitizer off while ``debug`` is off: its
    ``device_assert`` is dropped without debug anyway, so no bit changes; it cost half of an interpreted call."""
    opts = interpreter.interpreter_builder.options
    if not opts.debug and opts.sanitize_overflow:
        interpreter.interpreter_builder.options = replace(opts, sanitize_overflow=False)


@contextlib.contextmanager
def _quiet_ieee_overflow():
    """Silence numpy's "overflow encountered in cast/multiply/add" warnings from the Triton
    interpreter only: the ±inf they announce is what the contract and native Triton give."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"overflow encountered in (cast|multiply|add)",
            category=RuntimeWarning,
            module=r"triton\.runtime\.interpreter",
        )
        yield


def _bad(msg: str):
    raise OperandError(msg)


def _dense_cpu_or_cuda(x: Tensor, name: str) -> None:
    """One-line OperandError unless ``x`` is a dense CPU or CUDA tensor."""
    if x.layout != torch.strided:
        _bad(f"{name} has layout {x.layout}; expected a dense (torch.strided) tensor")
    if x.device.type not in ("cpu", "cuda"):
        _bad(f"{name} is on device {x.device}; expected a cpu or cuda tensor")


def _scale_stride(s, name: str, rows: int, rows_name: str, dev) -> tuple[Tensor, int]:
    """``(tensor on dev, element stride)`` of a scale [rows], [rows,1] or scalar (stride 0);
    metadata checks only."""
    if not isinstance(s, Tensor):
        _bad(f"{name} must be a torch.Tensor, got {type(s).__name__}")
    _dense_cpu_or_cuda(s, name)
    if s.dtype != torch.float32:
        _bad(f"{name} has dtype {s.dtype}; expected torch.float32")
    shp = s.shape
    if s.numel() == 1 and len(shp) <= 1:
        stride = 0
    elif (len(shp) == 1 and shp[0] == rows) or (len(shp) == 2 and shp[0] == rows and shp[1] == 1):
        stride = s.stride(0)
    else:
        _bad(f"{name} has shape {tuple(shp)}; expected [{rows_name}]=[{rows}], [{rows_name},1]=[{rows},1] or a scalar")
    if s.device != dev:
        s = s.to(dev)
    return s, stride


def _operands(a, b, out_dtype) -> tuple[int, int, int]:
    """(M, K, N) after metadata checks of a, b and out_dtype (one-line OperandError)."""
    for x, name, dims in ((a, "a", "M,K"), (b, "b", "N,K")):
        if not isinstance(x, Tensor):
            _bad(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        _dense_cpu_or_cuda(x, name)
        if x.dtype != torch.int8:
            _bad(f"{name} has dtype {x.dtype}; expected torch.int8")
        if x.dim() != 2:
            _bad(f"{name} must be 2-D [{dims}], got {x.dim()}-D shape {tuple(x.shape)}")
    m, k = a.shape
    n, kb = b.shape
    if k != kb:
        _bad(f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")
    if m == 0 or n == 0 or k == 0:
        _bad(f"empty GEMM: a {tuple(a.shape)}, b {tuple(b.shape)}")
    if out_dtype is not None and out_dtype not in _OUT_KIND:
        _bad(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    return m, k, n


@dataclass
class _Plan:
    """The configuration chosen for one key, its kernel object, whether it was timed, and the manifest details."""

    config: Config
    kern: Any  # the triton JITFunction / InterpretedFunction (triton ships no types)
    interp: bool
    tuned: bool
    extra: dict


@dataclass
class _Call:
    """What a call needs that depends only on operand metadata (cached per metadata key)."""

    plan: _Plan
    m: int
    n: int
    k: int
    grid: tuple
    ints: tuple  # the kernel's integer arguments, in order
    kw: dict  # constexprs and launch options
    alloc_dtype: torch.dtype
    ret_dtype: Optional[torch.dtype]
    device: torch.device
    ws_words: int  # split-K workspace words (0: none)
    ws_views: tuple = ()  # (workspace buffer, its [ws, counters] views) last used
    #: constexpr values in parameter order (the raw launcher takes every parameter)
    tail: tuple = ()
    #: ``(CompiledKernel, grid)`` after the first 16-byte aligned native launch
    fast: Optional[tuple] = None
    #: K' the operands are zero-padded to before each launch (0: none; :func:`_pad_k`)
    pad_k: int = 0


_PLANS: dict = {}
_CHOSEN: dict = {}  # tuning key -> (config, tuned)
_CALLS: dict = {}
_MAX_CALLS = 4096
_TUNE_LOCK = threading.Lock()
_WORKSPACES: dict = {}
_SM_COUNT: dict = {}
#: key -> {"config": label, "timings_ms": {label: ms | error}} for every tuned key
_TUNING: dict = {}


def _extra(cfg: Config, interp: bool, tuned: bool, out_dtype, device_type: str) -> dict:
    rounding = {torch.bfloat16: "explicit-rne-bitops", torch.float16: "cast-to-fp16"}.get(out_dtype, "none")
    extra = {"config": cfg.label(), **{f: getattr(cfg, f) for f in ("block_m", "block_n", "block_k", "split_k")}}
    extra.update(kernel_variant=_kernel_name(cfg), persistent=cfg.persistent, autotuned=tuned)
    extra.update(triton_version=triton.__version__, final_rounding=rounding, source_digest=SOURCE_DIGEST)
    extra.update(digest_of="triton", device=device_type, interpreter=interp)
    if interp:
        extra["interpreter_semantics"] = probe()
    return extra


def _tma_ok(a: Tensor, b: Tensor) -> bool:
    """TMA needs unit inner strides, 16-byte aligned bases and leading strides, and K % 16 == 0."""
    aligned = (a.stride(0) | b.stride(0) | a.data_ptr() | b.data_ptr() | a.shape[1]) % 16 == 0
    return a.stride(1) == 1 and b.stride(1) == 1 and aligned


#: M*N*K from which a native call with K % 16 != 0 pads K even when tuned (the measured crossover)
PAD_K_MIN_MACS = 1 << 30


def _padded_k(m: int, n: int, k: int, native: bool) -> int:
    """K' (next multiple of 16) when a native call has ``k % 16 != 0`` and either ``m*n*k >=``
    :data:`PAD_K_MIN_MACS` or tuning is off outside a conformance run (which pads as a tuned call does); else 0."""
    if not native or k % 16 == 0:
        return 0
    if m * n * k < PAD_K_MIN_MACS and (_autotune_enabled() or in_conformance_run()):
        return 0
    return (k + 15) // 16 * 16


def _pad_k(t: Tensor, k_padded: int) -> Tensor:
    """``t`` int8 [R, K] copied to a contiguous [R, k_padded] with zero columns (exact for the GEMM)."""
    return torch.nn.functional.pad(t, (0, k_padded - t.shape[1]))


def _need_int64(a: Tensor, b: Tensor, m: int, n: int, k: int) -> bool:
    """True when an element offset of a, b or the [M,N] output can exceed int32."""
    span_a = (m - 1) * abs(a.stride(0)) + (k - 1) * abs(a.stride(1))
    span_b = (n - 1) * abs(b.stride(0)) + (k - 1) * abs(b.stride(1))
    return max(span_a, span_b, m * n + 2 * max(m, n)) > _INT32_MAX // 2


def _stream_id(dev: torch.device) -> int:
    try:  # C call, ~0.3 us (torch.cuda.current_stream builds a Python object)
        return torch._C._cuda_getCurrentRawStream(dev.index)
    except AttributeError:  # pragma: no cover -- older/newer torch
        return torch.cuda.current_stream(dev).cuda_stream


def _workspace(dev: torch.device, words: int) -> Tensor:
    """int32 split-K workspace + arrival counters, zero between calls, one per device and stream."""
    key = (dev.index, _stream_id(dev)) if dev.type == "cuda" else ("cpu", 0)
    ws = _WORKSPACES.get(key)
    if ws is None or ws.numel() < words:
        ws = torch.zeros(max(words, 1 << 16), dtype=torch.int32, device=dev)
        _WORKSPACES[key] = ws
    return ws


def _num_sms(dev: torch.device) -> int:
    n = _SM_COUNT.get(dev.index)
    if n is None:
        n = _SM_COUNT[dev.index] = torch.cuda.get_device_properties(dev).multi_processor_count
    return n


def _layout(cfg: Config, interp: bool, a: Tensor, b: Tensor, sa_st, sb_st, bias, out_dtype, m, n, k, int64) -> tuple:
    """``(grid, integer args, keyword args, workspace words)`` of a launch of ``cfg`` (metadata only)."""
    tiles = ((m + cfg.block_m - 1) // cfg.block_m) * ((n + cfg.block_n - 1) // cfg.block_n)
    bias_st = 0 if bias is None else bias.stride(0)
    kw = dict(
        HAS_BIAS=bias is not None,
        OUT_KIND=_OUT_KIND.get(out_dtype, 0),
        ACC_ONLY=out_dtype is None,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
    )
    if not interp:
        kw.update(num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=False)
    if cfg.kernel == "gluon":  # the ring depth is the kernel's STAGES, not a compiler option
        # (ws: num_warps 4 is the default partition; Triton adds the worker warps)
        progs = min(tiles, _num_sms(a.device)) if cfg.persistent else tiles
        kw["STAGES"] = kw.pop("num_stages")
        return (progs,), (m, n, k, sa_st, sb_st, bias_st, n, progs), kw, 0
    if cfg.kernel == "tma":
        progs = min(tiles, _num_sms(a.device)) if cfg.persistent else tiles
        kw["FLATTEN"] = cfg.flatten
        kw["WARP_SPEC"] = (1 if cfg.persistent else 2) if cfg.warp_spec else 0
        return (progs,), (m, n, k, sa_st, sb_st, bias_st, n, progs), kw, 0
    sk = cfg.split_k
    kw.update(
        SPLIT_K=sk,
        EVEN_K=k % (cfg.block_k * sk) == 0,
        INT64_IDX=int64,
        K_ITERS_STATIC=(k + cfg.block_k * sk - 1) // (cfg.block_k * sk) if interp else 0,
        FLOAT_DOT=interp,
    )
    ints = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), sa_st, sb_st, bias_st, n)
    return (tiles, sk), ints, kw, (m * n + tiles if sk > 1 else 0)


def _hooks() -> tuple:
    """Triton's launch hooks ``(enter, exit)`` when a profiler installed any, else ``(None, None)``."""
    rt = getattr(getattr(triton, "knobs", None), "runtime", None)
    enter = getattr(rt, "launch_enter_hook", None)
    leave = getattr(rt, "launch_exit_hook", None)
    if getattr(enter, "calls", True) or getattr(leave, "calls", True):
        return enter, leave
    return None, None


def _launch_raw(fast: tuple, device: torch.device, args: tuple) -> None:
    """Launch the cached ``CompiledKernel`` of a call (its ``_Call.fast``) directly (``CompiledKernel.run``, as
    ``JITFunction.run`` does after binding), on ``device``'s current CUDA stream."""
    ck, grid = fast
    stream = _stream_id(device)
    enter, leave = _hooks()
    meta = None if enter is None else ck.launch_metadata(grid, stream, *args)
    ck.run(grid[0], grid[1], grid[2], stream, ck.function, ck.packed_metadata, meta, enter, leave, *args)


def _aligned(*ts) -> bool:
    """True when every tensor's data pointer is 16-byte aligned (Triton specialises on it)."""
    acc = 0
    for t in ts:
        acc |= t.data_ptr()
    return acc & 15 == 0


def _issue(call: _Call, a: Tensor, b: Tensor, sa, sb, bias, out: Tensor) -> None:
    """Launch ``call``'s kernel writing ``out``. Native: the first 16-byte aligned launch goes through
    ``kernel[grid](...)`` and keeps its ``CompiledKernel``; later aligned launches use :func:`_launch_raw`."""
    plan, cfg = call.plan, call.plan.config
    sa = out if sa is None else sa  # never read when ACC_ONLY
    sb = out if sb is None else sb
    if bias is None:
        bias = out  # never read (HAS_BIAS False)
    elif plan.interp and bias.dtype == torch.bfloat16:
        bias = bias.view(torch.int16)  # the interpreter has no bf16 loads: raw bits
    if cfg.kernel in _TMA_KERNELS:  # a, b bases are 16-byte aligned (checked by the caller)
        args = _descriptor_args(call, a, b, sa, sb, bias, out)
        if call.fast is not None and _aligned(sa, sb, bias):
            _launch_raw(call.fast, call.device, args + call.tail)
            return
        ck = plan.kern[call.grid](*args, **call.kw)
        if ck is not None and _aligned(sa, sb, bias, out):
            call.fast = (ck, _grid3(call.grid))
        return
    if call.ws_words:
        buf = _workspace(call.device, call.ws_words)
        if not call.ws_views or call.ws_views[0] is not buf:  # slicing costs ~2 us: keep views
            call.ws_views = (buf, buf, buf[call.m * call.n :])
        ws, cnt = call.ws_views[1], call.ws_views[2]
    else:
        ws = cnt = out  # never touched (SPLIT_K == 1)
    if plan.interp:
        with _quiet_ieee_overflow():
            plan.kern[call.grid](a, b, sa, sb, bias, out, ws, cnt, *call.ints, **call.kw)
        return
    if call.fast is not None and _aligned(a, b, sa, sb, bias):
        _launch_raw(call.fast, call.device, (a, b, sa, sb, bias, out, ws, cnt) + call.ints + call.tail)
        return
    ck = plan.kern[call.grid](a, b, sa, sb, bias, out, ws, cnt, *call.ints, **call.kw)
    if ck is not None and _aligned(a, b, sa, sb, bias, out, ws, cnt):
        call.fast = (ck, _grid3(call.grid))


def _grid3(grid: tuple) -> tuple:
    return (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)


_TD_FIELDS: dict = {}
#: kernels whose a / b are read through host TMA descriptors
_TMA_KERNELS = ("tma", "gluon")


def _descriptor_args(call: _Call, a: Tensor, b: Tensor, sa, sb, bias, out: Tensor) -> tuple:
    """Positional arguments of a ``tma`` / ``gluon`` launch: a, b descriptors, scales, bias, out, ints."""
    cfg = call.plan.config
    glu = cfg.kernel == "gluon"
    da = _descriptor(a, call.m, call.k, a.stride(0), cfg.block_m, cfg.block_k, glu)
    db = _descriptor(b, call.n, call.k, b.stride(0), cfg.block_n, cfg.block_k, glu)
    return (da, db, sa, sb, bias, out) + call.ints


def _descriptor(t: Tensor, rows: int, cols: int, ld: int, br: int, bc: int, gluon: bool = False):
    """Host TMA descriptor over ``t`` [rows, cols] (leading stride ``ld``), block [br, bc] (``gluon``:
    Gluon's). The first per layout is validated by ``TensorDescriptor``; later ones copy its fields."""
    key = (rows, cols, ld, br, bc, gluon)
    fields = _TD_FIELDS.get(key)
    if fields is None:
        d = (
            gluon_gemm.descriptor(t, rows, cols, ld, br, bc)
            if gluon
            else TensorDescriptor(t, [rows, cols], [ld, 1], [br, bc])
        )
        _TD_FIELDS[key] = dict(vars(d))
        return d
    cls = gluon_gemm.TensorDescriptor if gluon else TensorDescriptor
    d = cls.__new__(cls)
    d.__dict__.update(fields)
    d.base = t
    return d


def _constexpr_tail(kern, kw: dict) -> tuple:
    """The kernel's constexpr values in declaration order, from the launch keywords."""
    names = [p.name for p in kern.params if p.is_constexpr]
    return tuple(kw[nm] for nm in names)


def _candidates(m: int, tma: bool, gluon: bool = False, gluon_ws: bool = False) -> list[Config]:
    """The bucket's configurations usable here (TMA ones only for TMA-able operands, excluded ones
    dropped), heuristic default first, then :data:`GLUON_CONFIGS` / :data:`GLUON_WS_CONFIGS` when enabled."""
    cands = BUCKET_CONFIGS[bucket(m)] + (GLUON_CONFIGS.get(bucket(m), ()) if gluon and tma else ())
    if gluon and gluon_ws and tma:
        cands += GLUON_WS_CONFIGS.get(bucket(m), ())
    return [c for c in cands if (tma or c.kernel not in _TMA_KERNELS) and c.label() not in _EXCLUDED]


_CAPABILITY: dict = {}


def _env_on(name: str) -> bool:
    """An on-by-default switch: off when the variable is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def _gluon_enabled(dev: torch.device) -> bool:
    """Gluon candidates join on sm_90 with ``gluon_gemm.AVAILABLE`` unless ``INT8CONF_TRITON_GLUON`` is off."""
    return _env_on("INT8CONF_TRITON_GLUON") and gluon_gemm.AVAILABLE and _capability(dev) == (9, 0)


def _gluon_ws_enabled(dev: torch.device) -> bool:
    """As :func:`_gluon_enabled`, and ``INT8CONF_TRITON_GLUON_WS`` not off."""
    return _env_on("INT8CONF_TRITON_GLUON_WS") and _gluon_enabled(dev)


def _capability(dev: torch.device) -> tuple:
    """CUDA compute capability of ``dev`` (cached; ``()`` off CUDA)."""
    if dev.type != "cuda":
        return ()
    cap = _CAPABILITY.get(dev.index)
    if cap is None:
        cap = _CAPABILITY[dev.index] = tuple(torch.cuda.get_device_capability(dev))
    return cap


#: K blocks per program below which an untimed call keeps the default (a split costs atomics and a workspace)
_SERIAL_K_BLOCKS = 16


def _untuned(cands: list, m: int, n: int, k: int, sms: int) -> Config:
    """Configuration of an untimed call: the bucket's default, unless its tiles fill less than half of the
    ``sms`` and each program walks >= :data:`_SERIAL_K_BLOCKS` K blocks; then the ``ptr`` candidate with the fewest
    K blocks per program whose tiles x split-K fit on the SMs (first on a tie)."""

    def tiles(c: Config) -> int:
        return -(-m // c.block_m) * -(-n // c.block_n)

    def k_blocks(c: Config) -> int:  # per program
        return -(-k // (c.block_k * c.split_k))

    best = cands[0]
    cost = k_blocks(best)
    if tiles(best) * best.split_k * 2 > sms or cost < _SERIAL_K_BLOCKS:
        return best
    for c in cands[1:]:
        if c.kernel == "ptr" and tiles(c) * c.split_k <= sms and k_blocks(c) < cost:
            best, cost = c, k_blocks(c)
    return best


#: a JSON table pinning the configuration per tuning bin: ``{"format": PINS_FORMAT, "pins": [{"m", "n", "k": powers of
#: two (M, N, K rounded up), "tma": bool, "config": label}]}`` (:func:`pins_from_tuning` writes one from a tuned run)
PINS_ENV = "INT8CONF_TRITON_PINS"
PINS_FORMAT = "int8conf-triton-pins/1"
_PINS: dict = {}


def load_pins(path) -> dict:
    """``{(m_bin, n_bin, k_bin, tma): label}`` of a pins file (cached per path). Raises ValueError (one line)."""
    path = str(path)
    if path not in _PINS:
        try:
            doc = json.loads(Path(path).read_text())
            if doc.get("format") != PINS_FORMAT:
                raise ValueError(f"format is {doc.get('format')!r}, not {PINS_FORMAT!r}")
            _PINS[path] = {
                (int(p["m"]), int(p["n"]), int(p["k"]), bool(p["tma"])): str(p["config"]) for p in doc["pins"]
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as e:
            raise ValueError(f"{PINS_ENV}={path}: not a Triton pins table ({type(e).__name__}: {e})") from None
    return _PINS[path]


def _pinned(cands: list, m: int, n: int, k: int, tma: bool) -> Optional[Config]:
    """The candidate ``INT8CONF_TRITON_PINS`` pins for this bin, or None (no table, no pin, or not a candidate here)."""
    path = os.environ.get(PINS_ENV, "").strip()
    if not path:
        return None
    label = load_pins(path).get((_pow2_bin(m), _pow2_bin(n), _pow2_bin(k), tma))
    return next((c for c in cands if c.label() == label), None)


def check_pins_env() -> None:
    """Read the table ``INT8CONF_TRITON_PINS`` names, if set (called on import: a bad table fails loading the
    kernel with one line, also where no native call would read it). Raises ValueError."""
    path = os.environ.get(PINS_ENV, "").strip()
    if path:
        load_pins(path)


def pins_from_tuning(tuning: Optional[dict] = None) -> dict:
    """A pins table (:data:`PINS_ENV`) of the tuner's choices: ``tuning`` maps tuning keys (tuples, or their
    ``str``) ``(device, native, m_bin, n_bin, k_bin, tma, ...)`` to ``{"config": label}``; default this
    process's (:func:`tuning_table`)."""
    pins = {}
    for key, v in (tuning if tuning is not None else _TUNING).items():
        t = ast.literal_eval(key) if isinstance(key, str) else key
        pins[(t[2], t[3], t[4], bool(t[5]))] = v["config"]
    rows = [{"m": m, "n": n, "k": k, "tma": tma, "config": c} for (m, n, k, tma), c in sorted(pins.items())]
    return {"format": PINS_FORMAT, "pins": rows}


def _autotune_enabled() -> bool:
    """Timing-based tuning: on unless ``INT8CONF_TRITON_AUTOTUNE`` is off or this is a conformance run."""
    return _env_on("INT8CONF_TRITON_AUTOTUNE") and not in_conformance_run()


class KernelHang(RuntimeError):
    """A launched configuration did not finish within the hang limit (the tuner re-raises it)."""


def _hang_limit_s() -> float:
    """Seconds a tuning launch may take: ``INT8CONF_TRITON_HANG_S`` (default 60).
    Raises ValueError when set but not a finite number > 0."""
    raw = os.environ.get("INT8CONF_TRITON_HANG_S", "60")
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not (0 < v < float("inf")):
        raise ValueError(f"INT8CONF_TRITON_HANG_S must be a number of seconds > 0, got {raw!r}")
    return v


def _wait(event, what: str, limit_s: Optional[float] = None) -> None:
    """Poll ``event.query()`` until done; raise KernelHang after ``limit_s`` seconds (default
    :func:`_hang_limit_s`), naming ``what`` and how to exclude it."""
    limit = _hang_limit_s() if limit_s is None else limit_s
    t_end = time.monotonic() + limit
    pause = 1e-5
    while not event.query():
        if time.monotonic() > t_end:
            raise KernelHang(
                f"Triton configuration '{what}' did not finish within {limit:g} s (a GPU hang); set INT8CONF_TRITON_EXCLUDE='{what}' to skip it"
            )
        time.sleep(pause)
        pause = min(pause * 2, 1e-2)


def _time_e2e(fn, batches: int = 5, what: str = "?") -> float:
    """Milliseconds per call as a caller sees it (CUDA events around back-to-back calls), median of
    ``batches`` batches of ~4 ms. Raises KernelHang."""
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(3):
        fn()
    e.record()
    _wait(e, what)
    reps = int(min(max(4.0 / max(s.elapsed_time(e) / 3, 1e-3), 5), 400))
    ts = []
    for _ in range(batches):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        _wait(e, what)
        ts.append(s.elapsed_time(e) / reps)
    return sorted(ts)[len(ts) // 2]


def _tune(cands: list[Config], make_call, tensors: tuple) -> tuple[Config, dict]:
    """Time every candidate end to end and return ``(fastest, timings)``; a candidate that fails to
    compile or launch is dropped (error kept in the timings), KernelHang propagates."""
    times: dict = {}
    best, best_t = None, float("inf")
    for cfg in cands:
        try:
            call = make_call(cfg)
            t = _time_e2e(lambda: _issue(call, *tensors), what=cfg.label())
        except KernelHang:
            raise
        except Exception as e:  # noqa: BLE001 -- e.g. out of shared memory for this tile
            times[cfg.label()] = f"failed: {type(e).__name__}: {str(e).strip()[:100]}"
            continue
        times[cfg.label()] = float(t)
        if t < best_t:
            best, best_t = cfg, t
    if best is None:
        raise RuntimeError(f"no Triton configuration ran: {times}")
    return best, times


def _pow2_bin(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def tuning_table() -> dict:
    """Tuning decisions of this process: ``{key string: {"config", "timings_ms"}}``."""
    return {str(k): dict(v) for k, v in _TUNING.items()}


def _build(
    a: Tensor, b: Tensor, scale_a, scale_b, bias, out_dtype, config: Optional[Config]
) -> tuple[_Call, bool, tuple]:
    """Slow path of a call: validate metadata, move stray operands to a's device, choose (and on a new
    key, tune) the configuration. Returns ``(call, cacheable, (a, b, sa, sb, bias))``."""
    m, k, n = _operands(a, b, out_dtype)
    dev = a.device
    moved = False
    if b.device != dev:
        b, moved = b.to(dev), True
    sa = sb = None
    sa_st = sb_st = 0
    if out_dtype is not None:
        sa, sa_st = _scale_stride(scale_a, "scale_a", m, "M", dev)
        sb, sb_st = _scale_stride(scale_b, "scale_b", n, "N", dev)
        moved = moved or sa is not scale_a or sb is not scale_b
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.dtype != out_dtype or bias.dim() != 1 or bias.shape[0] != n:
                got = f"{getattr(bias, 'dtype', type(bias).__name__)} {tuple(getattr(bias, 'shape', ()))}"
                _bad(f"bias must be a [{n}] tensor of dtype {out_dtype}, got {got}")
            _dense_cpu_or_cuda(bias, "bias")
            if bias.device != dev:
                bias, moved = bias.to(dev), True
    native = a.is_cuda and not _kernel("ptr", True)[1]
    pad_k = _padded_k(m, n, k, native)
    if pad_k:  # odd K: zero-padded copies (module docstring, "Layouts")
        a, b, k = _pad_k(a, pad_k), _pad_k(b, pad_k), pad_k
    int64 = _need_int64(a, b, m, n, k)
    tma = native and not int64 and m > 16 and _tma_ok(a, b)
    if (
        config is not None
        and config.kernel == "gluon"
        and not (tma and config.split_k == 1 and gluon_gemm.AVAILABLE and _capability(dev) == (9, 0))
    ):
        raise ValueError(
            f"configuration '{config.label()}' needs an sm_90 CUDA device, a Triton with Gluon's Hopper API, split_k 1 and TMA-able operands (int8, M > 16, K-contiguous, 16-byte aligned base and row stride)"
        )
    pkey: tuple = (a.device.index if a.is_cuda else -1, native, _pow2_bin(m), n, k, _OUT_KIND.get(out_dtype, -1))
    pkey += (bias is not None, tma, a.stride(1) == 1, b.stride(1) == 1, config)
    interp = not native
    alloc = torch.int32 if out_dtype is None else (torch.int16 if interp and out_dtype == torch.bfloat16 else out_dtype)

    def make_call(cfg: Config, plan: Optional[_Plan] = None) -> _Call:
        plan = plan or _Plan(cfg, _kernel(_kernel_name(cfg), native)[0], interp, False, {})
        grid, ints, kw, words = _layout(cfg, interp, a, b, sa_st, sb_st, bias, out_dtype, m, n, k, int64)
        tail = () if interp else _constexpr_tail(plan.kern, kw)
        return _Call(plan, m, n, k, grid, ints, kw, alloc, out_dtype, dev, words, tail=tail, pad_k=pad_k)

    def plan_for(cfg: Config, tuned: bool) -> _Plan:
        return _Plan(
            cfg, _kernel(_kernel_name(cfg), native)[0], interp, tuned, _extra(cfg, interp, tuned, out_dtype, dev.type)
        )

    plan = _PLANS.get(pkey)
    capturing = native and torch.cuda.is_current_stream_capturing()
    # one tuning per (device, powers of two of M, N, K, layout): epilogue variants and neighbouring
    # shapes share the main loop's tile choice
    tkey = pkey[:3] + (_pow2_bin(n), _pow2_bin(k)) + pkey[7:]
    fixed = in_conformance_run()
    if plan is None and config is None and tkey in _CHOSEN and not fixed:
        plan = _PLANS[pkey] = plan_for(*_CHOSEN[tkey])
        plan.extra["config_rule"] = "timed"
    if plan is None:
        rule = "explicit"
        if config is not None:
            cfg, tuned = config, False
        elif interp:
            cfg, tuned, rule = _interp_config(m, n, k), False, "interpreter tiles"
        else:
            cands = _candidates(m, tma, _gluon_enabled(dev), _gluon_ws_enabled(dev)) or [BUCKET_CONFIGS["decode"][0]]
            cfg, tuned, rule = _untuned(cands, m, n, k, _num_sms(dev)), False, "heuristic"
            pinned = _pinned(cands, m, n, k, tma)
            if pinned is not None:
                cfg, rule = pinned, "pinned"
            elif not (capturing or not _autotune_enabled() or m * n * k < AUTOTUNE_MIN_MACS or len(cands) == 1):
                out = torch.empty((m, n), dtype=alloc, device=dev)
                with _TUNE_LOCK:
                    cfg, times = _tune(cands, make_call, (a, b, sa, sb, bias, out))
                _TUNING[tkey[:-1]] = {"config": cfg.label(), "timings_ms": times}
                tuned, rule = True, "timed"
                _CHOSEN[tkey] = (cfg, True)
        plan = plan_for(cfg, tuned)
        plan.extra["config_rule"] = rule
        if rule in ("heuristic", "pinned", "timed"):
            plan.extra["config_space"] = bucket(m) + (" (TMA-able)" if tma else "")
            plan.extra["config_candidates"] = len(cands)
        if not (capturing and not tuned and config is None):  # tune later, outside a capture
            _PLANS[pkey] = plan
    call = make_call(plan.config, plan)
    # not cacheable: operands moved to a's device (the copy is per call), or an
    # untuned stand-in chosen during a CUDA-graph capture (tune on the next eager call)
    cacheable = not moved and _PLANS.get(pkey) is plan
    return call, cacheable, (a, b, sa, sb, bias)


def _meta(t) -> Optional[tuple]:
    return None if t is None else (t.dtype, t.shape, t.stride(), t.device, t.layout)


def _run(a: Tensor, b: Tensor, scale_a, scale_b, bias, out_dtype, config: Optional[Config] = None) -> Tensor:
    key: Optional[tuple]
    try:  # metadata key: a hit means these exact dtypes/shapes/strides/devices were validated
        # (flat: hashing it dominates a repeated call; ``layout`` / ``device`` tell a sparse or meta
        # tensor from the dense one a cached call took)
        key = (a.dtype, a.shape, a.stride(), a.device, a.layout, b.dtype, b.shape, b.stride(), b.device, b.layout)
        key += (_meta(scale_a), _meta(scale_b), _meta(bias), out_dtype, config)
    except (AttributeError, TypeError, RuntimeError):  # a non-tensor or a sparse CSR / BSR
        key = None  # operand: the slow path names it
    call = _CALLS.get(key)
    if call is not None and call.pad_k:
        a, b = _pad_k(a, call.pad_k), _pad_k(b, call.pad_k)
    if call is not None and call.plan.config.kernel in _TMA_KERNELS and ((a.data_ptr() | b.data_ptr()) & 15):
        call = None  # TMA needs 16-byte aligned bases: re-plan without caching
        key = None
    if call is None:
        call, cacheable, (a, b, scale_a, scale_b, bias) = _build(a, b, scale_a, scale_b, bias, out_dtype, config)
        if cacheable and key is not None:
            if len(_CALLS) >= _MAX_CALLS:
                _CALLS.clear()
            _CALLS[key] = call
    out = torch.empty((call.m, call.n), dtype=call.alloc_dtype, device=call.device)
    _issue(call, a, b, scale_a, scale_b, bias, out)
    if trace.current() is not None:
        trace.record_path(
            "triton-interpreter" if call.plan.interp else "triton-native",
            **call.plan.extra,
            **({"k_padded_to": call.pad_k} if call.pad_k else {}),
        )
    return out if out.dtype == call.ret_dtype or call.ret_dtype is None else out.view(call.ret_dtype)


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] on a's device (CPU: interpreter),
    any strides. Raises OperandError (one line)."""
    return _run(a, b, None, None, None, None)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """W8A8 GEMM, TRITON_STYLE: ``rnd(rnd((float32(acc) * s_a) * s_w) + bias)``.

    a int8 [M,K], b int8 [N,K] (any strides); scale_a float32 [M]|[M,1]|scalar, scale_b [N]|[N,1]|scalar (any
    stride, zeros legal); bias out_dtype [N] or None; out_dtype bfloat16 | float16 | float32. Returns a contiguous
    out_dtype [M,N] on a's device. Raises OperandError on metadata problems, ``out_dtype=None`` included."""
    if out_dtype is None:
        _bad(
            "out_dtype=None is not an output dtype of scaled_mm (one of torch.bfloat16, torch.float16, torch.float32); the int32 accumulator is int_mm(a, b)"
        )
    return _run(a, b, scale_a, scale_b, bias, out_dtype)


def scaled_mm_config(
    config: Config,
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: Optional[torch.dtype] = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """``scaled_mm`` with an explicit :class:`Config`; ``out_dtype`` None = int32 accumulator.
    ``tma`` needs CUDA and aligned K-contiguous operands, ``gluon`` also sm_90 (``INT8CONF_TRITON_GLUON`` ignored)."""
    return _run(a, b, scale_a, scale_b, bias, out_dtype, config)


def launch_spec(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    raw: bool = False,
):
    """``(launch, out, config)``: ``launch()`` re-issues the launch a ``scaled_mm`` call with these
    operands makes, every argument precomputed, writing ``out``. ``raw=False``: ``kernel[grid](...)``;
    ``raw=True``: the compiled kernel's launcher (:func:`_launch_raw`)."""
    scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
    call, _, (a, b, sa, sb, bias) = _build(a, b, scale_a, scale_b, bias, out_dtype, None)
    out = torch.empty((call.m, call.n), dtype=call.alloc_dtype, device=call.device)
    cfg = call.plan.config
    sa = out if sa is None else sa
    sb = out if sb is None else sb
    bias = out if bias is None else bias
    if cfg.kernel in _TMA_KERNELS:
        pos = _descriptor_args(call, a, b, sa, sb, bias, out)
    else:
        if call.ws_words:
            buf = _workspace(call.device, call.ws_words)
            ws, cnt = buf, buf[call.m * call.n :]
        else:
            ws = cnt = out
        pos = (a, b, sa, sb, bias, out, ws, cnt) + call.ints
    kern = call.plan.kern[call.grid]
    kw = call.kw
    if not raw:
        return (lambda: kern(*pos, **kw)), out, cfg
    ck = kern(*pos, **kw)
    fast, device = (ck, _grid3(call.grid)), call.device
    args = pos + call.tail
    return (lambda: _launch_raw(fast, device, args)), out, cfg


def variant_key(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: Optional[torch.dtype] = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> str:
    """The compiled variant a :func:`scaled_mm` call with these operands launches, without launching (the suite's
    warm-up compiles each once: ``KernelSpec.warm_up``): the kernel, its constexprs and launch options, the
    value classes (``== 1``, ``% 16 == 0``) of the integer arguments it specializes on and the operand dtypes.
    Outside a conformance run the configuration may first be timed (as :func:`scaled_mm` would)."""
    call, _, (a, b, sa, sb, bias) = _build(a, b, scale_a, scale_b, bias, out_dtype, None)
    name = _kernel_name(call.plan.config)
    classes: tuple = ()
    params = getattr(call.plan.kern, "params", None)  # the interpreter specializes on nothing
    if name in UNSPECIALIZED and params is not None and call.ints:
        skip = set(_unspecialized(name))
        ints = [p.name for p in params if not p.is_constexpr][-len(call.ints) :]
        classes = tuple((v == 1, v % 16 == 0) for nm, v in zip(ints, call.ints) if nm not in skip)
    dtypes = tuple(str(getattr(t, "dtype", None)) for t in (a, b, sa, sb, bias)) + (str(call.alloc_dtype),)
    return repr((name, sorted(call.kw.items()), classes, dtypes))


def available() -> tuple[bool, str]:
    return True, ""


check_pins_env()
