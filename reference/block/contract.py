"""The block-scaled contract: block sizes and the block accumulation a kernel declares (how a user writes it:
``conformance/kernels/README.md``, block-scaled kernels).

``scaled_mm(a [M,K], b [N,K], scale_a f32 [M, KB], scale_b f32 [ceil(N/bn), KB], out_dtype, bias, block_size=(bn,
bk))`` with ``KB = ceil(K / bk)``; the activation group along K is ``bk``. Per output element, from ``acc = +0.0``,
each K-block's partial ``p`` (exact int32 -> float32 for int8; the declared FP8 accumulator from 0 for e4m3) goes
through the BLOCK ACCUMULATION, ``;``-separated steps::

    mul <s>          p = r(p * s)                  <s> := s_a | s_w | s_a*s_w (the scales' product, one rounding)
    add              acc = r(acc + p)              (the last scale step, or)
    fma <s>          acc = fmaf(p, s, acc)         one rounding
    order sequential | order split_k=S           the K-blocks in S contiguous chunks of ceil(KB / S) (split s:
                                                 K-blocks [s*c, (s+1)*c), a split-K grid's cdiv; the last ones shorter
                                                 or empty), each from +0.0, totals summed in chunk order (default:
                                                 sequential)
    order split_k=S interleaved                  split s takes K-blocks s, s+S, s+2S, ... (a split-K program striding
                                                 over K: ``for kb in range(pid_k, KB, S)``), totals as above

``s_a`` and ``s_w`` enter exactly once each. Then the epilogue (``reference.contract`` steps naming no scale) on acc.
Bad text: a one-line ContractError."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from reference.contract import EpilogueSteps, parse_steps
from reference.errors import ContractError

#: scale operands of a block step: text -> the scales it applies
BLOCK_OPERANDS = {"s_a": ("s_a",), "s_w": ("s_w",), "s_a*s_w": ("s_a", "s_w"), "s_w*s_a": ("s_a", "s_w")}
#: the ``order`` step's text after ``order``: sequential, or S (>= 1) chunks, interleaved or not
_ORDER = re.compile(r"^(?:sequential|split_k\s*=\s*([1-9][0-9]*)(\s+interleaved)?)$")
#: the field's block size (DeepSeek-V3, vLLM, DeepGEMM): 128 x 128 weight blocks, activation groups of 128
FIELD_BLOCK = (128, 128)
#: the forms the field's kernels take (``order sequential``), by where they come from
FIELD_FORMS = {
    "mul s_a; mul s_w; add": "Triton `acc += dot * a_s * b_s` with fp fusion off",
    "mul s_a; fma s_w": "the same with fp fusion on (the last multiply-add contracted)",
    "mul s_a*s_w; add": "scale product formed first, then multiplied and added",
    "fma s_a*s_w": "scale product formed first, fused multiply-add into the running sum (DeepGEMM-style promotion)",
}


@dataclass(frozen=True)
class BlockAccumulation:
    """A parsed block accumulation: ``muls`` the scale operands multiplied into the partial in order (normalized
    text: ``s_a``, ``s_w``, ``s_a*s_w``); ``fma`` the operand of the final fused step ('' for ``add``);
    ``split_k`` the number of K-block chunks (1 = sequential), ``interleaved`` whether split s takes K-blocks
    s, s+S, ... instead of a contiguous chunk."""

    muls: tuple = ("s_a", "s_w")
    fma: str = ""
    split_k: int = 1
    interleaved: bool = False

    def label(self) -> str:
        """The text :func:`parse_block_accumulation` reads back to this value."""
        parts = [f"mul {m}" for m in self.muls] + [f"fma {self.fma}" if self.fma else "add"]
        if self.split_k > 1:
            parts.append(f"order split_k={self.split_k}" + (" interleaved" if self.interleaved else ""))
        return "; ".join(parts)


def _operand(text: str, where: str) -> str:
    op = "".join(text.split())
    if op not in BLOCK_OPERANDS:
        raise ContractError(f"block accumulation {where}: operand {text!r} is not one of s_a, s_w, s_a*s_w")
    return "s_a*s_w" if len(BLOCK_OPERANDS[op]) == 2 else op


def parse_block_accumulation(text: Union[str, BlockAccumulation]) -> BlockAccumulation:
    """A :class:`BlockAccumulation` from its text (module docstring); ContractError (one line) when malformed."""
    if isinstance(text, BlockAccumulation):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ContractError(f"block accumulation must be a non-empty string, got {text!r}")
    steps = [" ".join(s.split()) for s in text.split(";") if s.strip()]
    split_k, interleaved = 1, False
    if steps and steps[-1].startswith("order"):
        order = steps.pop()[len("order") :].strip()
        m = _ORDER.match(order)
        if m is None:
            raise ContractError(
                f"block accumulation order {order!r}: expected 'sequential', 'split_k=S' or 'split_k=S interleaved'"
                " (S >= 1)"
            )
        split_k = int(m.group(1) or 1)
        interleaved = bool(m.group(2)) and split_k > 1
    if not steps:
        raise ContractError(f"block accumulation {text!r}: no accumulate step ('add' or 'fma <s>')")
    *muls, last = steps
    parsed = []
    for i, st in enumerate(muls):
        op, _, rest = st.partition(" ")
        if op != "mul":
            raise ContractError(f"block accumulation step {i + 1} {st!r}: only 'mul <s>' may come before the last step")
        parsed.append(_operand(rest, f"step {i + 1}"))
    op, _, rest = last.partition(" ")
    if op == "add" and not rest:
        fma = ""
    elif op == "fma" and rest:
        fma = _operand(rest, f"step {len(steps)}")
    else:
        raise ContractError(f"block accumulation: the last step {last!r} must be 'add' or 'fma <s>'")
    applied = [s for m in parsed + ([fma] if fma else []) for s in BLOCK_OPERANDS[m]]
    if sorted(applied) != ["s_a", "s_w"]:
        raise ContractError(
            f"block accumulation {text!r}: s_a and s_w must each enter exactly once (they enter as {applied})"
        )
    return BlockAccumulation(tuple(parsed), fma, split_k, interleaved)


def parse_block_epilogue(text) -> EpilogueSteps:
    """The epilogue on the block-accumulated float32 value: ``reference.contract`` steps that name no scale (the
    scales entered per K-block), e.g. ``'add bias; cast out'`` (a leading ``cast fp32``, the identity on the
    float32 block accumulator, is implied); ContractError otherwise."""
    if isinstance(text, str) and " ".join(text.split(";")[0].split()).lower() != "cast fp32":
        text = "cast fp32; " + text
    steps = parse_steps(text)
    for st in steps.steps:
        if "s_a" in st.operand or "s_w" in st.operand:
            raise ContractError(f"block epilogue step {st.text!r}: the scales enter per K-block, not in the epilogue")
    return steps


def check_block_size(block_size) -> tuple[int, int]:
    """``(block_n, block_k)`` as two positive ints; ContractError (one line) otherwise."""
    try:
        bn, bk = (int(v) for v in block_size)
        ok = all(isinstance(v, int) or float(v).is_integer() for v in block_size)
    except (TypeError, ValueError):
        ok, bn, bk = False, 0, 0
    if not ok or bn < 1 or bk < 1:
        raise ContractError(f"block_size {block_size!r}: expected (block_n, block_k), two positive integers")
    return bn, bk


@dataclass(frozen=True)
class BlockDeclaration:
    """What a block-scaled kernel declares: ``sizes`` the ``(block_n, block_k)`` it takes (the call passes one as
    ``block_size=``), ``accumulation`` (:class:`BlockAccumulation`), ``epilogue`` on the float32 result
    (:func:`parse_block_epilogue`)."""

    sizes: tuple = (FIELD_BLOCK,)
    accumulation: BlockAccumulation = BlockAccumulation()
    epilogue: EpilogueSteps = None  # type: ignore[assignment]  # set in __post_init__

    def __post_init__(self) -> None:
        if self.epilogue is None:
            object.__setattr__(self, "epilogue", parse_block_epilogue("add bias; cast out"))
        sizes = tuple(check_block_size(s) for s in self.sizes)
        if not sizes:
            raise ContractError("block sizes: declare at least one (block_n, block_k)")
        object.__setattr__(self, "sizes", sizes)

    @property
    def takes_bias(self) -> bool:
        """Whether the epilogue has a bias step (``add bias``, ``fma ... bias``); without one the kernel takes no
        bias (a call with one is outside the declaration)."""
        return any(st.op == "add_bias" or (st.op == "fma" and st.rounding == "bias") for st in self.epilogue.steps)

    def label(self) -> str:
        """One line: sizes, accumulation, epilogue."""
        sizes = ", ".join(f"{bn}x{bk}" for bn, bk in self.sizes)
        return f"blocks {sizes}; {self.accumulation.label()}; then {self.epilogue.label()}"

    def to_dict(self) -> dict:
        """JSON-able form (manifests, reports); :func:`parse_block_declaration` reads it back."""
        return {
            "sizes": [list(s) for s in self.sizes],
            "accumulation": self.accumulation.label(),
            "epilogue": self.epilogue.label(),
        }


def parse_block_declaration(decl) -> BlockDeclaration:
    """A :class:`BlockDeclaration` from one: its accumulation text alone (sizes 128x128, epilogue
    ``add bias; cast out``), or a mapping with ``accumulation`` and optional ``sizes`` / ``epilogue``.
    ContractError (one line) otherwise."""
    if isinstance(decl, BlockDeclaration):
        return decl
    if isinstance(decl, (str, BlockAccumulation)):
        return BlockDeclaration(accumulation=parse_block_accumulation(decl))
    if isinstance(decl, dict):
        extra = sorted(set(decl) - {"sizes", "accumulation", "epilogue"})
        if extra or "accumulation" not in decl:
            raise ContractError(
                f"block declaration {decl!r}: expected keys 'accumulation' and optionally 'sizes', 'epilogue'"
            )
        sizes = decl.get("sizes", (FIELD_BLOCK,))
        if not isinstance(sizes, (list, tuple)) or not sizes:
            raise ContractError(f"block sizes {sizes!r}: expected a list of (block_n, block_k)")
        if len(sizes) == 2 and all(isinstance(v, int) for v in sizes):
            sizes = (tuple(sizes),)  # one size given bare: (128, 128)
        epi = parse_block_epilogue(decl.get("epilogue", "add bias; cast out"))
        return BlockDeclaration(tuple(sizes), parse_block_accumulation(decl["accumulation"]), epi)
    raise ContractError(f"block declaration {decl!r}: expected its accumulation text or a mapping")
