"""The block plan's covering array (``conformance.cases.covering``'s machinery over the block attribute space):
every legal pair of block case attributes, every legal triple of (out dtype, ``scale_a`` layout, ``b`` layout,
magnitude, values), one case per row, built for the FIRST declared block size only (the fixed
``conformance.cases.block.VARIANTS`` run at every size; rows at every size would multiply the plan by the number of
sizes). A bug gated on two attributes (out float16 AND column-major ``scale_a``; e4m3 subnormal values AND a
transposed ``b``) meets a row holding both.

Attributes (:func:`block_space`): ``m`` decode (1, 3, 4), mid (17, 24, 40), prefill (128, 129, 130); ``k`` a
multiple of block_k, a tail of 1, a tail of block_k - 1 (2 to 6 full K-blocks, so every case keeps >= 1 cancelling
pair), deep (:func:`deep_blocks` K-blocks + 5: K >= 7168, the field's depth); ``n`` partial / full / wideish
(``conformance.cases.block._n``); out dtype; bias; ``scale_a`` row- or column-major; ``b`` dense or the transposed
view; ``a`` dense or padded; magnitude (``conformance.cases.block.MAGNITUDES``: typical, pow2, pow2_tiny (ue8m0
scales at float32-subnormal s_a), tiny, huge, subnormal_a, subnormal_w, k_uniform (scales constant along K, a
per-channel checkpoint expanded to blocks: the pairs carry a small residual instead of a scale delta)); values
(``int``; e4m3 only: ``fp8max``, ``fp8sub``, ``fp8wide``, ``fp8negzero`` (row 0 x the first and last columns: every
product -0 in every K-block)).

Constraints (:data:`CONSTRAINTS`): deep K at decode / mid M only (the fixed ``prefill130-deepk`` keeps prefill x
deep) and not at wideish N (CPU time); power-of-two magnitudes not at deep K and with integer values only (so
``order_free_elements`` holds: ``block_case`` asserts it); ``fp8wide`` at deep K only (judged against an ``exact``
declared accumulator only, as the fixed ``fp8-wide-sum``: ``checks.block_output.EXACT_ONLY_VALUES``).

Every row keeps the fixed cases' discriminators (``conformance.cases.block``: cancelling pairs on the odd rows with
scales distinct per K-block and weight-block row, except k_uniform's residual pairs). :data:`SUBSUMED` names the
fixed variants the array holds at the first size (each is one attribute off the default); they stay at the others.
Names ``block/<bn>x<bk>/cov<row>-M<m>xK<k>xN<n>-<magnitude>-<values>-<layouts>[-bias]-<dtype>``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from conformance.cases.block import BF16, FP16, FP32, VARIANTS, WIDE, Variant, block_case
from conformance.cases.cache import CASE_CODE, cached_artifact
from conformance.cases.covering import AttributeSpace, c_and, c_eq, c_in, c_not, c_or
from reference.operands import GemmOperands

#: e4m3-only value classes (``conformance.cases.block``)
FP8_VALUES = ("fp8max", "fp8sub", "fp8wide", "fp8negzero")
MAGNITUDE_CLASSES = ("typical", "pow2", "pow2_tiny", "tiny", "huge", "subnormal_a", "subnormal_w", "k_uniform")
#: attributes covered 3-wise (the rest 2-wise)
STRONG = ("out_dtype", "scale_a", "b_layout", "magnitude", "values")
#: regime -> M sizes (a row takes one by its index)
M_SIZES = {"decode": (1, 3, 4), "mid": (17, 24, 40), "prefill": (128, 129, 130)}
#: K regime -> (full K-blocks, tail) choices (tail -1: block_k - 1); deep: :func:`deep_blocks`
K_BLOCKS = {
    "multiple": ((4, 0), (2, 0), (6, 0)),
    "tail1": ((5, 1), (2, 1), (3, 1)),
    "tailbk1": ((2, -1), (4, -1), (3, -1)),
}
#: the depth a deep row reaches (the field's K = 7168; a float32 in-block sum past K = 4096 shows on fp8wide)
DEEP_K = 7168
DTYPES = {"bf16": BF16, "fp16": FP16, "fp32": FP32}

#: covertable conditions a legal row satisfies, every one
CONSTRAINTS: tuple[dict, ...] = (
    c_or(c_not(c_eq("k", "deep")), c_and(c_not(c_eq("m", "prefill")), c_not(c_eq("n", "wideish")))),
    c_or(
        c_not(c_in("magnitude", ("pow2", "pow2_tiny"))),
        c_and(c_not(c_eq("k", "deep")), c_in("values", ("int", "fp8negzero"))),
    ),
    c_or(c_not(c_eq("values", "fp8wide")), c_eq("k", "deep")),
)
#: the fixed variants the array holds at the first size (one attribute off the default each): built at the other
#: sizes only
SUBSUMED = (
    "decode1-kmul",
    "decode3-tail1",
    "decode4-tailbk1",
    "prefill128-kmul",
    "pow2-tail",
    "tiny",
    "huge",
    "subnormal-a",
    "subnormal-w",
    "decode2-deepk",
    "fp8-max",
    "fp8-subnormal",
)


def block_space(operands: str = "int8") -> AttributeSpace:
    """The block attribute space of ``operands`` (``"int8"``: values ``int`` only; ``"e4m3"``: :data:`FP8_VALUES`
    too)."""
    attributes = {
        "m": tuple(M_SIZES),
        "k": (*K_BLOCKS, "deep"),
        "n": ("partial", "full", "wideish"),
        "out_dtype": tuple(DTYPES),
        "bias": ("none", "present"),
        "scale_a": ("row_major", "column_major"),
        "b_layout": ("dense", "transposed"),
        "a_layout": ("dense", "padded"),
        "magnitude": MAGNITUDE_CLASSES,
        "values": ("int", *FP8_VALUES) if operands == "e4m3" else ("int",),
    }
    return AttributeSpace(f"block-{operands}", attributes, CONSTRAINTS, STRONG)


@lru_cache(maxsize=2)
def block_covering_rows(operands: str = "int8") -> tuple:
    """The covering array of :func:`block_space` (dicts attribute -> value), deterministic; kept in the artifact
    cache."""
    return cached_artifact("covering", CASE_CODE, f"block_rows/{operands}", block_space(operands).make_rows)


def deep_blocks(block_k: int) -> int:
    """Full K-blocks of a deep row: K = this * block_k + 5 >= :data:`DEEP_K`."""
    return -(-DEEP_K // block_k)


def row_variant(row: dict, i: int, block_k: int) -> Variant:
    """The :class:`conformance.cases.block.Variant` of covering row ``i`` (sizes picked by ``i`` within each
    regime)."""
    ms = M_SIZES[row["m"]]
    k = (deep_blocks(block_k), 5) if row["k"] == "deep" else K_BLOCKS[row["k"]][i % 3]
    parts = [
        p
        for p, on in (
            ("scale_a", row["scale_a"] == "column_major"),
            ("b", row["b_layout"] == "transposed"),
            ("a", row["a_layout"] == "padded"),
        )
        if on
    ]
    layout = "+".join(parts) or "dense"
    tag = "-".join(
        [
            f"cov{i:03d}-M{ms[i % 3]}-{row['k']}-{row['n']}-{row['magnitude']}-{row['values']}",
            f"sa_{'col' if row['scale_a'] == 'column_major' else 'row'}",
            f"b_{'t' if row['b_layout'] == 'transposed' else 'dense'}",
            f"a_{'pad' if row['a_layout'] == 'padded' else 'dense'}",
        ]
    ) + ("-bias" if row["bias"] == "present" else "")
    return Variant(
        tag,
        ms[i % 3],
        k,
        DTYPES[row["out_dtype"]],
        row["bias"] == "present",
        row["magnitude"],
        layout,
        row["n"],
        row["values"],
    )


def block_covering_cases(block: tuple, operands: str = "int8", seed: int = 0) -> list[GemmOperands]:
    """One case per covering row at ``block`` = (block_n, block_k), row order; ``meta["attributes"]`` = the row."""
    out = []
    for i, row in enumerate(block_covering_rows(operands)):
        ops = block_case(block, row_variant(row, i, int(block[1])), operands, seed)
        ops.meta["attributes"] = dict(row)
        ops.meta["trigger"] = f"block covering array row {i}"
        out.append(ops)
    return out


def block_plan_cases(sizes: Sequence[tuple], operands: str = "int8", seed: int = 0) -> list[GemmOperands]:
    """The block plan's fixed cases: :data:`VARIANTS` per size of ``sizes`` (a kernel's declared
    ``(block_n, block_k)``; :data:`SUBSUMED` left out at the first), the covering rows at the first size, then
    ``wide`` (N = 4096 + block_n / 2) at the first size."""
    if not sizes:
        return []
    first = tuple(sizes[0])
    variants = [v for v in VARIANTS if v.values == "int" or operands == "e4m3"]
    cases = [
        block_case(tuple(s), v, operands, seed)
        for s in sizes
        for v in variants
        if not (tuple(s) == first and v.name in SUBSUMED)
    ]
    cases += block_covering_cases(first, operands, seed)
    cases.append(block_case(first, WIDE, operands, seed))
    return cases
