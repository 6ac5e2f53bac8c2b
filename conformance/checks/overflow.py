"""The accumulator a kernel's *declared* int32-overflow behaviour gives (DESIGN.md sections 1, 3).

``wrap`` -> ``wrap32(exact)`` (the exact sum also accepted), ``saturate`` ->
``clamp(exact)`` where all products of an element have one sign, else
undefined; ``undefined`` -> at-risk elements excluded. At risk: ``P > 2**31 - 1``
or ``Q > 2**31`` (sums of positive / negative products; README.md here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from conformance.kernels.spec import OVERFLOW_BEHAVIOURS
from reference import memo, readback
from reference.accumulate import accumulator_row_col_bound

if TYPE_CHECKING:
    from reference.operands import GemmOperands

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


@dataclass
class DeclaredAccumulator:
    """What the declared overflow behaviour makes of the exact accumulator.

    ``acc`` int64 [M, N]: the declared value (undefined elements keep the exact
    sum); ``defined`` / ``at_risk`` bool [M, N]; ``behaviour`` ``wrap`` |
    ``saturate`` | ``undefined``; ``alternative`` int64 [M, N] also accepted where
    at risk (``wrap``: the exact sum), or None.
    """

    acc: Tensor
    defined: Tensor
    at_risk: Tensor
    behaviour: str
    alternative: Optional[Tensor] = None
    #: ``at_risk`` / ``undefined`` counts once known
    _counts: dict = field(default_factory=dict, repr=False, compare=False)
    _asked: Optional[readback.Deferred] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # defined by construction: checks compare unmasked without reading a count
        self.all_defined = self._counts.get("undefined") == 0
        missing = [k for k in ("at_risk", "undefined") if k not in self._counts]
        if missing and self._asked is None:
            parts = {"at_risk": self.at_risk, "undefined": ~self.defined}
            self._asked = readback.ask(
                [parts[k].sum() for k in missing], lambda v: dict(zip(missing, (int(x) for x in v)))
            )

    def known(self, key: str) -> Optional[int]:
        """The count ``key`` (``at_risk`` / ``undefined``) when known without a read-back, else None."""
        if key not in self._counts and self._asked is not None and self._asked.done:
            self._counts.update(self._asked.get())
        return self._counts.get(key)

    def _count(self, key: str) -> int:
        if key not in self._counts:
            assert self._asked is not None  # asked in __post_init__ for every count not known then
            self._counts.update(self._asked.get())
        return self._counts[key]

    @property
    def n_at_risk(self) -> int:
        return self._count("at_risk")

    @property
    def n_undefined(self) -> int:
        return self._count("undefined")

    def evidence(self) -> dict:
        """JSON-able counts for a check's evidence (empty when nothing is at risk)."""
        if not self.n_at_risk:
            return {}
        return {
            "overflow_behaviour": self.behaviour,
            "overflow_at_risk": self.n_at_risk,
            "overflow_excluded": self.n_undefined,
        }


def may_leave_int32(k: int) -> bool:
    """Whether an int8 GEMM over ``k`` products can leave int32: ``|acc| <= k * 2**14``."""
    return int(k) * 16384 > INT32_MAX


def wrap32(x: Tensor) -> Tensor:
    """int64 -> int64 holding the two's-complement int32 wrap of ``x``."""
    w = ((x.to(torch.int64) + 2**31) % 2**32) - 2**31
    memo.note_bound(w, 2**31)
    return w


def positive_negative_sums(a: Tensor, b: Tensor, exact: Tensor) -> tuple[Tensor, Tensor]:
    """``(P, Q)`` int64 [M, N] of ``a`` int8 [M, K], ``b`` int8 [N, K] and
    ``exact = a @ b.T``: the sums of the positive / negative products' magnitudes."""
    tight = accumulator_row_col_bound(a, b).to(torch.int64)
    return (tight + exact) // 2, (tight - exact) // 2


def declared_accumulator(ops: GemmOperands, exact: Tensor, behaviour: str = "wrap") -> DeclaredAccumulator:
    """The accumulator of ``ops`` under ``behaviour`` (:data:`OVERFLOW_BEHAVIOURS`;
    ValueError otherwise); ``exact``: int64 [M, N], or float32 [M, N] for e4m3 operands
    (``reference.fp8.exact_accumulator``: never at risk, kept as is)."""
    if behaviour not in OVERFLOW_BEHAVIOURS:
        raise ValueError(f"overflow behaviour {behaviour!r} is not one of {OVERFLOW_BEHAVIOURS}")
    return memo.cached(
        ("declared", behaviour), (ops.a, ops.b, exact), lambda: _declared_accumulator(ops, exact, behaviour)
    )


def _declared_accumulator(ops: GemmOperands, exact: Tensor, behaviour: str) -> DeclaredAccumulator:
    if exact.is_floating_point():  # an FP8 kernel's float32 accumulator: no int32 to leave
        none = torch.zeros_like(exact, dtype=torch.bool)
        return DeclaredAccumulator(exact, ~none, none, behaviour, _counts={"at_risk": 0, "undefined": 0})
    exact = exact.to(torch.int64)
    if not may_leave_int32(ops.a.shape[1]):  # the usual case
        none = torch.zeros_like(exact, dtype=torch.bool)
        return DeclaredAccumulator(exact, ~none, none, behaviour, _counts={"at_risk": 0, "undefined": 0})
    p, q = positive_negative_sums(ops.a.to(exact.device), ops.b.to(exact.device), exact)
    at_risk = (p > INT32_MAX) | (q > -INT32_MIN)
    acc = exact.clone()
    defined = torch.ones_like(at_risk)
    # no larger than the exact one (or int32's range)
    bound = memo.known_bound(exact)
    if behaviour == "wrap":  # defined everywhere: nothing to count
        acc = torch.where(at_risk, wrap32(exact), exact)
        if bound is not None:
            memo.note_bound(acc, max(bound, 2**31))
        return DeclaredAccumulator(acc, defined, at_risk, behaviour, exact, _counts={"undefined": 0})
    elif behaviour == "saturate":
        monotone = (p == 0) | (q == 0)
        acc = torch.where(at_risk & monotone, exact.clamp(INT32_MIN, INT32_MAX), exact)
        defined = ~at_risk | monotone
    else:
        defined = ~at_risk
    if bound is not None:
        memo.note_bound(acc, bound)
    return DeclaredAccumulator(acc, defined, at_risk, behaviour)


def saturated_accumulator(exact: Tensor) -> Tensor:
    """int64 ``clamp(exact)`` to the int32 range."""
    s = exact.to(torch.int64).clamp(INT32_MIN, INT32_MAX)
    memo.note_bound(s, 2**31)
    return s
