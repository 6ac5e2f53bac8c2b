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


def tensor_digest(t: Optional[torch.Tensor]) -> str:
    """SHA-256 hex digest of a tensor's dtype, shape and contents.

    The hashed byte string is ``f"{dtype};{d0,d1,...};".encode("ascii")``
    (dtype as ``str(t.dtype)``, e.g. ``torch.int8``; shape dims joined by
    commas, empty for a 0-d tensor) followed by the row-major (C-contiguous)
    little-endian element bytes, so equal digests mean equal dtype, shape and
    bits, independent of strides or device.

    Args:
        t: any tensor, or None (digest of None is the string ``"none"``).

    Returns:
        64-character lowercase hex string (or ``"none"``).
    """
    if t is None:
        return "none"
    h = hashlib.sha256()
    shape = ",".join(str(int(s)) for s in t.shape)
    h.update(f"{t.dtype};{shape};".encode("ascii"))
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel():
        h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class GemmOperands:
    """Operands of one ``scaled_mm`` call (DESIGN.md section 3).

    Attributes:
        a: int8 [M, K] activations (row-major), per-token quantized.
        b: int8 [N, K] weights, nn.Linear layout, per-channel quantized.
        scale_a: float32 [M] per-token scales.
        scale_b: float32 [N] per-output-channel scales.
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

    def to(self, device) -> "GemmOperands":
        """Copy with every tensor moved to ``device`` (meta shallow-copied)."""
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return GemmOperands(
            a=mv(self.a), b=mv(self.b), scale_a=mv(self.scale_a), scale_b=mv(self.scale_b),
            bias=mv(self.bias), out_dtype=self.out_dtype, name=self.name,
            scale_mode=self.scale_mode, meta=dict(self.meta))

    def __repr__(self) -> str:
        return (f"GemmOperands(name={self.name!r}, M={self.m}, K={self.k}, N={self.n}, "
                f"out_dtype={self.out_dtype}, bias={'yes' if self.bias is not None else 'no'}, "
                f"scale_mode={self.scale_mode!r})")
