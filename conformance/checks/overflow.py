"""The accumulator a kernel's *declared* int32-overflow behaviour gives.

Integer accumulation is exact and order-free only while every partial sum
fits int32 (DESIGN.md sections 1 and 3). Where some summation order can leave
int32 the case violates a precondition (C3 reports it); the output checks C5,
C6 and C8 then compare the kernel with what its declared overflow behaviour
(``KernelSpec.overflow``) makes of the exact sum, and never fail a kernel for
having overflowed:

* ``wrap`` (the default): two's-complement int32 arithmetic. Addition
  modulo 2**32 is associative and commutative, so every order gives
  ``wrap32(exact)``: defined everywhere. The exact sum is accepted too
  (:attr:`DeclaredAccumulator.alternative`): an accumulator wider than int32
  (int64, float64) never wraps and is not a fault; a saturating one matches
  neither and fails.
* ``saturate``: every partial sum clamped to [-2**31, 2**31 - 1]. The result
  depends on the order, except where all products of the element have one
  sign (the partial sums are then monotone and any order gives
  ``clamp(exact)``); other at-risk elements are undefined, excluded and counted.
* ``undefined``: the kernel promises nothing once an accumulator may leave
  int32: at-risk elements are excluded and counted.

At risk: with ``P`` the sum of the element's positive products and ``Q`` the
magnitude of the sum of its negative products, every partial sum in every
order lies in ``[-Q, P]`` (a partial sum adds a subset of the products), and
the orders that add all positives first / all negatives first reach ``P`` /
``-Q``. So the element can leave int32 in some order iff ``P > 2**31 - 1`` or
``Q > 2**31``. ``P + Q = |a| @ |b|.T`` (the tight bound of C3) and
``P - Q = exact``, so both come from two integer GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from conformance.kernels.spec import OVERFLOW_BEHAVIOURS  # noqa: E402,F401 -- one definition
from reference import readback

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


@dataclass
class DeclaredAccumulator:
    """What the declared overflow behaviour makes of the exact accumulator.

    Attributes:
        acc: int64 [M, N]: the exact sum where no order leaves int32, else
            the declared behaviour's value (wrapped / clamped); undefined
            elements keep the exact sum (they are masked out anyway).
        defined: bool [M, N]: False where the declaration leaves the value
            undefined (excluded from the comparison).
        at_risk: bool [M, N]: some summation order leaves int32.
        behaviour: ``wrap`` | ``saturate`` | ``undefined``.
        alternative: int64 [M, N] also accepted where ``at_risk`` (``wrap``:
            the exact sum, from an accumulator wider than int32), or None.
    """

    acc: Tensor
    defined: Tensor
    at_risk: Tensor
    behaviour: str
    alternative: Optional[Tensor] = None
    #: the two counts, once known (no device read-back per question)
    _counts: dict = field(default_factory=dict, repr=False, compare=False)
    #: ``reference.readback.Deferred`` of the counts not known at construction
    _asked: Optional[object] = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        # every element defined by construction (nothing may leave int32, or
        # wrap): checks then compare unmasked without reading a count
        self.all_defined = self._counts.get("undefined") == 0
        # asked now, read with whatever the caller reads next (one read-back)
        missing = [k for k in ("at_risk", "undefined") if k not in self._counts]
        if missing and self._asked is None:
            parts = {"at_risk": self.at_risk, "undefined": ~self.defined}
            self._asked = readback.ask(
                [parts[k].sum() for k in missing], lambda v: dict(zip(missing, (int(x) for x in v)))
            )

    def known(self, key: str) -> Optional[int]:
        """The count ``key`` (``at_risk`` / ``undefined``) when it is known
        without a read-back (given at construction, or already read), else None."""
        if key not in self._counts and self._asked is not None and self._asked.done:
            self._counts.update(self._asked.get())
        return self._counts.get(key)

    def _count(self, key: str) -> int:
        if key not in self._counts:
            self._counts.update(self._asked.get())
        return self._counts[key]

    @property
    def n_at_risk(self) -> int:
        """Elements where some summation order leaves int32."""
        return self._count("at_risk")

    @property
    def n_undefined(self) -> int:
        """Elements excluded because the declaration leaves them undefined."""
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
    """Whether an int8 GEMM over ``k`` products can leave int32 at all: each
    product is at most (-128)^2 = 2^14 in magnitude, so ``|acc| <= k * 2^14``
    and ``k < 131072`` never overflows (the cheap exit of every overflow test)."""
    return int(k) * 16384 > INT32_MAX


def wrap32(x: Tensor) -> Tensor:
    """int64 -> int64 holding the two's-complement int32 wrap of ``x``
    (inside a ``reference.memo`` scope its int32 range is noted:
    ``memo.note_bound``)."""
    from reference import memo

    w = ((x.to(torch.int64) + 2**31) % 2**32) - 2**31
    memo.note_bound(w, 2**31)
    return w


def positive_negative_sums(a: Tensor, b: Tensor, exact: Tensor) -> tuple[Tensor, Tensor]:
    """``(P, Q)`` int64 [M, N]: sum of the positive products and magnitude of
    the sum of the negative products of each element (module docstring).

    Args:
        a: int8 [M, K]; b: int8 [N, K] (CPU); exact: int64 [M, N] ``a @ b.T``.
    """
    from reference.accumulate import accumulator_row_col_bound

    tight = accumulator_row_col_bound(a, b).to(torch.int64)
    return (tight + exact) // 2, (tight - exact) // 2


def declared_accumulator(ops, exact: Tensor, behaviour: str = "wrap") -> DeclaredAccumulator:
    """The accumulator of ``ops`` under a declared overflow behaviour.

    Args:
        ops: GemmOperands (``a`` int8 [M, K], ``b`` int8 [N, K]).
        exact: exact int64 accumulator [M, N].
        behaviour: one of :data:`OVERFLOW_BEHAVIOURS`.

    Returns:
        :class:`DeclaredAccumulator`.

    Raises:
        ValueError: unknown behaviour.
    """
    if behaviour not in OVERFLOW_BEHAVIOURS:
        raise ValueError(f"overflow behaviour {behaviour!r} is not one of {OVERFLOW_BEHAVIOURS}")
    from reference import memo

    # a pure function of (a, b, exact, behaviour): every output check of a
    # sweep cell asks for it (memoized inside a reference.memo scope only)
    return memo.cached(
        ("declared", behaviour), (ops.a, ops.b, exact), lambda: _declared_accumulator(ops, exact, behaviour)
    )


def _declared_accumulator(ops, exact: Tensor, behaviour: str) -> DeclaredAccumulator:
    """:func:`declared_accumulator` computed (no memo)."""
    exact = exact.to(torch.int64)
    if not may_leave_int32(ops.a.shape[1]):  # the usual case
        none = torch.zeros_like(exact, dtype=torch.bool)
        return DeclaredAccumulator(exact, ~none, none, behaviour, _counts={"at_risk": 0, "undefined": 0})
    from reference import memo

    p, q = positive_negative_sums(ops.a.to(exact.device), ops.b.to(exact.device), exact)
    at_risk = (p > INT32_MAX) | (q > -INT32_MIN)
    acc = exact.clone()
    defined = torch.ones_like(at_risk)
    # the declared accumulator is no larger than the exact one (or int32's range)
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
    """int64 ``clamp(exact)`` to the int32 range (for diagnosing a mismatch;
    the range is noted as in :func:`wrap32`)."""
    from reference import memo

    s = exact.to(torch.int64).clamp(INT32_MIN, INT32_MAX)
    memo.note_bound(s, 2**31)
    return s
