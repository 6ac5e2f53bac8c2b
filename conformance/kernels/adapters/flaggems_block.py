"""FlagGems 5.0.2 block-scaled FP8 adapters (issue 46), CUDA only. ``H`` = ``runtime/backend/_nvidia/hopper/ops/
w8a8_block_fp8_matmul.py`` (what ``flag_gems.w8a8_block_fp8_matmul`` is on sm_9x: ``runtime/__init__.py``
replace_customized_ops, ARCH_MAP ``"9"``), ``O`` = ``ops/w8a8_block_fp8_matmul.py`` (other archs), ``C`` =
``fused/cutlass_scaled_mm.py``. Both kernels do ``acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]`` per K tile
(H L232, O L93, C L126): the dot from 0 times s_a first, then s_w, added; no ``enable_fp_fusion`` is passed (H L489,
O L197, C L156), so Triton's default fusion contracts the last multiply and the add: ``mul s_a; fma s_w`` (``mul
s_a; mul s_w; add`` with fusion off). Epilogue ``cast out`` (H L236-241, O L97-102, C L130); no bias. The e4m3 tile
dot passes no ``max_num_imprecise_acc``: ``flaggems.FP8_ACCUMULATOR`` on CUDA.

* ``flaggems-block-fp8``: ``w8a8_block_fp8_matmul(A [M,K], B [N,K], As [M,KB], Bs [NB,KB], [bn, bk], out)``: our
  layouts as they are (Bs strides H L485-486). Tiles: H ``_get_fixed_matmul_meta`` (L90-110: the yaml tuned per
  device and (N, K), else BLOCK_N = bn, BLOCK_K = bk), O L186-190. The scale is read per BLOCK_K tile (H L228-231),
  so the form holds while BLOCK_K == bk (recorded per call); bn, bk powers of two >= 16 (tl.arange, tl.dot).
* ``flaggems-cutlass-block-fp8``: ``cutlass_scaled_mm(c, a, b [K,N], a_scale [M,KB], b_scale [KB,NB], None)``:
  128x128 only (C L147, L398-413), no bias (L415), K, N multiples of 16 (L486-487); one scale block (K <= 128,
  N <= 128) is dispatched to the per-token kernel instead (L371-373: numel 1 / M), recorded as that path.
Private names read: H ``_get_fixed_matmul_meta``, C ``_block_wise_smm_kernel`` (the autotuner to pin)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import os
from typing import Any, Callable, Optional

import torch

from conformance.kernels import trace
from conformance.kernels.adapters.autotune import one_config
from conformance.kernels.adapters.fbgemm import triton_fp_fusion
from conformance.kernels.adapters.flaggems import FP8_ACCUMULATOR
from conformance.kernels.digest import callable_digest, module_digest
from conformance.kernels.loader import block_contract
from conformance.kernels.spec import KernelSpec, ShapeConstraints, in_conformance_run
from reference.block.contract import parse_block_declaration
from reference.errors import KernelLoadError, OperandError
from reference.validate import validate_operands

NAMES = ("flaggems-block-fp8", "flaggems-cutlass-block-fp8")
FUSED, UNFUSED = "mul s_a; fma s_w", "mul s_a; mul s_w; add"
EPILOGUE = "cast out"
#: w8a8_block_fp8_matmul: BLOCK_N = bn, BLOCK_K = bk by default (H L94-97, O L27-31): powers of two >= 16
SIZES = ((128, 128), (64, 128), (128, 64))
#: cutlass_scaled_mm's block path: 128 x 128 only (C L12, L147, L398-413)
CUTLASS_SIZES = ((128, 128),)
#: the block_wise config a conformance run pins (C L32: TILE_M, TILE_N, stages, warps; TILE_K = 128 in all, L43)
CUTLASS_PINNED = (128, 128, 4, 4)
#: O's config keys (L143-148) by the names H uses (L104-109)
_O_KEYS = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M"}
CONSTRAINTS = ShapeConstraints(bias=False, note="w8a8_block_fp8_matmul: any M, K, N (masked); no bias")
CUTLASS_CONSTRAINTS = ShapeConstraints(
    k_multiple=16, n_multiple=16, bias=False, note="cutlass_scaled_mm: b.stride(1) % 16, c.stride(0) % 16; no bias"
)


def default_tiles(m: int, n: int, k: int, bn: int, bk: int) -> dict:
    """The config without a tuned entry (H L93-100, O L27-34): BLOCK_M 64, BLOCK_N bn, BLOCK_K bk."""
    return {"BLOCK_M": 64, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 32, "num_warps": 4, "num_stages": 2}


def _label(cfg: dict) -> str:
    return (
        f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} g{cfg['GROUP_M']} w{cfg['num_warps']} s{cfg['num_stages']}"
    )


def _common(name: str, a, b, scale_a, scale_b, out_dtype, bias, block_size, sizes) -> tuple[int, int, int]:
    m, k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, "e4m3", block_size)
    if bias is not None:
        raise OperandError(f"{name}: the FlagGems block kernel takes no bias")
    if (int(block_size[0]), int(block_size[1])) not in sizes:
        raise OperandError(f"{name}: block_size {tuple(block_size)} is not one of {sizes}")
    trace.record_operands(a, b, scale_a, scale_b, bias)
    return m, k, n


def block_fp8_api(
    entry: Callable, tiles: Callable = default_tiles, variant: str = "hopper", fused: bool = True, **rec: Any
) -> Callable:
    """``scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None, block_size)`` -> ``entry(a, b, scale_a, scale_b,
    [bn, bk], out_dtype)`` (w8a8_block_fp8_matmul's signature); ``tiles(m, n, k, bn, bk)`` the library's config
    choice, recorded with the path. OperandError (one line): a bias, an undeclared block size."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
        m, k, n = _common("flaggems-block-fp8", a, b, scale_a, scale_b, out_dtype, bias, block_size, SIZES)
        bn, bk = int(block_size[0]), int(block_size[1])
        cfg = tiles(m, n, k, bn, bk)
        form = "per-block" if cfg["BLOCK_K"] == bk else f"per-{cfg['BLOCK_K']}-tile (not the declared form)"
        path = f"flaggems/w8a8_block_fp8_matmul/{variant}/block{bn}x{bk}/scale-{form}"
        trace.record_path(path, config=_label(cfg), fp_fusion=fused, max_num_imprecise_acc=2**30, **rec)
        return entry(a, b, scale_a, scale_b, [bn, bk], out_dtype)

    scaled_mm.__name__ = scaled_mm.__qualname__ = "flaggems_block_fp8"
    return scaled_mm


def _only(tuner, tiles: tuple):
    (cfg,) = [c for c in tuner.configs if (c.kwargs["TILE_M"], c.kwargs["TILE_N"], c.num_stages, c.num_warps) == tiles]
    return one_config(tuner, cfg)


def cutlass_block_api(entry: Callable, tuner=None, sm: int = 90, fused: bool = True, **rec: Any) -> Callable:
    """``scaled_mm(...)`` -> ``entry(c, a, b.t(), scale_a, scale_b.t(), None)`` (cutlass_scaled_mm's signature,
    vLLM's [KB, NB] weight scales) on ``c = empty((M, N), out_dtype)``; ``tuner`` (None: a stand-in) pinned to
    :data:`CUTLASS_PINNED` in a conformance run. OperandError (one line): a bias, another size, ``sm`` not 9x."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
        name = "flaggems-cutlass-block-fp8"
        m, k, n = _common(name, a, b, scale_a, scale_b, out_dtype, bias, block_size, CUTLASS_SIZES)
        if not 90 <= sm < 100:
            raise OperandError(f"{name}: FlagGems cutlass_scaled_mm runs on sm_90 only (L496-512); this is sm_{sm}")
        bt = b.t() if b.t().stride(0) == 1 else b.contiguous().t()  # column-major [K, N] (L484)
        sb = scale_b.t()
        c = torch.empty((m, n), dtype=out_dtype, device=a.device)
        one_block = scale_a.numel() in (1, m) and sb.numel() in (1, n)  # the dispatch test, L371-373
        kernel = "sm90-pertensor-or-pertoken (one scale block: L371-373)" if one_block else "sm90-block-wise-128"
        pinned = tuner is not None and in_conformance_run() and not one_block
        with _only(tuner, CUTLASS_PINNED) if pinned else contextlib.nullcontext():
            entry(c, a, bt, scale_a, sb, None)
        cfg = "{}x{}x128 s{} w{}".format(*CUTLASS_PINNED) if pinned else "triton.autotune (timed)"
        trace.record_path(f"flaggems/{kernel}/e4m3", config=cfg, fp_fusion=fused, sm=sm, **rec)
        return c

    scaled_mm.__name__ = scaled_mm.__qualname__ = "flaggems_cutlass_block_fp8"
    return scaled_mm


def build_spec(
    name: str, entry: Callable, version: str = "standin", fused: bool = True, digest: Optional[str] = None, **kw: Any
) -> KernelSpec:
    """KernelSpec of ``name`` around ``entry`` (the library function or a stand-in of its signature); ``kw``:
    ``tiles`` / ``variant`` (flaggems-block-fp8), ``tuner`` / ``sm`` (flaggems-cutlass-block-fp8)."""
    dig = digest if digest is not None else callable_digest(entry)
    rec = dict(source_digest=dig, library=version)
    sizes: tuple = SIZES
    if name == "flaggems-block-fp8":
        variant = kw.get("variant", "hopper")
        fn = block_fp8_api(entry, kw.get("tiles", default_tiles), variant, fused, **rec)
        sizes, cons, dense = SIZES, CONSTRAINTS, () if variant == "hopper" else ("a",)  # O L174: A contiguous
        what = f"w8a8_block_fp8_matmul ({variant} Triton kernel)"
    elif name == "flaggems-cutlass-block-fp8":
        fn = cutlass_block_api(entry, kw.get("tuner"), int(kw.get("sm", 90)), fused, **rec)
        sizes, cons, dense, what = CUTLASS_SIZES, CUTLASS_CONSTRAINTS, ("a",), "cutlass_scaled_mm block-wise (sm_90)"
    else:
        raise KernelLoadError(f"unknown FlagGems block adapter {name!r}: one of {NAMES}")
    block = parse_block_declaration({"sizes": sizes, "accumulation": FUSED if fused else UNFUSED, "epilogue": EPILOGUE})
    return KernelSpec(
        name=name,
        scaled_mm=fn,
        contract=block_contract(block),
        devices=("cuda",),
        constraints=cons,
        version=version,
        source_digest=dig,
        origin=f"adapter:{name}",
        description=f"{version} {what}, fp fusion={fused}",
        contiguous_only=dense,
        warm_up=True,
        operands="e4m3",
        accumulator={"cuda": FP8_ACCUMULATOR},
        block=block,
    )


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of the real FlagGems function; ImportError without flag_gems; KernelLoadError with
    ``USE_FLAGTUNE=1`` (the hopper kernel would then pick its config by timing, H L158-175, L361)."""
    import flag_gems
    import triton

    version = f"flag_gems {importlib.metadata.version('flag_gems')} (triton {triton.__version__})"
    fused = triton_fp_fusion()
    if name == "flaggems-cutlass-block-fp8":
        fg = importlib.import_module("flag_gems.fused.cutlass_scaled_mm")
        tuner, sm, dig = fg._block_wise_smm_kernel, int(fg.SM_VERSION_NUM), module_digest(str(fg.__file__))
        return build_spec(name, fg.cutlass_scaled_mm, version, fused, dig, tuner=tuner, sm=sm)
    if os.environ.get("USE_FLAGTUNE") == "1":
        raise KernelLoadError("USE_FLAGTUNE=1: FlagGems would pick the block kernel's config by timing; unset it")
    fn = flag_gems.w8a8_block_fp8_matmul
    mod = inspect.getmodule(fn)  # H is imported by FlagGems under a sys.path entry of its own (``hopper.ops...``)
    if mod is None:
        raise KernelLoadError(f"flag_gems.w8a8_block_fp8_matmul: no module for {fn!r}")
    if hasattr(mod, "_get_fixed_matmul_meta"):  # the hopper module (H)
        meta = mod._get_fixed_matmul_meta

        def tiles(m, n, k, bn, bk):
            return meta(m, n, k, block_n=bn, block_k=bk)

        variant = "hopper-tma" if getattr(mod, "TMA_ON", False) else "hopper"
    else:  # O: the tuned yaml lookup (L111-159), else the default

        def tiles(m, n, k, bn, bk):
            cfgs = mod.get_w8a8_block_fp8_configs(n, k, bn, bk)
            if not cfgs:
                return default_tiles(m, n, k, bn, bk)
            c = cfgs[min(cfgs, key=lambda x: abs(x - m))]
            return {key: c[_O_KEYS.get(key, key)] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")} | {
                "num_warps": c["num_warps"],
                "num_stages": c["num_stages"],
            }

        variant = "generic"
    return build_spec(name, fn, version, fused, module_digest(str(mod.__file__)), tiles=tiles, variant=variant)
