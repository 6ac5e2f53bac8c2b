"""FlagGems 5.0.2 adapters ``flaggems-int8`` / ``flaggems-fp8``: ``flag_gems.cutlass_scaled_mm(c, a, b[K,N], a_scale,
b_scale, bias)`` (``fused/cutlass_scaled_mm.py``, cited ``L<n>``; the signature of vLLM's ``_C.cutlass_scaled_mm`` op,
which FlagGems patches: ``patches/patch_vllm_all.py`` L407-415), CUDA sm_90 only; :func:`vllm_api` makes it an int8conf
``scaled_mm``. Declared (citations at each constant): epilogue ``a_then_w/after_round`` (:data:`STEPS`), FP8
accumulator ``fp32 bits=14 truncate`` (:data:`FP8_ACCUMULATOR`: no ``max_num_imprecise_acc``, never promoted), K, N
multiples of 16 and dense b / scales / bias (:data:`CONSTRAINTS`, :data:`DENSE`). Path per call (C1):
``flaggems/sm90-pertensor-or-pertoken/<operands>/<a scale>-a/<b scale>-b`` with its Triton config (the library times
3 configs keyed on next_pow2(M), N, K, L184-191, none in ``runtime/backend``'s yaml; a conformance run pins
:func:`pinned_tiles`). Out of scope: the block-scaled entries (L70-180 ``_block_wise_smm_kernel``, taken for [M,K/128]
/ [K/128,N/128] scales; ``ops/fp8_matmul.py``; ``w8a8_block_fp8_matmul``). Errors: OperandError (one line) for another
operand dtype or device than sm_90; ImportError from :func:`make_spec` without flag_gems."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from typing import Callable, Optional

import torch

from conformance.kernels import trace
from conformance.kernels.adapters.autotune import one_config
from conformance.kernels.digest import callable_digest, module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints, in_conformance_run
from reference.contract import NAMED
from reference.errors import OperandError
from reference.fp8 import parse_accumulator

# ``_pertensor_or_pertoken_smm_kernel`` (L192-300): ``acc = tl.dot(a, b, acc, out_dtype=ACC_DTYPE)``, int32 for int8,
# float32 for e4m3 (L268, L318); ``acc = a_scale * acc.to(tl.float32)`` (L277); ``acc = b_scale.T * acc`` (L282);
# ``c = acc.to(c's dtype)`` (L284, RNE); ``c += bias`` in c's dtype inside ``if bias_ptr:`` (L286-291). That add is in
# its own basic block, so Triton's default fp fusion makes no FMA of it: compiled here for sm_90 (Triton 3.9, ptxas
# 12.8) the epilogue is 64 FMUL + 32 FADD, no FFMA, for float32 out; bf16 adds with ``add.bf16x2`` (one rounding).
STEPS = NAMED["a_then_w/after_round"]
OPERANDS = {"flaggems-int8": "int8", "flaggems-fp8": "e4m3"}
_DTYPES = {"int8": torch.int8, "e4m3": torch.float8_e4m3fn}
# FP8: ``tl.dot`` passes no ``max_num_imprecise_acc`` (L268), so Triton takes its sm_90 default 2**30
# (``backends/nvidia/compiler.py`` parse_options, ``language/semantic.py`` dot) > K: no partial sum is promoted (the
# TTGIR compiled here says ``maxNumImpreciseAcc = 1073741824``); the wgmma accumulator keeps the whole K, as cuBLASLt's
# fast accumulation (``torch-fp8-fast``: ``fp32 bits=14 truncate`` measured on the H200). ``triton-fp8`` passes 128
# (= BLOCK_K) and measured ``promote=128``.
FP8_ACCUMULATOR = parse_accumulator("fp32 bits=14 truncate")
#: the source's autotune list (L186-188) as (TILE_M, TILE_N, TILE_K), picked by next_pow2(M) in a conformance run
CONFIGS = ((64, 64, 256), (64, 128, 128), (128, 128, 128))
# The source's asserts: a and c row-major (L482), b column-major (L484), ``c.stride(0) % 16`` (L486) and
# ``b.stride(1) % 16`` (L487): K, N multiples of 16 for the dense b and the c allocated here; scales float32 (L368-369)
# and contiguous (L374-375); bias 1-D, contiguous, N elements (L489-494; its dtype unchecked). Loads masked without
# ``other`` (L263, L266) read 0 past K (Triton's lowering: ``mov 0`` before the predicated load).
CONSTRAINTS = ShapeConstraints(
    k_multiple=16,
    n_multiple=16,
    note="FlagGems cutlass_scaled_mm asserts b.stride(1) % 16 and c.stride(0) % 16 (K, N multiples of 16); sm_90 only",
)
#: the operands handed dense: b (column-major with ld % 16: L484, L487), the scales (L374-375), bias (L493)
DENSE = ("b", "bias", "scale_a", "scale_b")


def m_bucket(m: int) -> int:
    """``triton.next_power_of_2(M)``, the autotune key's ``_M_NPO2`` (L320)."""
    return 1 << max(m - 1, 0).bit_length()


def pinned_tiles(m: int) -> tuple[int, int, int]:
    """The (TILE_M, TILE_N, TILE_K) of :data:`CONFIGS` a conformance run launches for M rows: a pure function of the
    autotune key's M bucket ``next_pow2(M)`` (L190, L320): <= 32, <= 64, larger."""
    bucket = m_bucket(m)
    return CONFIGS[0] if bucket <= 32 else CONFIGS[1] if bucket <= 64 else CONFIGS[2]


def _config_label(cfg) -> str:
    kw = cfg.kwargs
    return f"{kw['TILE_M']}x{kw['TILE_N']}x{kw['TILE_K']} w{cfg.num_warps} s{cfg.num_stages}"


def _only_config(tuner, tiles: tuple):
    """Inside the block the Triton autotuner ``tuner`` holds one config, the source's with ``tiles`` (yielded)."""
    (cfg,) = [c for c in tuner.configs if tuple(c.kwargs.get(t) for t in ("TILE_M", "TILE_N", "TILE_K")) == tiles]
    return one_config(tuner, cfg)


def _scale(s: torch.Tensor, rows: int) -> torch.Tensor:
    """[rows, 1] (vLLM's per-token / per-channel shape), a one-element scale as [1] (per-tensor: L322-323)."""
    return s.reshape(1) if s.numel() == 1 else s.reshape(rows, 1)


def vllm_api(entry: Callable, name: str, tuner=None, sm: int = 90, digest: str = "", version: str = "") -> Callable:
    """``scaled_mm(a [M,K], b [N,K], scale_a, scale_b, out_dtype, bias)`` calling ``entry(c, a, b.t(), scale_a,
    scale_b, bias)`` (FlagGems' out-first signature) on ``c = empty((M, N), out_dtype)`` as vLLM's Python wrapper
    allocates it; b is copied when ``b.t()`` is not column-major. ``loader.vllm_adapter`` is not reused: it expands a
    per-tensor scale to [M,1], and the kernel picks its per-tensor branch by ``numel()`` (L322-323), so a one-element
    scale is handed as [1]. ``tuner``: the kernel's Triton autotuner (None: a stand-in), pinned to :func:`pinned_tiles`
    in a conformance run. OperandError (one line): another operand dtype; ``sm`` outside 90-99 (L496-512: other
    archs raise NotImplementedError, below sm_75 nothing runs and ``c`` stays unwritten)."""
    want = _DTYPES[OPERANDS[name]]

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        if a.dtype != want or b.dtype != want:
            raise OperandError(f"{name}: a and b must be {want}, got {a.dtype} and {b.dtype}")
        if not 90 <= sm < 100:
            raise OperandError(f"{name}: FlagGems cutlass_scaled_mm runs on sm_90 only (L496-512); this is sm_{sm}")
        m, n = a.shape[0], b.shape[0]
        bt = b.t()
        if bt.shape[0] > 1 and bt.stride(0) != 1:
            bt = b.contiguous().t()
        sa, sb = _scale(scale_a, m), _scale(scale_b, n)
        c = torch.empty((m, n), dtype=out_dtype, device=a.device)
        trace.record_operands(a, b, scale_a, scale_b, bias)
        pinned = tuner is not None and in_conformance_run()
        with _only_config(tuner, pinned_tiles(m)) if pinned else contextlib.nullcontext() as cfg:
            entry(c, a, bt, sa, sb, bias)
        if tuner is not None and cfg is None:
            cfg = getattr(tuner, "best_config", None)
        per_a = "per-token" if sa.numel() == m else "per-tensor"
        per_b = "per-channel" if sb.numel() == n else "per-tensor"
        extra: dict = dict(config=_config_label(cfg) if cfg is not None else "stand-in", m_bucket=m_bucket(m))
        extra.update(
            config_rule="shape: next_pow2(M) <= 32 / <= 64 / larger" if pinned else "triton.autotune (timed)",
            sm=sm,
            acc_dtype="int32" if want == torch.int8 else "float32",
            library=version,
        )
        if want != torch.int8:
            extra["max_num_imprecise_acc"] = 2**30 if sm == 90 else 0
        path = f"flaggems/sm90-pertensor-or-pertoken/{OPERANDS[name]}/{per_a}-a/{per_b}-b"
        trace.record_path(path, source_digest=digest, **extra)
        return c

    scaled_mm.__name__ = scaled_mm.__qualname__ = name.replace("-", "_")
    return scaled_mm


def build_spec(
    name: str, entry: Callable, version: str = "0", tuner=None, sm: int = 90, digest: Optional[str] = None
) -> KernelSpec:
    """KernelSpec of ``flaggems-int8`` / ``flaggems-fp8`` around a ``cutlass_scaled_mm``-signature ``entry``
    (``digest``: its source's SHA-256, default ``callable_digest(entry)``)."""
    operands = OPERANDS[name]
    dig = digest if digest is not None else callable_digest(entry)
    return KernelSpec(
        name=name,
        scaled_mm=vllm_api(entry, name, tuner, sm, dig, version),
        contract=STEPS.nearest_contract(),
        devices=("cuda",),
        constraints=CONSTRAINTS,
        version=version,
        source_digest=dig,
        origin=f"adapter:{name}",
        description=f"{version} cutlass_scaled_mm ({operands}, per-tensor / per-token scales; Triton, sm_90)",
        steps=STEPS,
        contiguous_only=DENSE,
        warm_up=True,
        operands=operands,
        accumulator={"cuda": FP8_ACCUMULATOR} if operands == "e4m3" else None,
    )


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of the real ``flag_gems.cutlass_scaled_mm``; ImportError without flag_gems. Reads the module's
    ``_pertensor_or_pertoken_smm_kernel`` (a private name of flag_gems: the autotuner to pin has no public handle)."""
    # the module itself: ``flag_gems.fused`` re-exports the function under the module's name
    fg = importlib.import_module("flag_gems.fused.cutlass_scaled_mm")
    import triton

    version = f"flag_gems {importlib.metadata.version('flag_gems')} (triton {triton.__version__})"
    tuner = fg._pertensor_or_pertoken_smm_kernel
    return build_spec(
        name, fg.cutlass_scaled_mm, version, tuner, int(fg.SM_VERSION_NUM), module_digest(str(fg.__file__))
    )
