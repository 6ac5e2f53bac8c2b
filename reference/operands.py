"""One W8A8 GEMM case (:class:`GemmOperands`), layout helpers and content digests (which let check C2 prove a kernel
received the very operands the reference used, DESIGN.md 5, F9, C2)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional, overload

import torch

from reference import memo

OPERAND_SCALE_MODES = ("own", "pow2", "synthetic")
#: Operand names in call order (``scaled_mm(a, b, scale_a, scale_b, bias=...)``).
OPERAND_NAMES = ("a", "b", "scale_a", "scale_b", "bias")
#: an asymmetric call's extra operands (``GemmOperands.azp_adj`` / ``azp``), passed by keyword
ZERO_POINT_NAMES = ("azp_adj", "azp")


def storage_span(t: torch.Tensor) -> int:
    """Storage elements from a view's first to its last: ``1 + sum((size_i - 1) * stride_i)`` (0 when empty)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.stride()))


@overload
def copy_keep_layout(t: torch.Tensor, device=None) -> torch.Tensor: ...
@overload
def copy_keep_layout(t: None, device=None) -> None: ...
@overload
def copy_keep_layout(t: Optional[torch.Tensor], device=None) -> Optional[torch.Tensor]: ...
def copy_keep_layout(t: Optional[torch.Tensor], device=None) -> Optional[torch.Tensor]:
    """A copy of ``t`` (None -> None), optionally on ``device``, with the same shape, strides and the bytes between its
    elements (the padding of a ``x[:, :K]`` view), storage offset 0, never sharing memory with ``t``. ``clone()`` /
    ``to()`` would make the view dense and hide a kernel that ignores a padded leading stride."""
    if t is None:
        return None
    src = t
    t = t.detach()
    dev = t.device if device is None else torch.device(device)
    if t.numel() == 0 or t.is_contiguous():
        out = t.to(dev, copy=True).contiguous() if t.numel() == 0 else t.to(dev, copy=True)
    else:
        span = t.as_strided((storage_span(t),), (1,), t.storage_offset())
        flat = span.to(dev, copy=True)
        out = flat.as_strided(tuple(t.shape), tuple(t.stride()), 0)
    memo.note_copy(src, out)  # same bits: a known digest carries over (reference.memo)
    return out


def layout_label(t: Optional[torch.Tensor]) -> str:
    """Layout name for manifests and coverage: ``none``, ``scalar`` (0-d or one element), ``dense``,
    ``row-major padded`` (2-D, unit inner stride, leading stride > columns), ``column-major`` (a ``w.t()`` view, dense
    or padded; matrices with two dims > 1), ``broadcast`` (a zero stride on a dim > 1), or ``strided`` (anything else).
    """
    if t is None:
        return "none"
    if t.numel() <= 1:
        return "scalar"
    if t.is_contiguous():
        return "dense"
    if any(int(s) == 0 and int(n) > 1 for n, s in zip(t.shape, t.stride())):
        return "broadcast"
    if t.dim() == 2 and min(int(v) for v in t.shape) > 1:
        r, c = (int(v) for v in t.shape)
        s0, s1 = (int(v) for v in t.stride())
        if (c <= 1 or s1 == 1) and s0 >= c:
            return "row-major padded"
        if (r <= 1 or s0 == 1) and s1 >= r:
            return "column-major"
    return "strided"


def tensor_digest(t: Optional[torch.Tensor]) -> str:
    """SHA-256 hex of ``f"{dtype};{d0,d1,...};"`` (``str(t.dtype)``, dims comma-joined, empty for 0-d) followed by the
    row-major little-endian element bytes: equal digests mean equal dtype, shape and bits, whatever the strides or
    device. None -> ``"none"``. Inside a memo scope a tensor built by a recorded recipe carries its
    :func:`derived_digest` (copies noted with ``memo.note_copy`` share it)."""
    if t is None:
        return "none"
    return memo.cached("digest", (t,), lambda: _digest_or_source(t))


def derived_digest(t: torch.Tensor, sources: tuple, recipe: str) -> str:
    """Digest of ``t`` built deterministically from ``sources`` by ``recipe`` (text fixing everything else), stored for
    ``t`` in the open memo scope: SHA-256 of ``f"{dtype};{shape};derived;{source digests};{recipe}"``."""
    shape = ",".join(str(int(s)) for s in t.shape)
    parts = ",".join(tensor_digest(s) for s in sources)
    d = hashlib.sha256(f"{t.dtype};{shape};derived;{parts};{recipe}".encode("ascii")).hexdigest()
    memo.remember("digest", (t,), d)
    return d


def _digest_or_source(t: torch.Tensor) -> str:
    """The digest of the tensor ``t`` is a fresh copy of (``memo.copy_source``), else of ``t`` itself."""
    src = memo.copy_source(t)
    return _digest(t) if src is None else tensor_digest(src)


def tensor_digests(tensors: list, threads: int = 0) -> list[str]:
    """:func:`tensor_digest` of each of ``tensors`` (the same strings, None -> ``"none"``); those not already known in
    the open memo scope are hashed in up to ``threads`` threads (0: one per CPU core, at most 16; hashlib releases the
    GIL on large buffers) and remembered there."""
    todo = {id(t): t for t in tensors if t is not None}
    todo = [t for t in todo.values() if memo.peek("digest", (t,)) is None and memo.copy_source(t) is None]
    n = min(len(todo), threads or min(16, os.cpu_count() or 1))
    if n <= 1:
        return [tensor_digest(t) for t in tensors]
    with ThreadPoolExecutor(n) as pool:
        computed = dict(zip((id(t) for t in todo), pool.map(_digest, todo)))
    for t in todo:
        memo.remember("digest", (t,), computed[id(t)])
    return [computed[id(t)] if t is not None and id(t) in computed else tensor_digest(t) for t in tensors]


def _digest(t: torch.Tensor) -> str:
    h = hashlib.sha256()
    shape = ",".join(str(int(s)) for s in t.shape)
    h.update(f"{t.dtype};{shape};".encode("ascii"))
    flat = t.detach().to("cpu").reshape(-1)
    if flat.numel() and flat.stride() != (1,):
        # a dense copy with stride 1 (``contiguous()`` keeps the stride of a size-1 view)
        flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
    if flat.numel():
        h.update(flat.view(torch.uint8).numpy())  # the element bytes, read in place
    return h.hexdigest()


@dataclass
class GemmOperands:
    """Operands of one ``scaled_mm`` call (DESIGN.md 3); no validation here (``reference.validate``).

    ``a``: int8 [M, K], row-major (leading stride >= K), per-token quantized; ``b``: int8 [N, K] (row-major or the
    transposed view of a [K, N] buffer), per-channel; ``scale_a``: float32 [M] / [M, 1] / scalar; ``scale_b``: float32
    [N] / [N, 1] / scalar; ``bias``: None or [N] of ``out_dtype`` (bf16 default, fp16, fp32); ``name``: case label;
    ``scale_mode``: ``"own"``, ``"pow2"`` or ``"synthetic"``; ``meta``: JSON-able extras. ``block_size``: a
    block-scaled call's ``(block_n, block_k)`` (``reference.block``: scale_a [M, ceil(K/block_k)], scale_b
    [ceil(N/block_n), ceil(K/block_k)], passed to the kernel as ``block_size=``); None: per-token x per-channel.
    ``azp_adj`` / ``azp``: an asymmetric-activation call's zero-point operands (``reference.asymmetric``: azp_adj int32
    [N], azp None for per-tensor or int32 [M] per-token; passed as ``azp_adj=`` / ``azp=``); None: symmetric."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    bias: Optional[torch.Tensor] = None
    out_dtype: torch.dtype = torch.bfloat16
    name: str = ""
    scale_mode: str = "synthetic"
    meta: dict = field(default_factory=dict)
    block_size: Optional[tuple] = None
    azp_adj: Optional[torch.Tensor] = None
    azp: Optional[torch.Tensor] = None

    @property
    def zero_point(self) -> Optional[str]:
        """``"per-tensor"`` / ``"per-token"`` for an asymmetric call (``azp_adj`` given), else None."""
        if self.azp_adj is None:
            return None
        return "per-tensor" if self.azp is None else "per-token"

    @property
    def m(self) -> int:
        return int(self.a.shape[0])

    @property
    def k(self) -> int:
        return int(self.a.shape[1])

    @property
    def n(self) -> int:
        return int(self.b.shape[0])

    def digests(self) -> dict[str, str]:
        """``{"a", "b", "scale_a", "scale_b", "bias"}`` -> :func:`tensor_digest`."""
        return {k: tensor_digest(getattr(self, k)) for k in OPERAND_NAMES}

    def layouts(self) -> dict[str, str]:
        """``{operand name: layout_label(tensor)}`` for the five operands."""
        return {k: layout_label(getattr(self, k)) for k in OPERAND_NAMES}

    def to(self, device) -> "GemmOperands":
        """Operands on ``device`` (meta shallow-copied); tensors elsewhere are moved with :func:`copy_keep_layout`."""
        dev = torch.device(device)

        def mv(t):
            if t.device == dev or (dev.index is None and t.device.type == dev.type):
                return t
            return copy_keep_layout(t, dev)

        return self._map(mv)

    def dense(self) -> "GemmOperands":
        """Copy with every tensor contiguous (what a ``contiguous_only`` kernel is handed)."""
        return self._map(lambda t: t.detach().contiguous().clone())

    def _map(self, fn) -> "GemmOperands":
        """A copy with ``fn`` applied to every tensor operand (None stays None) and ``meta`` shallow-copied."""
        kw = {k: None if getattr(self, k) is None else fn(getattr(self, k)) for k in OPERAND_NAMES + ZERO_POINT_NAMES}
        return dataclasses.replace(self, **kw, meta=dict(self.meta))

    def __repr__(self) -> str:
        return (
            f"GemmOperands(name={self.name!r}, M={self.m}, K={self.k}, N={self.n}, "
            f"out_dtype={self.out_dtype}, bias={'yes' if self.bias is not None else 'no'}, "
            f"scale_mode={self.scale_mode!r}"
            + (f", block_size={tuple(self.block_size)}" if self.block_size is not None else "")
            + (f", zero_point={self.zero_point!r})" if self.zero_point is not None else ")")
        )
