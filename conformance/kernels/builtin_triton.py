"""Built-in kernel ``triton``: a Triton int8 GEMM with a fused epilogue.

Declared contract: ``reference.contract.TRITON_STYLE`` (vLLM's Triton
``scaled_mm``): ``y = (float32(acc) * s_a) * s_w``, rounded RNE to out_dtype,
then ``rnd(float32(y) + float32(bias))`` (bias added after the rounding, in
float32, rounded RNE again). The kernels themselves, their readable torch
equivalent and why bf16 is rounded with integer ops (the Triton interpreter
truncates fp32 -> bf16) are in ``conformance.kernels.triton_gemm``.

Modes (reported by ``trace.record_path``):
  * ``"triton-native"``: CUDA tensors, ``triton.jit`` compiled kernels
    (``enable_fp_fusion=False`` so no multiply-add is contracted into an FMA).
  * ``"triton-interpreter"``: CPU tensors, the same Python function run by
    ``triton.runtime.interpreter.InterpretedFunction`` (numpy). We build the
    interpreted kernel object explicitly instead of relying on the
    ``TRITON_INTERPRET=1`` environment variable: Triton 3.x reads that variable
    (``triton.knobs.runtime.interpret``) when ``@triton.jit`` *decorates* a
    function, so setting it after this module is imported would be too late
    and setting it globally would also switch other users' kernels. If the
    user did set ``TRITON_INTERPRET=1``, ``triton.jit`` itself returns an
    interpreted function; we detect that and report ``triton-interpreter``
    even for CUDA tensors (the interpreter copies them to the host).

Configurations (native): candidate tile configurations per *shape bucket* --
``decode`` (M <= 16: narrow M tiles, split-K for large K), ``small``
(M <= 256) and ``large`` (TMA loads, 128x256 tiles, persistent variants) --
are timed once per key ``(device, next power of two of M, N, K, layout
class)`` end to end (CUDA events around back-to-back calls: what a caller
pays, host launch cost and GPU time, so a variant whose host cost -- e.g.
building TMA descriptors -- exceeds its GPU gain loses); the fastest
is cached for the process (:func:`tuning_table`) and shared by the output
dtype / bias variants of the key (same main loop). Shapes below
``AUTOTUNE_MIN_MACS`` multiply-accumulates, calls made while a CUDA graph is
being captured, and ``INT8CONF_TRITON_AUTOTUNE=0`` use the bucket's first
(heuristic) configuration without timing, or, when its tiles would occupy
less than half of the multiprocessors, the split-K candidate with the fewest
K blocks per program (:func:`_untuned`). Every configuration gives the same
bits (the accumulator is exact and order-free; the epilogue is one code path),
so tuning changes speed only. Interpreter: fixed small tiles, no tuning.
A third kernel, ``gluon`` (``conformance.kernels.gluon_gemm``: the int32-accumulator
wgmma kept in flight across K steps, which Triton's own pipeliner never does, and
the same epilogue written in Gluon), joins the small and large buckets on an sm_90
device (:data:`GLUON_CONFIGS`; ``INT8CONF_TRITON_GLUON=0`` leaves it out). On the
H200 it took 8192^3 from 1,136 to 1,367 TOPS, bits identical. Its warp-specialised
ping-pong variant (``gluon_gemm.w8a8_mm_gluon_ws``, :data:`GLUON_WS_CONFIGS`, labels
ending in ``ws``) joins the large bucket too (``INT8CONF_TRITON_GLUON_WS=0`` leaves it
out) and took 8192^3 to 1,513 TOPS on the H200 (2026-12-02), bits identical
(reports/bench/nvidia-h200/README.md).

Host path: everything that does not change between calls (kernel object,
configuration, grid shape, the manifest details handed to ``trace``) is cached
per key; a call does metadata-only validation (dtypes, shapes, devices: no
value scans, no host-device sync) by one dictionary lookup on a flat metadata
key, allocates the output and launches. The first launch of a cached call goes
through ``kernel[grid](...)`` (Triton binds and specialises the arguments,
compiles or finds the kernel) and keeps the returned ``CompiledKernel``;
later calls whose pointers are 16-byte aligned (Triton specialised on that)
call its launcher directly (``CompiledKernel.run``: no per-launch binding,
specialisation key, cache lookup or empty launch-hook calls; hooks a
profiler installed are still called). TMA descriptors are rebuilt per call
from cached, validated fields. Operand digests for check C2 are taken by the conformance runner
(``conformance.kernels.runner``), not here; ``trace.record_path`` is a
context-variable lookup outside a conformance capture. Value checks (NaN /
inf scales) are the runner's ``reference.validate.validate_operands``; zero
scales are legal (an all-zero activation row quantizes to scale 0).
A call is CUDA-graph capturable once its key has been tuned (or when tuning
is off): no allocation outside the graph pool, no sync, no host read-back.

Layouts: ``a`` and ``b`` are addressed through their strides (a row-major view
with a padded leading stride such as ``x[:, :K]``, ``b`` as the transposed
view of a ``[K, N]`` buffer -- vLLM's column-major weight -- or any other
strided view); scales ``[M]``, ``[M,1]`` or scalars, contiguous or not, are
read through their element stride (0 for a scalar); bias through its stride.
Nothing is assumed contiguous, and nothing is copied except in one case: natively,
when K is not a multiple of 16 and the GEMM is large (M*N*K >= :data:`PAD_K_MIN_MACS`)
or will not be tuned (``INT8CONF_TRITON_AUTOTUNE=0``), ``a`` and ``b`` are copied into
zero-padded ``[M, K']`` / ``[N, K']`` buffers, K' the next multiple of 16
(:func:`_padded_k`, :func:`_pad_k`). Triton specialises integer arguments on
divisibility by 16; without it neither the row stride nor the K mask allows vector
loads. The zero products add nothing to the exact int32 sums, so the bits are
unchanged; the copy costs (M + N) * K' bytes of traffic and memory and two launches
per call. Measured on the H200 (reports/bench/nvidia-h200/probe-2026-12-02/odd_k*.log,
bits identical everywhere): tuned, 512x2,049x6,144 518 -> 73 us, while at small
shapes the tuner's choice for the odd K beats the copy (1x2,047x6,144 19 against 55 us;
64x8,195x320 59 against 73); untuned, 20-45x at 4096x4,097x4096 and 16x131,073x16,
and 1.0-7x at the small shapes.

The manifest ``extra`` carries the configuration that ran and, in
interpreter mode, the measured interpreter semantics of every epilogue step
(``conformance.kernels.triton_probe.probe``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import triton
from torch import Tensor

from conformance.kernels import gluon_gemm, trace, triton_gemm
from reference.contract import TRITON_STYLE
from reference.errors import OperandError

CONTRACT = TRITON_STYLE
#: int32 overflow behaviour (KernelSpec.overflow), per device. Interpreter
#: (CPU): ``acc += tl.dot(a, b)`` on numpy int32 wraps two's complement
#: (M = N = 1, K = 131,073, all -128 gives -2147467264 = wrap32(2**31 + 16384),
#: tests/conformance/kernels/test_triton_layouts.py). Native CUDA (measured on
#: the H200, triton 3.6, 17 x K x 16 all -128, K = 131,073): one K range per
#: tile clamps its partial sums (2**31 - 1; with 20,000 products of -16,256
#: after the positives: exact - 1, the sum clamped once at a BLOCK_K boundary),
#: while split-K tiles are added with wrapping int32 atomics (-2147467264; the
#: mixed case exact): no single rule holds, so nothing is promised.
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

    Attributes:
        kernel: ``"ptr"`` (:func:`triton_gemm.w8a8_mm`), ``"tma"``
            (:func:`triton_gemm.w8a8_mm_tma`, CUDA, aligned K-contiguous a, b)
            or ``"gluon"`` (:func:`gluon_gemm.w8a8_mm_gluon`: the same operands,
            CUDA sm_90 only; :data:`GLUON_CONFIGS`).
        block_m, block_n, block_k: tile sizes (each >= 16, powers of two).
        group_m: row-tiles per group in the grouped program order.
        split_k: K ranges reduced in parallel (``ptr`` only; exact, see
            ``triton_gemm``).
        num_warps, num_stages: Triton launch options (software pipelining depth;
            ``gluon``: the kernel's own ring depth ``STAGES``).
        persistent: ``tma`` / ``gluon`` only: one program per SM walking tiles.
        flatten: ``tma`` persistent only: ``tl.range(flatten=True)``.
        warp_spec: ``tma``: compiler warp specialisation (producer /
            consumer warps) of the tile loop (persistent) or the K loop.
            ``gluon``: the hand-written ping-pong kernel
            :func:`gluon_gemm.w8a8_mm_gluon_ws` (a TMA producer warp, two
            consumer warp groups with a [block_m, block_n] tile each;
            ``num_warps`` 4 = the default partition, one consumer;
            :data:`GLUON_WS_CONFIGS`).
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
        s = (
            f"{self.kernel} {self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} "
            f"{sk}w{self.num_warps} s{self.num_stages}"
        )
        return (
            s
            + (" persistent" if self.persistent else "")
            + (" flat" if self.flatten else "")
            + (" ws" if self.warp_spec else "")
        )


def _c(kernel, bm, bn, bk, g, sk, w, s, persistent=False, flatten=False, ws=False) -> Config:
    return Config(kernel, bm, bn, bk, g, sk, w, s, persistent, flatten, ws)


#: the plain autotuned Triton GEMM's configuration space (conformance.bench.gemm
#: PLAIN_CONFIGS: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages; GROUP_M 8), included
#: in the small and large buckets so the tuner never has only worse choices
_PLAIN_SPACE = (
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
    """``cfgs`` followed by the pointer-kernel twins of ``_PLAIN_SPACE`` not in it."""
    extra = tuple(_c("ptr", bm, bn, bk, 8, 1, w, s) for bm, bn, bk, w, s in _PLAIN_SPACE)
    return cfgs + tuple(c for c in extra if c not in cfgs)


#: candidate configurations per bucket, heuristic default first. Chosen from a
#: sweep on the H200 (reports/bench/ explains); every one is exact.
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
            # (no "tma 128x128x128 g8 sk1 w4 s4 persistent ws": on the H200 with Triton
            # 3.6 it never finishes -- the bench's probe timed it out at 4096^3, and a
            # native conformance run stalled in the tuner at 512x2048x6144)
            _c("tma", 256, 128, 128, 8, 1, 8, 3, persistent=True, ws=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 3, ws=True),
            _c("tma", 128, 256, 128, 8, 1, 8, 4, ws=True),
            # two programs per SM (sm_90 compile, Triton 3.6: <= 190 registers at 4 warps or
            # 124 at 8, 96 KiB shared): Triton never keeps an int32-accumulator wgmma in
            # flight across K steps (each step ends in wgmma.wait_group 0), so a second
            # resident program is what can fill that drain and the epilogue
            # (reports/bench/nvidia-h200/probe-2026-12-01f/NOTE.md)
            _c("ptr", 128, 128, 128, 8, 1, 8, 3),
            _c("ptr", 128, 128, 128, 8, 1, 4, 3),
            _c("tma", 128, 128, 128, 8, 1, 4, 3),
            _c("ptr", 128, 128, 64, 8, 1, 4, 4),
        )
    ),
}

#: Gluon candidates (``gluon_gemm``: the int32-accumulator wgmma kept in flight
#: across K steps, which Triton's own pipeliner never does -- reports/bench/
#: nvidia-h200/probe-2026-12-01f/NOTE.md). They join the end of their bucket's
#: candidates when this Triton has Gluon's Hopper API (``gluon_gemm.AVAILABLE``) and
#: the device is sm_90, unless ``INT8CONF_TRITON_GLUON=0`` (:func:`_gluon_enabled`,
#: read when a key is first planned). On the H200 (2026-12-01g): every one exact on
#: the probe's edge shapes (every output kind, bias, int32; first and cached launch),
#: native ``pytest --kernel=triton`` 902 passed with them, and the bench picked
#: ``gluon 128x256x128 g8 w8 s4`` at 8192^3 (1,367 TOPS against 1,136 for the best
#: Triton schedule); the s4 ring (192 KiB) measured 2-3 % faster than s3
#: (probe-2026-12-01g).
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

#: Warp-specialised ping-pong Gluon candidates (``gluon_gemm.w8a8_mm_gluon_ws``: one
#: TMA producer warp, two consumer warp groups alternating on the tensor cores, each
#: with its own [block_m, block_n] tile, so one group's epilogue runs under the other's
#: main loop). Added offline (2026-12-01g: reports/bench/nvidia-h200/probe-2026-12-01g/
#: NOTE.md); first run on the H200 2026-12-02 (probe_ws-h200.log there): all four
#: configurations then tried were bit-identical on the probe's edge shapes, and at 8192^3
#: s6 ran 1,377 TOPS, s4 1,320, the BLOCK_K-64 rings 1,104 (s8) and 1,032 (s10) against
#: 1,197 for the best non-ws Gluon one in the same process; the two slow BLOCK_K-64
#: ones were dropped. With these on, native ``pytest --kernel=triton`` 902 passed and
#: the bench picked s6 at every shape Gluon won (8192^3: 1,513 TOPS). They join the
#: large bucket on the devices :func:`_gluon_enabled` admits, unless
#: ``INT8CONF_TRITON_GLUON_WS=0`` (:func:`_gluon_ws_enabled`).
#: ``num_warps`` 4 is the default partition (consumer 0); the kernel launches 12 warps.
#: Shared memory: STAGES * (block_m + block_n) * block_k bytes of ring (<= 227 KiB).
GLUON_WS_CONFIGS: dict[str, tuple[Config, ...]] = {
    "large": (
        _c("gluon", 128, 128, 128, 8, 1, 4, 6, persistent=True, ws=True),  # 192 KiB
        _c("gluon", 128, 128, 128, 8, 1, 4, 4, persistent=True, ws=True),  # 128 KiB
    )
}

#: configuration labels never tried (``exclude_configs`` or the environment
#: variable ``INT8CONF_TRITON_EXCLUDE``, labels separated by ``;``): e.g. a
#: variant that crashes this Triton build's compiler (a crash is not an
#: exception the tuner could catch)
_EXCLUDED: set = {x.strip() for x in os.environ.get("INT8CONF_TRITON_EXCLUDE", "").split(";") if x.strip()}


def exclude_configs(labels) -> None:
    """Never try the configurations with these :meth:`Config.label` s again
    in this process (the tuning of keys already decided is kept)."""
    _EXCLUDED.update(labels)


def bucket(m: int) -> str:
    """Shape bucket of M: ``decode`` (<= 16), ``small`` (<= 256), ``large``."""
    return "decode" if m <= 16 else ("small" if m <= 256 else "large")


def _interp_tile(size: int, small: int, limit: int) -> int:
    """An interpreter block: ``small`` up to 16 blocks of it, then a power of two
    >= size / 4 (at most ``limit``): the interpreter's cost is per program and
    per K step, numpy's per element."""
    if size <= 16 * small:
        return small
    return min(limit, 1 << (-(-size // 4) - 1).bit_length())


#: the interpreter's largest block (``triton`` refuses tensors of more elements)
INTERP_MAX_NUMEL = 1 << 20


def _interp_config(m: int, n: int, k: int = 0, split_k: int = 1) -> Config:
    """Interpreter tiles: as small as tl.dot allows (>= 16) for small M / N,
    K blocks of 128 (of K rounded up to a power of two below that: numpy's
    integer matmul pays for masked K too); long M, N or K in
    at most ~4 blocks (:func:`_interp_tile`), every block of at most
    :data:`INTERP_MAX_NUMEL` elements."""
    bk = _interp_tile(k, 128, 4096) if k > 128 else max(16, 1 << (k - 1).bit_length())
    bm = 16 if m <= 16 else (32 if m <= 32 else _interp_tile(m, 64, INTERP_MAX_NUMEL // bk))
    bn = 16 if n <= 16 else (32 if n <= 32 else _interp_tile(n, 64, INTERP_MAX_NUMEL // bk))
    while bm * bn > INTERP_MAX_NUMEL:
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    return Config("ptr", bm, bn, bk, 4, split_k, 4, 1)


# ----------------------------------------------------------------- kernels
_KERNELS: dict = {}


def _kernel_name(cfg: Config) -> str:
    """The :func:`_kernel` name of ``cfg``: its ``kernel``, or ``"gluon_ws"`` for a
    ``gluon`` configuration with ``warp_spec`` (the ping-pong kernel)."""
    return "gluon_ws" if cfg.kernel == "gluon" and cfg.warp_spec else cfg.kernel


def _kernel(name: str, native: bool):
    """(kernel object, is_interpreter) for ``name`` in ``{"ptr", "tma", "gluon",
    "gluon_ws"}`` (:func:`_kernel_name`), built once (``gluon`` / ``gluon_ws``: native
    only, already ``GluonJITFunction`` s)."""
    key = (name, native)
    got = _KERNELS.get(key)
    if got is None:
        from triton.runtime.interpreter import InterpretedFunction

        if name in ("gluon", "gluon_ws"):
            if not (native and gluon_gemm.AVAILABLE):
                raise ValueError(
                    "the gluon kernel needs CUDA and a Triton with Gluon's Hopper "
                    "API (conformance.kernels.gluon_gemm.AVAILABLE)"
                )
            fn = gluon_gemm.w8a8_mm_gluon_ws if name == "gluon_ws" else gluon_gemm.w8a8_mm_gluon
            got = _KERNELS[key] = (fn, False)
            return got
        fn = triton_gemm.w8a8_mm if name == "ptr" else triton_gemm.w8a8_mm_tma
        if not native:
            _skip_dead_overflow_checks()
        k = triton.jit(fn) if native else InterpretedFunction(fn)
        got = _KERNELS[key] = (k, isinstance(k, InterpretedFunction))
    return got


def _skip_dead_overflow_checks() -> None:
    """Turn the interpreter's integer-overflow sanitizer off while ``debug`` is off.

    The interpreter recomputes every integer add / sub / mul in int64 to build a
    ``device_assert`` that it then drops unless ``debug`` is on (triton
    ``semantic.device_assert``), so the sanitizer changes no bit and no error,
    and took half of an interpreted call's time (cProfile, 135 ``k_residues``
    cases). Affects every interpreted kernel of the process; a no-op with debug on.
    """
    from dataclasses import replace

    from triton.runtime import interpreter

    opts = interpreter.interpreter_builder.options
    if not opts.debug and opts.sanitize_overflow:
        interpreter.interpreter_builder.options = replace(opts, sanitize_overflow=False)


@contextlib.contextmanager
def _quiet_ieee_overflow():
    """Silence numpy's "overflow encountered in cast/multiply/add"
    RuntimeWarnings raised inside the Triton interpreter only.

    The interpreter emulates float32 ops with numpy; an IEEE overflow there
    (``acc * s_a * s_w`` beyond float32 max with large scales, float32 ->
    float16 beyond 65504, bf16 bias add at the top of the range) yields ±inf,
    exactly what the contract and the reference (``reference.epilogue``:
    "Overflow gives ±inf per IEEE") require and what native Triton does
    silently; numpy merely announces it. Checked benign: the hypothesis
    property test with "large" scales matches the reference bit for bit
    with these warnings. Other warnings, and these from any other module,
    still show.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"overflow encountered in (cast|multiply|add)",
            category=RuntimeWarning,
            module=r"triton\.runtime\.interpreter",
        )
        yield


# ------------------------------------------------------------- validation
def _bad(msg: str):
    raise OperandError(msg)


def _dense_cpu_or_cuda(x: Tensor, name: str) -> None:
    """One-line OperandError unless ``x`` is a dense (strided) CPU or CUDA tensor
    (a sparse or meta one would fail deep inside torch or Triton)."""
    if x.layout != torch.strided:
        _bad(f"{name} has layout {x.layout}; expected a dense (torch.strided) tensor")
    if x.device.type not in ("cpu", "cuda"):
        _bad(f"{name} is on device {x.device}; expected a cpu or cuda tensor")


def _scale_stride(s, name: str, rows: int, rows_name: str, dev) -> tuple[Tensor, int]:
    """(tensor on ``dev``, element stride) of a scale: [rows], [rows,1] or a
    scalar ([] / [1]; stride 0). Metadata checks only (values: runner)."""
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


# ----------------------------------------------------------------- plans
@dataclass
class _Plan:
    """The configuration chosen for one tuning key, its kernel object, whether
    it was timed, and the manifest details for ``trace.record_path``."""

    config: Config
    kern: object
    interp: bool
    tuned: bool
    extra: dict


@dataclass
class _Call:
    """Everything about a call that depends only on operand metadata (cached
    per metadata key, so a repeated call only allocates and launches)."""

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
    #: the constexpr values in the kernel's parameter order (the raw launcher
    #: takes every parameter, constexprs included, as ``JITFunction.run`` passes them)
    tail: tuple = ()
    #: ``(CompiledKernel, grid)`` once a launch with 16-byte aligned pointers
    #: compiled / found it (native only): later aligned calls launch it directly
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
    extra = {
        "config": cfg.label(),
        "block_m": cfg.block_m,
        "block_n": cfg.block_n,
        "block_k": cfg.block_k,
        "split_k": cfg.split_k,
        "kernel_variant": _kernel_name(cfg),
        "persistent": cfg.persistent,
        "autotuned": tuned,
        "triton_version": triton.__version__,
        "final_rounding": "explicit-rne-bitops"
        if out_dtype == torch.bfloat16
        else ("cast-to-fp16" if out_dtype == torch.float16 else "none"),
        "source_digest": SOURCE_DIGEST,
        "digest_of": "triton",
        "device": device_type,
        "interpreter": interp,
    }
    if interp:
        from conformance.kernels.triton_probe import probe

        extra["interpreter_semantics"] = probe()
    return extra


def _tma_ok(a: Tensor, b: Tensor) -> bool:
    """TMA descriptors need unit inner strides, 16-byte aligned bases and
    leading strides (int8: multiples of 16), and K-contiguous b."""
    return (
        a.stride(1) == 1
        and b.stride(1) == 1
        and a.stride(0) % 16 == 0
        and b.stride(0) % 16 == 0
        and a.data_ptr() % 16 == 0
        and b.data_ptr() % 16 == 0
        and a.shape[1] % 16 == 0
    )


#: M*N*K from which a native call with K % 16 != 0 pads K even when tuned: the
#: crossover on the H200 lies between 2e8 (16x2,049x6,144: 28 us unpadded, 85 padded)
#: and 6.4e9 (512x2,049x6,144: 518 / 73; module docstring, "Layouts")
PAD_K_MIN_MACS = 1 << 30


def _padded_k(m: int, n: int, k: int, native: bool) -> int:
    """K' for :func:`_pad_k`, or 0 (no copy): the next multiple of 16 above ``k``
    when the call runs natively, ``k % 16 != 0``, and either ``m * n * k >=``
    :data:`PAD_K_MIN_MACS` or ``INT8CONF_TRITON_AUTOTUNE=0`` (an odd-K call with
    tuning off was 1.0-45x slower unpadded). The interpreter gains nothing from
    aligned strides."""
    if not native or k % 16 == 0:
        return 0
    if m * n * k < PAD_K_MIN_MACS and _autotune_enabled():
        return 0
    return (k + 15) // 16 * 16


def _pad_k(t: Tensor, k_padded: int) -> Tensor:
    """``t`` (int8 [R, K], any strides) copied into a new contiguous int8
    [R, ``k_padded``] tensor, zeros in columns K .. k_padded - 1, on t's device.
    Exact for the GEMM: a zero operand adds 0 to every partial sum."""
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
    """int32 split-K workspace + arrival counters, all zero between calls (the
    kernel restores zeros), one per device and stream (concurrent calls on
    different streams never share one)."""
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


def _layout(
    cfg: Config,
    interp: bool,
    a: Tensor,
    b: Tensor,
    sa_st: int,
    sb_st: int,
    bias: Optional[Tensor],
    out_dtype,
    m: int,
    n: int,
    k: int,
    int64: bool,
) -> tuple:
    """``(grid, integer args, keyword args, workspace words)`` of a launch of
    configuration ``cfg`` (all metadata; no tensor data)."""
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
    )
    ints = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), sa_st, sb_st, bias_st, n)
    return (tiles, sk), ints, kw, (m * n + tiles if sk > 1 else 0)


def _hooks() -> tuple:
    """Triton's launch hooks ``(enter, exit)`` when a profiler (e.g. proton)
    installed any, else ``(None, None)``. Triton 3.6+ keeps them as (usually
    empty) ``HookChain`` s; older versions as None or a callable."""
    rt = getattr(getattr(triton, "knobs", None), "runtime", None)
    enter = getattr(rt, "launch_enter_hook", None)
    leave = getattr(rt, "launch_exit_hook", None)
    if getattr(enter, "calls", True) or getattr(leave, "calls", True):
        return enter, leave
    return None, None


def _launch_raw(call: _Call, args: tuple) -> None:
    """Launch the cached ``CompiledKernel`` of ``call`` directly (what
    ``JITFunction.run`` does after its argument binding, specialisation key and
    cache lookup -- all fixed for this call's metadata and pointer alignment):
    ``CompiledKernel.run(grid..., stream, function, packed_metadata,
    launch_metadata, enter_hook, exit_hook, *every parameter)``, the same
    signature in Triton 3.6 and 3.9. On the current CUDA stream (graph-capturable)."""
    ck, grid = call.fast
    stream = _stream_id(call.device)
    enter, leave = _hooks()
    meta = None if enter is None else ck.launch_metadata(grid, stream, *args)
    ck.run(grid[0], grid[1], grid[2], stream, ck.function, ck.packed_metadata, meta, enter, leave, *args)


def _aligned(*ts) -> bool:
    """True when every tensor's data pointer is 16-byte aligned (Triton
    specialises pointer arguments on it, so a kernel compiled for aligned
    pointers may only be reused for aligned pointers)."""
    acc = 0
    for t in ts:
        acc |= t.data_ptr()
    return acc & 15 == 0


def _issue(call: _Call, a: Tensor, b: Tensor, sa, sb, bias, out: Tensor) -> None:
    """Launch ``call``'s kernel on these tensors, writing ``out``.

    Native: the first launch with 16-byte aligned pointers goes through
    ``kernel[grid](...)`` (compile or cache lookup) and keeps the returned
    ``CompiledKernel`` in ``call.fast``; later aligned launches skip Triton's
    per-launch binding and go straight to its launcher (:func:`_launch_raw`).
    Unaligned pointers (e.g. a view starting at an odd column) always take
    the full path, which specialises for them."""
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
            _launch_raw(call, args + call.tail)
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
        _launch_raw(call, (a, b, sa, sb, bias, out, ws, cnt) + call.ints + call.tail)
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
    """The positional arguments of a ``tma`` / ``gluon`` launch of ``call``:
    descriptors over ``a`` [M, K] and ``b`` [N, K] (:func:`_descriptor`), the
    scale / bias / output tensors as given, then the call's integers."""
    cfg = call.plan.config
    glu = cfg.kernel == "gluon"
    return (
        _descriptor(a, call.m, call.k, a.stride(0), cfg.block_m, cfg.block_k, glu),
        _descriptor(b, call.n, call.k, b.stride(0), cfg.block_n, cfg.block_k, glu),
        sa,
        sb,
        bias,
        out,
    ) + call.ints


def _descriptor(t: Tensor, rows: int, cols: int, ld: int, br: int, bc: int, gluon: bool = False):
    """Host TMA descriptor over ``t`` [rows, cols] (leading stride ``ld``, unit
    inner stride), block [br, bc] (``gluon``: Gluon's descriptor, which also carries
    the shared layout, ``gluon_gemm.descriptor``). The first one per layout is built
    through ``TensorDescriptor``'s own validation; later ones copy its fields and swap
    the base tensor (the validation is metadata-only and the layout, base
    alignment included, was checked by the caller)."""
    key = (rows, cols, ld, br, bc, gluon)
    fields = _TD_FIELDS.get(key)
    if gluon:
        TensorDescriptor = gluon_gemm.TensorDescriptor
    else:
        from triton.tools.tensor_descriptor import TensorDescriptor
    if fields is None:
        d = (
            gluon_gemm.descriptor(t, rows, cols, ld, br, bc)
            if gluon
            else TensorDescriptor(t, [rows, cols], [ld, 1], [br, bc])
        )
        _TD_FIELDS[key] = dict(vars(d))
        return d
    d = TensorDescriptor.__new__(TensorDescriptor)
    d.__dict__.update(fields)
    d.base = t
    return d


def _constexpr_tail(kern, kw: dict) -> tuple:
    """Values of the kernel's constexpr parameters (every parameter after the
    runtime ones), in declaration order, from the launch keywords."""
    names = [p.name for p in kern.params if p.is_constexpr]
    return tuple(kw[nm] for nm in names)


def _candidates(m: int, tma: bool, gluon: bool = False, gluon_ws: bool = False) -> list[Config]:
    """The bucket's configurations this call may use (TMA ones only when the
    operands allow TMA; none that is excluded), heuristic default first; with
    ``gluon`` (:func:`_gluon_enabled`) and TMA-able operands, the bucket's
    :data:`GLUON_CONFIGS` after them; with ``gluon_ws`` too
    (:func:`_gluon_ws_enabled`), then the bucket's :data:`GLUON_WS_CONFIGS`."""
    cands = BUCKET_CONFIGS[bucket(m)] + (GLUON_CONFIGS.get(bucket(m), ()) if gluon and tma else ())
    if gluon and gluon_ws and tma:
        cands += GLUON_WS_CONFIGS.get(bucket(m), ())
    return [c for c in cands if (tma or c.kernel not in _TMA_KERNELS) and c.label() not in _EXCLUDED]


_CAPABILITY: dict = {}


def _env_on(name: str) -> bool:
    """An on-by-default switch of the environment: off when ``name`` is ``0``,
    ``false``, ``no`` or ``off`` (any case, surrounding blanks ignored)."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def _gluon_enabled(dev: torch.device) -> bool:
    """Whether the Gluon candidates join the tuning on ``dev``: compute capability
    (9, 0) (the kernel is sm_90 wgmma code), ``gluon_gemm.AVAILABLE``, and
    ``INT8CONF_TRITON_GLUON`` not off (the opt-out: ``0``, ``false``, ``no`` or
    ``off``; :func:`_env_on`)."""
    return _env_on("INT8CONF_TRITON_GLUON") and gluon_gemm.AVAILABLE and _capability(dev) == (9, 0)


def _gluon_ws_enabled(dev: torch.device) -> bool:
    """Whether the warp-specialised Gluon candidates (:data:`GLUON_WS_CONFIGS`) join
    the tuning on ``dev``: :func:`_gluon_enabled` (sm_90, Gluon's Hopper API, no
    ``INT8CONF_TRITON_GLUON=0``) and ``INT8CONF_TRITON_GLUON_WS`` not off (their own
    opt-out)."""
    return _env_on("INT8CONF_TRITON_GLUON_WS") and _gluon_enabled(dev)


def _capability(dev: torch.device) -> tuple:
    """CUDA compute capability of ``dev`` (cached; ``()`` for a non-CUDA device)."""
    if dev.type != "cuda":
        return ()
    cap = _CAPABILITY.get(dev.index)
    if cap is None:
        cap = _CAPABILITY[dev.index] = tuple(torch.cuda.get_device_capability(dev))
    return cap


#: K blocks per program below which an untimed call keeps the default (a split
#: costs atomics and a workspace; short K loops are not worth it)
_SERIAL_K_BLOCKS = 16


def _untuned(cands: list, m: int, n: int, k: int, sms: int) -> Config:
    """Configuration of a call that is not timed (tuning off, a small shape, a
    CUDA-graph capture): the bucket's heuristic default, unless its tiles fill
    less than half of the ``sms`` multiprocessors while each program walks at
    least :data:`_SERIAL_K_BLOCKS` K blocks; then the ``ptr`` candidate
    with the fewest K blocks per program among those whose tiles x split-K
    fit on the multiprocessors (first in list order on a tie). E.g. the sweep's
    F6 window, 16 x 16 x ~131k: the default ``16x64x256 sk1`` is one program
    walking 513 K blocks; ``16x64x256 sk4`` is four programs of 129. Every
    candidate gives the same bits (exact integer split-K, ``triton_gemm``)."""

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


def _autotune_enabled() -> bool:
    return _env_on("INT8CONF_TRITON_AUTOTUNE")


class KernelHang(RuntimeError):
    """A launched configuration did not finish within the hang limit (a GPU
    kernel cannot be stopped from the host, so the process's later work on
    that device would wait behind it: the tuner re-raises instead of trying
    the next candidate)."""


def _hang_limit_s() -> float:
    """Seconds a tuning launch may take: ``INT8CONF_TRITON_HANG_S`` (default 60).

    Raises:
        ValueError: the variable is set but not a finite number > 0.
    """
    raw = os.environ.get("INT8CONF_TRITON_HANG_S", "60")
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not (0 < v < float("inf")):
        raise ValueError(f"INT8CONF_TRITON_HANG_S must be a number of seconds > 0, got {raw!r}")
    return v


def _wait(event, what: str, limit_s: Optional[float] = None) -> None:
    """Block until ``event`` (anything with ``query() -> bool``, e.g. a
    ``torch.cuda.Event``) completes, polling, like ``event.synchronize()``
    but bounded.

    Raises:
        KernelHang: not complete after ``limit_s`` seconds (default
            :func:`_hang_limit_s`); the message names ``what`` and how to
            exclude it (``INT8CONF_TRITON_EXCLUDE``).
    """
    limit = _hang_limit_s() if limit_s is None else limit_s
    t_end = time.monotonic() + limit
    pause = 1e-5
    while not event.query():
        if time.monotonic() > t_end:
            raise KernelHang(
                f"Triton configuration '{what}' did not finish within {limit:g} s "
                f"(a GPU hang); set INT8CONF_TRITON_EXCLUDE='{what}' to skip it"
            )
        time.sleep(pause)
        pause = min(pause * 2, 1e-2)


def _time_e2e(fn, batches: int = 5, what: str = "?") -> float:
    """Milliseconds per call as a caller sees it: CUDA events around
    back-to-back calls (host launch cost and GPU time, whichever bounds),
    median of ``batches`` batches of ~4 ms (5-400 calls).

    Raises:
        KernelHang: a batch did not finish within :func:`_hang_limit_s`.
    """
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
    """Time every candidate end to end (:func:`_time_e2e`: what a caller of
    ``scaled_mm`` pays, so a variant whose host cost -- e.g. building TMA
    descriptors -- exceeds its GPU gain loses) and return the fastest with the
    timings; a candidate that fails to compile or launch is dropped (its error
    kept in the timings).

    Raises:
        KernelHang: a candidate did not finish (not dropped: the device is
            stuck behind it, so every later candidate would time out too).
    """
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
    """The smallest power of two >= ``v`` (>= 1): a tuning key's size bin."""
    return 1 << max(0, (v - 1).bit_length())


def tuning_table() -> dict:
    """Tuning decisions of this process: ``{key string: {"config", "timings_ms"}}``."""
    return {str(k): dict(v) for k, v in _TUNING.items()}


def _build(
    a: Tensor, b: Tensor, scale_a, scale_b, bias, out_dtype, config: Optional[Config]
) -> tuple[_Call, bool, tuple]:
    """Slow path of a call: validate metadata, move stray operands to a's
    device, choose (and on first sight of a key, tune) the configuration.
    Returns ``(call, cacheable, (a, b, sa, sb, bias))``."""
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
                _bad(
                    f"bias must be a [{n}] tensor of dtype {out_dtype}, got "
                    f"{getattr(bias, 'dtype', type(bias).__name__)} "
                    f"{tuple(getattr(bias, 'shape', ()))}"
                )
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
            f"configuration '{config.label()}' needs an sm_90 CUDA device, a Triton "
            "with Gluon's Hopper API, split_k 1 and TMA-able operands (int8, "
            "M > 16, K-contiguous, 16-byte aligned base and row stride)"
        )
    mbin = _pow2_bin(m)
    pkey = (
        a.device.index if a.is_cuda else -1,
        native,
        mbin,
        n,
        k,
        _OUT_KIND.get(out_dtype, -1),
        bias is not None,
        tma,
        a.stride(1) == 1,
        b.stride(1) == 1,
        config,
    )
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
    # one tuning per (device, next powers of two of M, N, K, layout): the epilogue
    # variants (out dtype, bias) share the main loop, and neighbouring shapes
    # (e.g. the property test's random ones) share a tile choice, so they reuse
    # it (one compile each) instead of timing every candidate again
    tkey = pkey[:3] + (_pow2_bin(n), _pow2_bin(k)) + pkey[7:]
    if plan is None and config is None and tkey in _CHOSEN:
        plan = _PLANS[pkey] = plan_for(*_CHOSEN[tkey])
    if plan is None:
        if config is not None:
            cfg, tuned = config, False
        elif interp:
            cfg, tuned = _interp_config(m, n, k), False
        else:
            cands = _candidates(m, tma, _gluon_enabled(dev), _gluon_ws_enabled(dev)) or [BUCKET_CONFIGS["decode"][0]]
            cfg, tuned = _untuned(cands, m, n, k, _num_sms(dev)), False
            if not (capturing or not _autotune_enabled() or m * n * k < AUTOTUNE_MIN_MACS or len(cands) == 1):
                out = torch.empty((m, n), dtype=alloc, device=dev)
                with _TUNE_LOCK:
                    cfg, times = _tune(cands, make_call, (a, b, sa, sb, bias, out))
                _TUNING[tkey[:-1]] = {"config": cfg.label(), "timings_ms": times}
                tuned = True
                _CHOSEN[tkey] = (cfg, True)
        plan = plan_for(cfg, tuned)
        if not (capturing and not tuned and config is None):  # tune later, outside a capture
            _PLANS[pkey] = plan
    call = make_call(plan.config, plan)
    # not cacheable: operands moved to a's device (the copy is per call), or an
    # untuned stand-in chosen during a CUDA-graph capture (tune on the next eager call)
    cacheable = not moved and _PLANS.get(pkey) is plan
    return call, cacheable, (a, b, sa, sb, bias)


def _run(a: Tensor, b: Tensor, scale_a, scale_b, bias, out_dtype, config: Optional[Config] = None) -> Tensor:
    try:  # metadata key: a hit means these exact dtypes/shapes/strides/devices were validated
        # (building and hashing it is the dominant host cost of a repeated call, so it is
        # flat; ``device`` and ``layout`` are one attribute read each (~1.7 us for the key
        # on a CPU, timeit) and tell a meta or a sparse tensor -- whose stride() may equal
        # a broadcast dense one's -- from the dense CPU / CUDA tensor a cached call took)
        key = (
            a.dtype,
            a.shape,
            a.stride(),
            a.device,
            a.layout,
            b.dtype,
            b.shape,
            b.stride(),
            b.device,
            b.layout,
            None
            if scale_a is None
            else (scale_a.dtype, scale_a.shape, scale_a.stride(), scale_a.device, scale_a.layout),
            None
            if scale_b is None
            else (scale_b.dtype, scale_b.shape, scale_b.stride(), scale_b.device, scale_b.layout),
            None if bias is None else (bias.dtype, bias.shape, bias.stride(), bias.device, bias.layout),
            out_dtype,
            config,
        )
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
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] (a's device;
    CPU runs under the interpreter). Any strides.

    Raises:
        OperandError: wrong dtype / rank / K mismatch / empty (one line).
    """
    return _run(a, b, None, None, None, None)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """W8A8 GEMM, TRITON_STYLE epilogue: ``rnd(rnd((float32(acc) * s_a) * s_w) + bias)``.

    Args:
        a: int8 [M,K], any strides (e.g. ``x[:, :K]`` of a wider buffer);
        b: int8 [N,K], any strides (e.g. ``w_kn.t()`` of a [K,N] buffer);
            natively, a K that is not a multiple of 16 makes a call of
            M*N*K >= PAD_K_MIN_MACS, or any call with INT8CONF_TRITON_AUTOTUNE=0,
            copy both into zero-padded buffers (module docstring, "Layouts"; the
            manifest then records ``k_padded_to``);
        scale_a: float32 [M]|[M,1]|scalar (zeros legal; any stride);
        scale_b: float32 [N]|[N,1]|scalar; bias: out_dtype [N] or None;
        out_dtype: bfloat16 | float16 | float32.
    Returns:
        out_dtype [M,N] (contiguous) on a's device (CUDA: native; CPU: interpreter).
    Raises:
        OperandError: a dtype / rank / shape / K mismatch / out_dtype / bias
            problem (metadata only; value checks are the runner's), including
            ``out_dtype=None`` (the int32 accumulator is :func:`int_mm`'s).
    """
    if out_dtype is None:
        _bad(
            "out_dtype=None is not an output dtype of scaled_mm (one of torch.bfloat16, "
            "torch.float16, torch.float32); the int32 accumulator is int_mm(a, b)"
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
    """``scaled_mm`` with an explicit :class:`Config` instead of the tuned one
    (tests and the benchmark: e.g. split-K under the interpreter). ``out_dtype``
    None = accumulator only (int32). A ``tma`` config needs CUDA and aligned,
    K-contiguous operands; a ``gluon`` one also an sm_90 device and
    ``gluon_gemm.AVAILABLE`` (``INT8CONF_TRITON_GLUON`` does not apply: this is how
    the probe times it)."""
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
    """``(launch, out, config)`` for the benchmark's "bare launch" measurement:
    ``launch()`` re-issues the Triton launch a ``scaled_mm`` call with these
    operands makes -- same compiled kernel and configuration, every argument
    (TMA descriptors and split-K workspace included) precomputed, writing into
    ``out``; no validation, lookup or allocation.

    ``raw=False``: the standard launch ``kernel[grid](*args, **constexprs)``
    (Triton binds and specialises the arguments and looks the compiled kernel
    up on every launch). ``raw=True``: the compiled kernel's launcher itself
    (``CompiledKernel.run``, as :func:`_launch_raw`), the floor of any Triton
    launch from Python."""
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
    fake = _Call(
        call.plan,
        call.m,
        call.n,
        call.k,
        call.grid,
        call.ints,
        kw,
        call.alloc_dtype,
        call.ret_dtype,
        call.device,
        call.ws_words,
        tail=call.tail,
        fast=(ck, _grid3(call.grid)),
    )
    args = pos + call.tail
    return (lambda: _launch_raw(fake, args)), out, cfg


def available() -> tuple[bool, str]:
    """(True, "") -- triton imported; without CUDA the interpreter is used."""
    return True, ""
