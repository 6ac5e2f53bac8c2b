"""Where a failing check switches on (:func:`find_boundaries`): per M, N, K the boundary between a passing and a
failing value, and per categorical flip whether the failure stays.

A candidate is judged by running the kernel and the one check that failed (:func:`fails`): a kernel that raises,
returns no valid output or dies in the call counts as failing. For each dimension, holding the others: halve the
failing value down to 1 until a value passes; if none does, double it up to ``cap`` (and M * N * K up to
``max_macs``); then bisect between the last
failing and the passing value. Both sides of a reported boundary are verified by a call. Afterwards the midpoints
between consecutive failing probes are tried (budget allowing): one that passes makes the finding non-monotone,
reported as its probed points (``monotone=False``), not as a boundary. Deterministic; never raises for a kernel's
failure; at most ``budget`` kernel calls per attribute (one per flip).

The product M * N * K (:func:`search_product`): where all three are monotone boundaries with larger values failing
and every probed passing product lies below every failing one, two calls at another aspect ratio (one dimension
doubled, another derived) test it on both sides; else the dimensions act separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from conformance.checks.accumulator import observe_accumulator
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case, per_case_checks
from conformance.triage.flips import flips, own_values
from conformance.triage.reshape import at_shape
from reference.operands import GemmOperands

#: Kernel calls per numeric attribute unless told.
DEFAULT_BUDGET = 24
#: The largest value a search going up tries (per dimension).
DEFAULT_CAP = 8192
#: The largest M * N * K a search going up tries (a CPU kernel call and its check stay well under a second).
DEFAULT_MAX_MACS = 1 << 24
#: The numeric attributes searched, in order.
DIMENSIONS = ("m", "n", "k")
#: The checks that read the kernel's own accumulator (its ``int_mm`` entry).
ACCUMULATOR_CHECKS = ("C3", "C4")
#: Kernel calls of the product's verification (one each side).
PRODUCT_CALLS = 2
#: (derived, doubled) dimension pairs a product is verified with, in order (K last: cropping K changes values).
PRODUCT_PAIRS = (("m", "n"), ("n", "m"), ("m", "k"), ("n", "k"), ("k", "m"), ("k", "n"))


@dataclass(frozen=True)
class Boundary:
    """One dimension's finding. ``passes_at`` / ``fails_at``: the verified passing and failing values nearest each
    other (``passes_at`` None: no passing value found within the budget and cap); adjacent (differ by 1) when the
    bisection finished. ``calls``: kernel calls spent. ``monotone`` False: a probe between failing values passed;
    read ``points`` (every probed ``(value, fails)``, sorted by value) instead of the pair."""

    attribute: str
    passes_at: Optional[int]
    fails_at: int
    calls: int
    monotone: bool = True
    points: tuple = ()

    @property
    def exact(self) -> bool:
        """A monotone boundary between adjacent values."""
        return self.monotone and self.passes_at is not None and abs(self.passes_at - self.fails_at) == 1

    @property
    def fails_above(self) -> bool:
        """The failing side lies above the boundary (larger values fail)."""
        return self.passes_at is None or self.fails_at > self.passes_at


@dataclass(frozen=True)
class Flip:
    """One categorical variant: ``attribute`` (``out_dtype``, ``bias``, ``layout:a``, ...), ``value``, and whether
    the check still ``fails`` there."""

    attribute: str
    value: str
    fails: bool
    was: str = ""

    def to_dict(self) -> dict:
        """JSON-able form; ``from``: the case's own value."""
        return {"attribute": self.attribute, "value": self.value, "fails": self.fails, "from": self.was}


@dataclass(frozen=True)
class ProductBoundary:
    """M * N * K as one attribute. ``passes_at`` / ``fails_at``: the largest passing and smallest failing product
    probed (None where a passing product is not below every failing one, or a dimension has no monotone boundary
    with larger values failing); ``verified``: both calls at another aspect ratio (``probes``: ``(M, K, N,
    fails)``) agreed with the product; ``note``: why it is not a product boundary (empty when verified)."""

    passes_at: Optional[int]
    fails_at: Optional[int]
    verified: bool
    calls: int
    probes: tuple = ()
    note: str = ""

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {
            "passes_at": self.passes_at,
            "fails_at": self.fails_at,
            "verified": self.verified,
            "calls": self.calls,
            "probes": [list(p) for p in self.probes],
            "note": self.note,
        }


@dataclass
class BoundarySearch:
    """:func:`find_boundaries`' answer: the check, the case's shape [M, K, N], a :class:`Boundary` per dimension,
    the :class:`ProductBoundary` (None unless all three were searched), a :class:`Flip` per categorical variant
    and the kernel calls spent in all."""

    check_id: str
    shape: list
    boundaries: dict = field(default_factory=dict)
    flips: list = field(default_factory=list)
    calls: int = 0
    product: Optional[ProductBoundary] = None

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {
            "check": self.check_id,
            "shape": list(self.shape),
            "boundaries": {
                k: {
                    "passes_at": b.passes_at,
                    "fails_at": b.fails_at,
                    "calls": b.calls,
                    "monotone": b.monotone,
                    "exact": b.exact,
                    "points": [list(p) for p in b.points],
                }
                for k, b in self.boundaries.items()
            },
            "product": None if self.product is None else self.product.to_dict(),
            "flips": [f.to_dict() for f in self.flips],
            "calls": self.calls,
        }


def fails(spec, ops: GemmOperands, check_id: str, device: Optional[str] = None) -> bool:
    """Whether ``check_id`` fails (a kernel failure, not a precondition) for ``spec`` on ``ops``: one kernel call
    and that check (C3 / C4 also call the ``int_mm`` entry; a check outside ``per_case_checks(spec)``, e.g. C10,
    runs the whole :func:`evaluate_case`). A kernel that raises or gives no valid output fails; so does a check
    that raises. Never raises for a kernel's failure."""
    return judge(spec, ops, check_id, device)[0]


def judge(
    spec, ops: GemmOperands, check_id: str, device: Optional[str] = None
) -> tuple[bool, Optional[tuple[int, int]]]:
    """``(fails, element)``: :func:`fails`' verdict (one kernel call) and the output element ``(i, j)`` the failing
    check's evidence names (``first_acc_mismatch``, ``worst`` or the first of ``first_over_tol``; None when it names
    none or the check passed)."""
    table = dict(per_case_checks(spec))
    check = table.get(check_id)
    try:
        if check is None:
            res = evaluate_case(spec, ops, device=device, coverage=False, output_digest=False)
            r = res.checks.get(check_id)
            bad = res.raised is not None or res.interface is not None or bool(r is not None and r.is_kernel_failure)
            return bad, _element(r.evidence if r is not None and bad else {}, ops)
        run = run_kernel(spec, ops, device=device)
        if run.output is None or getattr(run, "raised", None) is not None or getattr(run, "interface", None):
            return True, None
        acc = observe_accumulator(spec, ops, device=device) if check_id in ACCUMULATOR_CHECKS else None
        r = check(spec, ops, run, acc=acc)
        return bool(r.is_kernel_failure), _element(r.evidence, ops) if r.is_kernel_failure else None
    except Exception:  # noqa: BLE001 -- a harness or kernel error on a probe counts as failing, never a crash
        return True, None


def _element(ev: dict, ops: GemmOperands) -> Optional[tuple[int, int]]:
    """The output element a check's evidence names first, inside [M, N]; None without one."""
    firsts = ev.get("first_over_tol") or [None]
    for where in ((ev.get("first_acc_mismatch") or {}).get("index"), (ev.get("worst") or {}).get("index"), firsts[0]):
        if isinstance(where, (list, tuple)) and len(where) >= 2:
            i, j = int(where[0]), int(where[1])
            if 0 <= i < ops.m and 0 <= j < ops.n:
                return i, j
    return None


class _Probe:
    """Judges one dimension's values, memoized, counting calls against a budget."""

    def __init__(self, spec, ops, check_id, dim, budget, device):
        self.spec, self.ops, self.check_id, self.dim, self.budget, self.device = (
            spec,
            ops,
            check_id,
            dim,
            budget,
            device,
        )
        self.seen: dict[int, bool] = {}

    @property
    def calls(self) -> int:
        return len(self.seen)

    @property
    def spent(self) -> bool:
        return self.calls >= self.budget

    def __call__(self, value: int) -> bool:
        if value not in self.seen:
            size = {self.dim: value}
            ops = at_shape(self.ops, m=size.get("m"), n=size.get("n"), k=size.get("k"))
            self.seen[value] = fails(self.spec, ops, self.check_id, self.device)
        return self.seen[value]


def search_dimension(
    spec,
    ops: GemmOperands,
    check_id: str,
    dim: str,
    budget: int = DEFAULT_BUDGET,
    cap: int = DEFAULT_CAP,
    device: Optional[str] = None,
    max_macs: int = DEFAULT_MAX_MACS,
) -> Boundary:
    """The :class:`Boundary` of dimension ``dim`` (``m`` / ``n`` / ``k``) of failing case ``ops`` (module
    docstring). ``ops`` is first verified to fail (one call); if it passes, ``Boundary(dim, passes_at=value,
    fails_at=value, monotone=False)`` says so."""
    start = int(getattr(ops, dim))
    probe = _Probe(spec, ops, check_id, dim, max(1, budget), device)
    if not probe(start):
        return Boundary(dim, start, start, probe.calls, False, ((start, False),))
    chain = [start]  # failing values in probe order
    passing: Optional[int] = None
    v = start
    while v > 1 and not probe.spent:  # down by halving
        v = v // 2
        if probe(v):
            chain.append(v)
        else:
            passing = v
            break
    others = ops.m * ops.n * ops.k // start
    top = max(start, min(cap, max_macs // max(1, others)))
    if passing is None and not probe.spent:  # up by doubling
        v = start
        while v < top and not probe.spent:
            v = min(top, v * 2)
            if probe(v):
                chain.append(v)
            else:
                passing = v
                break
    if passing is None:
        failing = min(chain)
        return Boundary(dim, None, failing, probe.calls, True, _points(probe))
    failing = chain[-1]
    while abs(failing - passing) > 1 and not probe.spent:  # bisect
        mid = (failing + passing) // 2
        if probe(mid):
            failing = mid
        else:
            passing = mid
    monotone = True
    ordered = sorted(chain)
    for lo, hi in zip(ordered, ordered[1:]):  # a passing value between failing ones breaks monotony
        if probe.spent:
            break
        mid = (lo + hi) // 2
        if lo < mid < hi and not probe(mid):
            monotone = False
    if any(not f for val, f in probe.seen.items() if _beyond(val, failing, passing)):
        monotone = False
    return Boundary(dim, passing, failing, probe.calls, monotone, _points(probe))


def _beyond(value: int, failing: int, passing: int) -> bool:
    """``value`` lies on the failing side of the pair (failing included)."""
    return value >= failing if failing > passing else value <= failing


def _points(probe: _Probe) -> tuple:
    return tuple(sorted(probe.seen.items()))


def find_boundaries(
    spec,
    ops: GemmOperands,
    check_id: str,
    budget: int = DEFAULT_BUDGET,
    cap: int = DEFAULT_CAP,
    dims: tuple = DIMENSIONS,
    categorical: bool = True,
    device: Optional[str] = None,
    max_macs: int = DEFAULT_MAX_MACS,
    product: bool = True,
) -> BoundarySearch:
    """The boundaries of failing case ``ops`` for ``check_id`` (a per-case check id of ``per_case_checks(spec)``,
    or C10): :func:`search_dimension` for each of ``dims`` (at most ``budget`` calls each, values up to ``cap``,
    shapes up to ``max_macs`` going up); with ``product`` and all three dimensions, :func:`search_product` (at
    most :data:`PRODUCT_CALLS`); then, with ``categorical``, one call per variant of
    :func:`conformance.triage.flips.flips` (each :class:`Flip` with the case's own value). Deterministic; never
    raises for a kernel's failure.

    Raises:
        ValueError: a dimension outside ``DIMENSIONS``.
    """
    bad = [d for d in dims if d not in DIMENSIONS]
    if bad:
        raise ValueError(f"find_boundaries: unknown dimension(s) {bad}; known: {DIMENSIONS}")
    out = BoundarySearch(check_id, [ops.m, ops.k, ops.n])
    for d in dims:
        b = search_dimension(spec, ops, check_id, d, budget=budget, cap=cap, device=device, max_macs=max_macs)
        out.boundaries[d] = b
        out.calls += b.calls
    if product and all(d in out.boundaries for d in DIMENSIONS):
        out.product = search_product(spec, ops, check_id, out.boundaries, cap, device, max_macs)
        out.calls += out.product.calls
    if categorical:
        own = own_values(ops)
        for attribute, value, variant in flips(ops):
            out.flips.append(Flip(attribute, value, fails(spec, variant, check_id, device), own.get(attribute, "")))
            out.calls += 1
    return out


def _products(ops: GemmOperands, boundaries: dict) -> tuple[list, list]:
    """``(passing, failing)``: ``(M * N * K, (M, K, N))`` of every probe of ``boundaries`` (others at the case's)."""
    passing, failing = [], []
    for d, b in boundaries.items():
        for v, f in b.points:
            size = {"m": ops.m, "n": ops.n, "k": ops.k, d: int(v)}
            (failing if f else passing).append((size["m"] * size["n"] * size["k"], (size["m"], size["k"], size["n"])))
    return passing, failing


def search_product(
    spec,
    ops: GemmOperands,
    check_id: str,
    boundaries: dict,
    cap: int = DEFAULT_CAP,
    device: Optional[str] = None,
    max_macs: int = DEFAULT_MAX_MACS,
) -> ProductBoundary:
    """Whether M * N * K decides the failure of ``ops`` (module docstring). ``boundaries``: a monotone
    :class:`Boundary` per M, N, K. If every passing product probed (P the largest) lies below every failing one (F
    the smallest), for the first pair (x, y) of :data:`PRODUCT_PAIRS` that fits (x >= 1, 2 y <= ``cap``): y
    doubled, x = P // (2 y z) must pass and x = ceil(F / (2 y z)) must fail (a gate on one dimension alone
    contradicts one of the two). At most :data:`PRODUCT_CALLS` kernel calls; never raises for a kernel's failure."""
    for d in DIMENSIONS:
        b = boundaries[d]
        if not b.monotone or b.passes_at is None or not b.fails_above:
            why = "not monotone" if not b.monotone else "no passing value" if b.passes_at is None else "fails below"
            return ProductBoundary(None, None, False, 0, (), f"the dimensions act separately ({d.upper()}: {why})")
    passing, failing = _products(ops, boundaries)
    (p, p_at), (f, f_at) = max(passing), min(failing)
    if p >= f:
        why = f"M*N*K {p} passes at M,K,N {','.join(map(str, p_at))}, {f} fails at {','.join(map(str, f_at))}"
        return ProductBoundary(None, None, False, 0, (), f"the dimensions act separately ({why})")
    size = {"m": ops.m, "n": ops.n, "k": ops.k}
    for x, y in PRODUCT_PAIRS:
        (z,) = (d for d in DIMENSIONS if d not in (x, y))
        y2 = 2 * size[y]
        rest = y2 * size[z]
        lo, hi = p // rest, -(-f // rest)
        if lo < 1 or y2 > cap or hi * rest > max(max_macs, 2 * f):
            continue
        probes = []
        for v in (lo, hi):
            at = {z: size[z], y: y2, x: v}
            verdict = fails(spec, at_shape(ops, m=at["m"], n=at["n"], k=at["k"]), check_id, device)
            probes.append((at["m"], at["k"], at["n"], verdict))
        ok = not probes[0][3] and probes[1][3]
        if not ok:
            shape = ", ".join(f"{'fails' if q[3] else 'passes'} at M,K,N {q[0]},{q[1]},{q[2]}" for q in probes)
            note = f"the dimensions act separately (at another aspect ratio M*N*K does not decide: {shape})"
            return ProductBoundary(p, f, False, len(probes), tuple(probes), note)
        return ProductBoundary(max(p, lo * rest), min(f, hi * rest), True, len(probes), tuple(probes))
    return ProductBoundary(p, f, False, 0, (), "not verified: no other aspect ratio within the cap")
