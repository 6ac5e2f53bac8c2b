"""One W8A8 GEMM case: operands, scale mode, and content digests.

The digests let check C2 (operand_sharing) prove that a kernel received the
very operands the reference used (DESIGN.md sections 5, F9 and 6, C2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Optional

import torch

SCALE_MODES = ("own", "pow2", "synthetic")
#: Operand names in call order (``scaled_mm(a, b, scale_a, scale_b, bias=...)``).
OPERAND_NAMES = ("a", "b", "scale_a", "scale_b", "bias")


def storage_span(t: torch.Tensor) -> int:
    """Elements from a view's first to its last element in its storage:
    ``1 + sum((size_i - 1) * stride_i)`` (0 for an empty tensor)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.stride()))


def copy_keep_layout(t: Optional[torch.Tensor], device=None) -> Optional[torch.Tensor]:
    """A copy of ``t`` with the same shape, strides AND the bytes between its
    elements (the padding of a ``x[:, :K]`` view), optionally on another device.

    ``Tensor.clone()`` and ``Tensor.to(device)`` make a non-dense view dense,
    which would hide a kernel that ignores a padded leading stride; this copy
    keeps the storage span ``[first element, last element]`` of the view and
    re-creates the view on it (``as_strided``), so such a kernel reads the
    same padding it would read in the original.

    Args:
        t: any tensor (or None, returned as None).
        device: target device (None = ``t``'s device).

    Returns:
        New tensor, ``shape == t.shape``, ``stride() == t.stride()``,
        ``storage_offset() == 0``, equal bits; never shares memory with ``t``.
    """
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
    from reference import memo

    memo.note_copy(src, out)  # same bits: a known digest carries over (reference.memo)
    return out


def layout_label(t: Optional[torch.Tensor]) -> str:
    """Short name of an operand's memory layout, for manifests and coverage.

    Returns:
        ``none`` (absent), ``scalar`` (0-d or one element), ``dense``
        (contiguous), ``row-major padded`` (2-D, unit inner stride, leading
        stride > columns: a ``x[:, :K]`` view), ``column-major`` (2-D
        transposed view ``w.t()`` of a row-major buffer, dense or padded;
        both for matrices with two dimensions > 1),
        ``broadcast`` (a zero stride on a dimension of size > 1), or
        ``strided`` (any other non-contiguous layout, e.g. a 1-D scale with
        stride 2).
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
    """SHA-256 hex digest of a tensor's dtype, shape and contents.

    The hashed byte string is ``f"{dtype};{d0,d1,...};".encode("ascii")``
    (dtype as ``str(t.dtype)``, e.g. ``torch.int8``; shape dims joined by
    commas, empty for a 0-d tensor) followed by the row-major (C-contiguous)
    little-endian element bytes, so equal digests mean equal dtype, shape and
    bits, independent of strides or device.

    Args:
        t: any tensor, or None (digest of None is the string ``"none"``).

    Inside a ``reference.memo`` scope, a tensor built by a recorded,
    deterministic construction from digested sources carries its recipe's
    digest instead (:func:`derived_digest`: the F6 / F7 operands, whose
    tens of MB would otherwise be copied to the host and hashed in every
    sweep cell); equal digests still mean equal bits (equal recipes build
    equal tensors), but such a tensor and a byte-equal one made another way
    differ in digest. Copies of it (``memo.note_copy``) share its digest.

    Returns:
        64-character lowercase hex string (or ``"none"``).
    """
    if t is None:
        return "none"
    from reference import memo

    return memo.cached("digest", (t,), lambda: _digest_or_source(t))


def derived_digest(t: torch.Tensor, sources: tuple, recipe: str) -> str:
    """Digest of ``t`` built from the tensors ``sources`` by the construction
    described by ``recipe`` (deterministic: same sources and recipe, same
    bits), stored for ``t`` in the open ``reference.memo`` scope
    (:func:`tensor_digest` then returns it): SHA-256 of
    ``f"{dtype};{shape};derived;{source digests};{recipe}"``.

    Args:
        t: the built tensor; sources: the tensors it was built from;
        recipe: text fixing everything else the construction used.
    Returns:
        64-character lowercase hex string.
    """
    from reference import memo

    shape = ",".join(str(int(s)) for s in t.shape)
    parts = ",".join(tensor_digest(s) for s in sources)
    d = hashlib.sha256(f"{t.dtype};{shape};derived;{parts};{recipe}".encode("ascii")).hexdigest()
    memo.remember("digest", (t,), d)
    return d


def _digest_or_source(t: torch.Tensor) -> str:
    """The digest of the tensor ``t`` is a fresh copy of (``reference.memo.copy_source``:
    same dtype, shape and bits, so the same digest, memoized for both), else
    :func:`_digest` of ``t`` itself."""
    from reference import memo

    src = memo.copy_source(t)
    return _digest(t) if src is None else tensor_digest(src)


def _digest(t: torch.Tensor) -> str:
    """:func:`tensor_digest` computed (no memo)."""
    h = hashlib.sha256()
    shape = ",".join(str(int(s)) for s in t.shape)
    h.update(f"{t.dtype};{shape};".encode("ascii"))
    flat = t.detach().to("cpu").reshape(-1)
    # a dense copy with stride 1 (``contiguous()`` keeps the stride of a size-1
    # view, e.g. a one-element column of a wider scale buffer)
    flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
    if flat.numel():
        h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class GemmOperands:
    """Operands of one ``scaled_mm`` call (DESIGN.md section 3).

    Attributes:
        a: int8 [M, K] activations (row-major, leading stride >= K), per-token
            quantized.
        b: int8 [N, K] weights, nn.Linear layout (row-major, or the
            transposed view of a [K, N] buffer), per-channel quantized.
        scale_a: float32 [M] per-token scales ([M, 1] / scalar; any strides).
        scale_b: float32 [N] per-output-channel scales ([N, 1] / scalar).
        bias: optional [N] tensor in ``out_dtype``.
        out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32.
        name: case label, e.g. a layer name ``model.layers.0.self_attn.q_proj``.
        scale_mode: ``"own"`` (checkpoint's scales), ``"pow2"`` (weights
            requantized to power-of-two scales) or ``"synthetic"``.
        meta: free-form JSON-able extras (block, proj, seed, ...).

    No validation happens here; use :func:`reference.validate.validate_operands`.
    """

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    bias: Optional[torch.Tensor] = None
    out_dtype: torch.dtype = torch.bfloat16
    name: str = ""
    scale_mode: str = "synthetic"
    meta: dict = field(default_factory=dict)

    @property
    def m(self) -> int:
        """Rows of a (tokens)."""
        return int(self.a.shape[0])

    @property
    def k(self) -> int:
        """Reduction length (columns of a and b)."""
        return int(self.a.shape[1])

    @property
    def n(self) -> int:
        """Rows of b (output channels)."""
        return int(self.b.shape[0])

    def digests(self) -> dict[str, str]:
        """``{"a", "b", "scale_a", "scale_b", "bias"}`` -> :func:`tensor_digest`
        (``"none"`` for an absent bias)."""
        return {
            "a": tensor_digest(self.a),
            "b": tensor_digest(self.b),
            "scale_a": tensor_digest(self.scale_a),
            "scale_b": tensor_digest(self.scale_b),
            "bias": tensor_digest(self.bias),
        }

    def layouts(self) -> dict[str, str]:
        """``{operand name: layout_label(tensor)}`` for the five operands."""
        return {k: layout_label(getattr(self, k)) for k in OPERAND_NAMES}

    def to(self, device) -> "GemmOperands":
        """Operands on ``device`` (meta shallow-copied). Tensors already there
        are kept as they are (not copied); others are moved with
        :func:`copy_keep_layout`, so shapes, strides and padding survive."""
        dev = torch.device(device)

        def mv(t):
            if t is None or t.device == dev or (dev.index is None and t.device.type == dev.type):
                return t
            return copy_keep_layout(t, dev)

        return GemmOperands(
            a=mv(self.a),
            b=mv(self.b),
            scale_a=mv(self.scale_a),
            scale_b=mv(self.scale_b),
            bias=mv(self.bias),
            out_dtype=self.out_dtype,
            name=self.name,
            scale_mode=self.scale_mode,
            meta=dict(self.meta),
        )

    def dense(self) -> "GemmOperands":
        """Copy with every tensor contiguous (what a kernel that declares
        ``contiguous_only`` is handed); values and meta unchanged."""
        c = lambda t: None if t is None else t.detach().contiguous().clone()  # noqa: E731
        return GemmOperands(
            a=c(self.a),
            b=c(self.b),
            scale_a=c(self.scale_a),
            scale_b=c(self.scale_b),
            bias=c(self.bias),
            out_dtype=self.out_dtype,
            name=self.name,
            scale_mode=self.scale_mode,
            meta=dict(self.meta),
        )

    def __repr__(self) -> str:
        return (
            f"GemmOperands(name={self.name!r}, M={self.m}, K={self.k}, N={self.n}, "
            f"out_dtype={self.out_dtype}, bias={'yes' if self.bias is not None else 'no'}, "
            f"scale_mode={self.scale_mode!r})"
        )
