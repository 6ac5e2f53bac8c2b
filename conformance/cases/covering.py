"""``covering``: the declared attribute space and a mixed-strength covering array over it (README.md here).

:data:`ATTRIBUTES` names every attribute a kernel may branch on and its values; :data:`CONSTRAINTS` excludes the
illegal combinations (each a predicate over a few attributes). :func:`covering_rows` is a covertable array:
3-wise over :data:`STRONG` (shape regimes, layouts, scale forms, out dtype, bias), 2-wise over the rest; every row
becomes one planted case (:func:`covering_case`, ``meta["attributes"]`` = the row). Cases with
``M * K * N > CPU_MACS`` are ``meta["native_only"]``: a run on the CPU leaves them out and names their regimes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Mapping

import covertable
import torch
from covertable.evaluate import evaluate

from conformance.cases.cache import CASE_CODE, cached_artifact
from conformance.cases.common import generator
from conformance.cases.layouts import with_forms
from conformance.cases.planting import planted_case
from reference.operands import GemmOperands

#: attribute -> its values, in declaration order
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "m": ("decode", "mid", "prefill", "large"),
    "n": ("narrow", "tile", "wide"),
    "k": ("short", "mid", "deep"),
    "a_layout": ("dense", "padded"),
    "b_layout": ("dense", "transposed", "padded", "transposed_padded"),
    "bias": ("none", "contiguous", "strided"),
    "scale_a": ("vector", "column", "0d", "one", "strided", "uniform"),
    "scale_b": ("vector", "column", "0d", "one", "strided", "uniform"),
    "out_dtype": ("bf16", "fp16", "fp32"),
    "magnitude": ("typical", "pow2", "subnormal", "huge"),
    "bias_value": ("none", "full", "other_range", "tiny", "cancelling"),
    "contract": ("scale_order", "bias_point", "signed_zero", "overflow", "subnormal"),
}
#: attributes covered 3-wise (the rest 2-wise)
STRONG = ("m", "n", "k", "a_layout", "b_layout", "bias", "scale_a", "scale_b", "out_dtype")
#: regime -> sizes, the smallest that reaches it first (a case takes one by its row index); the trigger map's
#: boundaries (``regimes.py``): decode M <= 16, prefill M >= 128, large M >= 512; wide N >= 4096; deep K >= 1024
#: (N = 151,936 and split-K depths stay with the ``regimes`` family's narrow cases)
SIZES = {
    "m": {"decode": (1, 5, 16), "mid": (17, 40, 100), "prefill": (128, 129, 257), "large": (512,)},
    "n": {"narrow": (24, 9, 48), "tile": (64, 129, 200), "wide": (4096,)},
    "k": {"short": (16, 37, 100), "mid": (128, 255, 513), "deep": (1024,)},
}
#: largest M * K * N a run on the CPU (Triton's interpreter, the CPU kernels) affords; larger cases (M, N and K
#: all large, or two of them with the third mid) run where the kernel runs natively
CPU_MACS = 1 << 25
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SCALAR_FORMS = ("0d", "one", "uniform")
PER_ROW = ("vector", "column", "strided")


def c_eq(a: str, v) -> dict:
    return {"operator": "eq", "left": a, "value": v}


def c_in(a: str, vs) -> dict:
    return {"operator": "in", "left": a, "values": list(vs)}


def c_not(c: dict) -> dict:
    return {"operator": "not", "condition": c}


def c_or(*cs) -> dict:
    return {"operator": "or", "conditions": list(cs)}


def c_and(*cs) -> dict:
    return {"operator": "and", "conditions": list(cs)}


#: s_w exact (per-column or a power of two), a bias, a final rounding: where a bias point can be planted
_BIAS_POINT = c_and(
    c_not(c_eq("bias", "none")),
    c_not(c_eq("out_dtype", "fp32")),
    c_or(c_in("scale_b", PER_ROW), c_eq("magnitude", "pow2")),
)
#: covertable conditions a legal row satisfies, every one
CONSTRAINTS: tuple[dict, ...] = (
    c_or(
        c_and(c_eq("bias", "none"), c_eq("bias_value", "none")),
        c_and(c_not(c_eq("bias", "none")), c_not(c_eq("bias_value", "none"))),
    ),
    c_or(c_not(c_eq("magnitude", "subnormal")), c_in("scale_a", PER_ROW)),
    c_or(c_not(c_eq("contract", "scale_order")), c_not(c_eq("magnitude", "pow2"))),
    c_or(c_not(c_in("contract", ("overflow", "subnormal"))), c_in("scale_b", PER_ROW)),
    c_or(c_not(c_eq("contract", "bias_point")), _BIAS_POINT),
    c_or(c_not(c_eq("bias_value", "cancelling")), _BIAS_POINT),
)


@dataclass(frozen=True)
class AttributeSpace:
    """An attribute space and its covering array: ``attributes`` (attribute -> values, in declaration order),
    ``constraints`` (covertable conditions a legal row satisfies, every one), ``strong`` (the attributes covered
    ``strong_strength``-wise; the rest 2-wise); ``name`` keys its artifact-cache entries."""

    name: str
    attributes: Mapping[str, tuple]
    constraints: tuple
    strong: tuple
    strong_strength: int = 3

    def legal(self, row: dict) -> bool:
        """Whether a (partial) row breaks no constraint whose attributes it holds all of."""
        return all(evaluate(c, row) is not False for c in self.constraints)

    def completable(self, partial: dict) -> bool:
        """Whether some legal full row agrees with ``partial`` (depth-first over the missing attributes)."""
        if not self.legal(partial):
            return False
        missing = [a for a in self.attributes if a not in partial]
        if not missing:
            return True
        a = missing[0]
        return any(self.completable({**partial, a: v}) for v in self.attributes[a])

    def make_rows(self) -> tuple:
        """The covering array (dicts attribute -> value), deterministic (covertable's hash sorter, no salt)."""
        rows = covertable.make(
            {a: list(v) for a, v in self.attributes.items()},
            strength=2,
            sub_models=[{"fields": list(self.strong), "strength": self.strong_strength}],
            constraints=list(self.constraints),
        )
        return tuple({a: r[a] for a in self.attributes} for r in rows)

    def legal_tuples(self, keys: tuple, t: int) -> frozenset:
        """Every t-tuple over ``keys`` that some legal full row holds."""
        out = set()
        for attrs in itertools.combinations(keys, t):
            for vals in itertools.product(*(self.attributes[a] for a in attrs)):
                if self.completable(dict(zip(attrs, vals))):
                    out.add(tuple(zip(attrs, vals)))
        return frozenset(out)

    def t_wise_coverage(self, rows) -> dict:
        """``{"<s>-wise": [held, legal], "2-wise": [held, legal]}``: legal s-tuples over ``strong`` and legal pairs
        over every attribute that ``rows`` (attribute dicts) hold (the legal tuples kept in the artifact cache)."""
        out = {}
        t3 = self.strong_strength
        for label, keys, t in ((f"{t3}-wise", self.strong, t3), ("2-wise", tuple(self.attributes), 2)):
            label_key = f"legal/{self.name}/{t}/{','.join(keys)}"
            want = cached_artifact("covering", CASE_CODE, label_key, partial(self.legal_tuples, keys, t))
            out[label] = [len(tuples_of(rows, keys, t) & want), len(want)]
        return out


def tuples_of(rows, keys: tuple, t: int) -> set:
    """The t-tuples ``((attr, value), ...)`` over ``keys`` that ``rows`` (dicts) hold."""
    out = set()
    for r in rows:
        items = [(a, r[a]) for a in keys if a in r]
        out.update(itertools.combinations(items, t))
    return out


#: the per-token x per-channel attribute space
SPACE = AttributeSpace("per-token", ATTRIBUTES, CONSTRAINTS, STRONG)


@lru_cache(maxsize=1)
def covering_rows() -> tuple:
    """The covering array of :data:`SPACE`: legal rows (dicts attribute -> value), deterministic; kept in the
    artifact cache (``cache.cached_artifact``: a build costs ~10-50 s on one core)."""
    return cached_artifact("covering", CASE_CODE, "rows", SPACE.make_rows)


#: K of a row with M, N and K all large (native only): K = 1024 bounds |acc| by 2^24 (float32-exact in any order),
#: so the planted ``partial_sums`` (its ``deep_acc`` form: 3,600 positions) and ``big_acc`` columns need a deeper K
DEEP_ALL_LARGE_K = 6656


def all_large(row: dict) -> bool:
    """Whether M, N and K are all in their largest regime (a split-K / stream-K configuration's domain)."""
    return (row["m"], row["n"], row["k"]) == ("large", "wide", "deep")


def shape_of(row: dict, i: int) -> tuple[int, int, int]:
    """(M, K, N) of row ``i``: each regime's size at position ``i`` of :data:`SIZES`; K =
    :data:`DEEP_ALL_LARGE_K` where M, N and K are all large (:func:`all_large`)."""
    m, k, n = (SIZES[a][row[a]] for a in ("m", "k", "n"))
    kk = DEEP_ALL_LARGE_K if all_large(row) else k[i % len(k)]
    return m[i % len(m)], kk, n[i % len(n)]


def covering_case(row: dict, i: int, seed: int = 0) -> GemmOperands:
    """The planted case of covering row ``i``: its shape (:func:`shape_of`), forms, magnitude class, bias value
    class and leading planted kind (``contract``); ``meta["attributes"]`` = ``row``."""
    m, k, n = shape_of(row, i)
    out_dtype, mode = DTYPES[row["out_dtype"]], "pow2" if row["magnitude"] == "pow2" else "real"
    short = lambda v: v[:3] if v == "transposed_padded" else v  # noqa: E731
    variant = f"{i:03d}-M{m}xK{k}xN{n}-a_{row['a_layout']}-b_{short(row['b_layout'])}-sa_{row['scale_a']}"
    variant += f"-sb_{row['scale_b']}-bias_{row['bias']}-{row['bias_value']}-{row['magnitude']}-{row['contract']}"
    name = f"family/covering/{variant}-{mode}-{row['out_dtype']}"
    meta = {"source": "family", "family": "covering", "variant": variant, "seed": seed, "scale_kind": mode}
    meta.update(attributes=dict(row), layout="covering", trigger="covering array row " + str(i))
    if m * k * n > CPU_MACS:
        meta["native_only"] = True
    ops = planted_case(
        m,
        k,
        n,
        out_dtype,
        mode,
        row["bias"] != "none",
        seed=seed,
        name=name,
        scale_a_tensor=row["scale_a"] in SCALAR_FORMS,
        scale_b_tensor=row["scale_b"] in SCALAR_FORMS,
        rotate=i,
        meta=meta,
        magnitude=row["magnitude"],
        bias_value=None if row["bias_value"] in ("none", "cancelling") else row["bias_value"],
        lead=row["contract"],
        scalar_ties=True,
        distinct_offsets=True,
        deep_acc=all_large(row),
    )
    forms = {"a": row["a_layout"], "b": row["b_layout"], "scale_a": row["scale_a"], "scale_b": row["scale_b"]}
    forms["bias"] = row["bias"]
    return with_forms(ops, forms, generator("covering", variant, seed))


def covering_family(seed: int = 0, part: tuple[int, int] = (0, 1)) -> list[GemmOperands]:
    """Every covering case in row order; ``part=(j, n)``: the j-th of n contiguous slices (the whole family is kept
    in the artifact cache beside the rows; the default suite's slices are built into its own cached list)."""
    rows = covering_rows()
    j, n_parts = part
    lo, hi = j * len(rows) // n_parts, (j + 1) * len(rows) // n_parts
    build = lambda: [covering_case(rows[i], i, seed) for i in range(lo, hi)]  # noqa: E731
    return cached_artifact("covering", CASE_CODE, f"cases/seed={seed}", build) if part == (0, 1) else build()
