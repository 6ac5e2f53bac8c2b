"""Where a failing check switches on (:func:`find_boundaries`): per M, N, K the boundary between a passing and a
failing value, and per categorical flip whether the failure stays.

A candidate is judged by running the kernel and the one check that failed (:func:`fails`): a kernel that raises,
returns no valid output or dies in the call counts as failing. For each dimension, holding the others: halve the
failing value down to 1 until a value passes; if none does, double it up to ``cap`` (and M * N * K up to
``max_macs``); then bisect between the last failing and the passing value. Where the failing side lies above, double
up from the case's value too: a value that passes there ends the failing side (an M bucket), its edge bisected the
same way. Both sides of a reported edge are verified by a call. Afterwards the midpoints between consecutive
failing probes are tried (budget allowing): one that passes makes the finding non-monotone, reported as its probed
points (``monotone=False``), not as a boundary. A passing value whose neighbours both fail is an alignment (K % 16),
reported as its period (``Boundary.period``; checked before bisecting and at the edge). Deterministic; never raises
for a kernel's failure; at most ``budget`` values probed per dimension (a passing value is retried re-planted, up to
three calls).

A product (:func:`search_product`: M * N * K, else M * N, the output size a persistent schedule counts in tiles,
M * K or N * K): where its factors are monotone boundaries with larger values failing and every probed passing
product lies below every failing one, two calls at another aspect ratio (one dimension doubled, another derived)
test it on both sides; else the dimensions act separately.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from conformance.checks.accumulator import observe_accumulator
from conformance.checks.result import CALL_ID, INTERFACE_ID
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case, per_case_checks
from conformance.triage.flips import flips, own_values
from conformance.triage.focus import ACCUMULATOR_CHECKS, Lines, differing_lines, told_apart
from conformance.triage.reshape import at_shape, operand_forms, replanted, reseeded, row_index
from reference.operands import GemmOperands

#: Kernel calls per numeric attribute unless told.
DEFAULT_BUDGET = 24
#: Values a dimension probes whatever its seconds say.
MIN_VALUES = 4
#: The largest value a search going up tries (per dimension).
DEFAULT_CAP = 8192
#: The largest M * N * K a search going up tries (a CPU kernel call and its check stay well under a second).
DEFAULT_MAX_MACS = 1 << 24
#: The pseudo-checks of the call itself (``checks.result``): it raised or gave no output, it broke the interface.
CALL_CHECKS = (CALL_ID, INTERFACE_ID)
#: Flips that change the case's values themselves (not retried on re-planted values).
VALUE_FLIPS = ("magnitude:",)
#: The numeric attributes searched, in order.
DIMENSIONS = ("m", "n", "k")
#: Kernel calls of the product's verification (one each side).
PRODUCT_CALLS = 2
#: The products tried, in order (M*N: the number of output tiles, as a persistent schedule counts them).
PRODUCTS = (("m", "n", "k"), ("m", "n"), ("m", "k"), ("n", "k"))
#: (derived, doubled) dimension pairs a product is verified with, in order (K last: cropping K changes values).
PRODUCT_PAIRS = (("m", "n"), ("n", "m"), ("m", "k"), ("n", "k"), ("k", "m"), ("k", "n"))


@dataclass(frozen=True)
class Boundary:
    """One dimension's finding. ``passes_at`` / ``fails_at``: the verified passing and failing values nearest each
    other (``passes_at`` None: no passing value found within the budget and cap); adjacent (differ by 1) when the
    bisection finished. ``calls``: kernel calls spent. ``monotone`` False: a probe between failing values passed;
    read ``points`` (every probed ``(value, fails)``, sorted by value) instead of the pair. ``replanted``: the
    values that failed only re-planted with the differing rows / columns (:class:`_Probe`). ``blind``: K's passing
    value lies below the case's K and its cropped and re-planted values tell fewer legal epilogues apart than the
    failing value's (:func:`conformance.triage.focus.told_apart`): a pass of the values, maybe not of the path.
    ``upper_fails_at`` / ``upper_passes_at``: where a failing side above the boundary ends (an M bucket: fails
    from ``fails_at`` to ``upper_fails_at``, passes again at ``upper_passes_at``); None: it did not end within
    the budget and cap. ``form_floor``: the search down stopped there, the case's operand forms (a transposed or
    padded operand) cannot be held at that value (:meth:`_Probe.formable`). ``period``: it passes only at multiples
    of it (``monotone`` False; ``passes_at`` and ``passes_at`` +- ``period`` passed, the values between failed):
    an alignment the kernel branches on, e.g. K % 16."""

    attribute: str
    passes_at: Optional[int]
    fails_at: int
    calls: int
    monotone: bool = True
    points: tuple = ()
    replanted: tuple = ()
    blind: bool = False
    upper_fails_at: Optional[int] = None
    upper_passes_at: Optional[int] = None
    form_floor: Optional[int] = None
    period: Optional[int] = None

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
    the check still ``fails`` there; ``unverified``: it passed on the case's values only, its re-planted retries not
    made (the search's calls or seconds spent), so the pass may be the values'."""

    attribute: str
    value: str
    fails: bool
    was: str = ""
    unverified: bool = False

    def to_dict(self) -> dict:
        """JSON-able form; ``from``: the case's own value."""
        d = {"attribute": self.attribute, "value": self.value, "fails": self.fails, "from": self.was}
        return d | ({"unverified": True} if self.unverified else {})


@dataclass(frozen=True)
class ProductBoundary:
    """A product of dimensions (``dims``: M*N*K, M*N, ...) as one attribute. ``passes_at`` / ``fails_at``: the
    largest passing and smallest failing product probed (None where no product's passing values lie below its
    failing ones, or too few dimensions have a monotone boundary with larger values failing); ``verified``: both
    calls at another aspect ratio (``probes``: ``(M, K, N, fails)``) agreed with the product; ``note``: why it is
    not a product boundary (empty when verified)."""

    passes_at: Optional[int]
    fails_at: Optional[int]
    verified: bool
    calls: int
    probes: tuple = ()
    note: str = ""
    dims: tuple = DIMENSIONS

    @property
    def label(self) -> str:
        """``M*N*K``, ``M*N``, ... (the report's attribute)."""
        return "*".join(d.upper() for d in self.dims)

    def to_dict(self) -> dict:
        """JSON-able form; ``attribute``: :attr:`label`."""
        return {
            "attribute": self.label,
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
    the :class:`ProductBoundary` (None unless all three were searched), a :class:`Flip` per categorical variant,
    the differing ``lines`` probes were re-planted with (None: unknown or not focused) and the kernel calls spent in
    all."""

    check_id: str
    shape: list
    lines: Optional[Lines] = None
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
                    "replanted": list(b.replanted),
                    "blind": b.blind,
                    "upper_fails_at": b.upper_fails_at,
                    "upper_passes_at": b.upper_passes_at,
                    "form_floor": b.form_floor,
                    "period": b.period,
                }
                for k, b in self.boundaries.items()
            },
            "product": None if self.product is None else self.product.to_dict(),
            "flips": [f.to_dict() for f in self.flips],
            "calls": self.calls,
        } | ({} if self.lines is None else {"differing": self.lines.to_dict()})


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
        if check_id in CALL_CHECKS:  # the call itself: no output, a raise, an interface violation
            run = run_kernel(spec, ops, device=device)
            return bool(run.output is None or run.raised is not None or run.interface), None
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
    """Judges one dimension's values, memoized, counting the values probed against a budget. A value whose cropped probe
    passes is tried again re-planted (:meth:`_fails`) when the case's differing ``lines`` are known
    (:mod:`conformance.triage.focus`) and the re-planted probe differs."""

    def __init__(
        self, spec, ops, check_id, dim, budget, device, lines: Optional[Lines] = None, on_call=None, seconds=None
    ):
        self.spec, self.ops, self.check_id, self.dim, self.device = spec, ops, check_id, dim, device
        self.budget, self.lines, self.on_call = budget, lines, on_call
        self.deadline = None if seconds is None else time.perf_counter() + seconds
        self.seen: dict[int, bool] = {}
        self.calls = 0
        self.replanted: list[int] = []  # values that failed only re-planted
        self._forms: dict[int, bool] = {}

    @property
    def spent(self) -> bool:
        """``budget`` values probed (a re-planted retry is the same value's: :attr:`calls` counts every call), or,
        past :data:`MIN_VALUES` of them, the dimension's seconds spent."""
        late = self.deadline is not None and len(self.seen) >= MIN_VALUES and time.perf_counter() > self.deadline
        return len(self.seen) >= self.budget or late

    def _fails(self, value: int, again: bool = False) -> bool:
        """One call at ``value``: cropped / tiled, or ``again`` re-planted (M / N: its differing lines tiled; K below
        the case's: :func:`conformance.triage.reshape.replanted`, then :func:`conformance.triage.reshape.reseeded`
        values under the case's own scales, two calls; K above it: the case's columns tiled instead of zeros, so a
        bug in the last K columns sees data there)."""
        size = {self.dim: value}
        rows, cols = self._lines() if again else (None, None)
        ops = at_shape(self.ops, m=size.get("m"), n=size.get("n"), k=size.get("k"), rows=rows, cols=cols)
        if again and self.dim == "k":  # above the case's K: its columns tiled into the new ones (not zeros)
            ops = replanted(self.ops, value) if value < self.ops.k else at_shape(self.ops, k=value, k_fill="tile")
        if self.on_call is not None:
            self.on_call(f"{self.dim.upper()}={value}" + (" re-planted" if again else ""), ops)
        self.calls += 1
        if fails(self.spec, ops, self.check_id, self.device):
            return True
        if again and self.dim == "k" and value < self.ops.k:  # full-range values, the case's scales and bias
            ops = reseeded(at_shape(self.ops, k=value))
            if self.on_call is not None:
                self.on_call(f"K={value} reseeded", ops)
            self.calls += 1
            return fails(self.spec, ops, self.check_id, self.device)
        return False

    def _replant_differs(self, value: int) -> bool:
        """The re-planted probe at ``value`` differs from the cropped one (other rows or columns; another K than the
        case's: other values)."""
        if self.lines is None:
            return False
        if self.dim == "k":
            return value != self.ops.k
        m, n = (value if self.dim == "m" else self.ops.m), (value if self.dim == "n" else self.ops.n)
        rows, cols = self._lines()
        return not (
            torch.equal(row_index(self.ops.m, m), row_index(self.ops.m, m, rows))
            and torch.equal(row_index(self.ops.n, n), row_index(self.ops.n, n, cols))
        )

    def _lines(self) -> tuple:
        """``(rows, cols)`` a re-planted probe tiles: the differing rows for M, columns for N (the other
        dimension's lines stay the case's: a bug of a row's position, e.g. a tail row reading its neighbour's scale,
        needs its neighbours)."""
        if self.lines is None:
            return None, None
        return (self.lines.rows if self.dim == "m" else None), (self.lines.cols if self.dim == "n" else None)

    def blind(self, value: int, failing: int) -> bool:
        """The K probes at ``value`` (cropped and re-planted) tell apart fewer legal epilogues than those at
        ``failing`` (no kernel call; :func:`conformance.triage.focus.told_apart`)."""

        def told(k: int) -> Optional[frozenset]:
            probes = [at_shape(self.ops, k=k)] + ([replanted(self.ops, k)] if self.lines is not None else [])
            pairs = [told_apart(p) for p in probes]
            return None if any(p is None for p in pairs) else frozenset().union(*pairs)

        there, here = told(failing), told(value)
        return there is not None and here is not None and bool(there - here)

    def formable(self, value: int) -> bool:
        """The case's operand forms hold at ``value`` (a transposed or padded operand reads as dense at size 1; no
        kernel call)."""
        if value not in self._forms:
            size = {self.dim: value}
            probe = at_shape(self.ops, m=size.get("m"), n=size.get("n"), k=size.get("k"))
            self._forms[value] = operand_forms(probe) == operand_forms(self.ops)
        return self._forms[value]

    def __call__(self, value: int) -> bool:
        if value not in self.seen:
            verdict = self._fails(value)
            if not verdict and self._replant_differs(value):
                verdict = self._fails(value, again=True)
                if verdict:
                    self.replanted.append(value)
            self.seen[value] = verdict
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
    lines: Optional[Lines] = None,
    on_call: Optional[Callable[[str, GemmOperands], None]] = None,
    seconds: Optional[float] = None,
) -> Boundary:
    """The :class:`Boundary` of dimension ``dim`` (``m`` / ``n`` / ``k``) of failing case ``ops`` (module
    docstring). ``ops`` is first verified to fail (one call); if it passes, ``Boundary(dim, passes_at=value,
    fails_at=value, monotone=False)`` says so. ``lines``: the differing rows / columns a passing probe is
    re-planted with (:func:`conformance.triage.focus.differing_lines`); ``on_call(what, ops)`` is told of each
    kernel call before it is made (``what``: ``"M=257"``, ``"K=28 re-planted"``); ``seconds``: the dimension's time,
    after which (past :data:`MIN_VALUES` values) it probes no more."""
    start = int(getattr(ops, dim))
    probe = _Probe(spec, ops, check_id, dim, max(1, budget), device, lines, on_call, seconds)
    if not probe(start):
        return Boundary(dim, start, start, probe.calls, False, ((start, False),))
    chain = [start]  # failing values in probe order
    passing: Optional[int] = None
    v = start
    floor = None  # the largest value below the case's where its operand forms cannot be held
    while v > 1 and not probe.spent:  # down by halving
        v = v // 2
        if not probe.formable(v):
            floor, w = v, v + 1  # the smallest value above it that holds the forms, when not yet probed
            if w < chain[-1] and probe.formable(w) and not probe.spent:
                if probe(w):
                    chain.append(w)
                else:
                    passing = w
            break
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
        rp = tuple(sorted(probe.replanted))
        return Boundary(dim, None, failing, probe.calls, True, _points(probe), rp, form_floor=floor)
    period = _alignment(probe, passing, chain[-1], top)  # K % 16: bisecting toward it finds no threshold
    if period is not None:
        failing = passing + 1 if chain[-1] > passing else passing - 1
        rp = tuple(sorted(probe.replanted))
        return Boundary(dim, passing, failing, probe.calls, False, _points(probe), rp, period=period)
    failing, passing = _bisect(probe, chain[-1], passing)
    upper = None  # (failing, passing) of the failing side's far edge, when a value above the case's passes
    periodic = False
    if failing > passing:
        v = start
        while v < top and not probe.spent:  # up by doubling: does the failing side end?
            v = min(top, v * 2)
            if probe(v):
                chain.append(v)
            else:
                upper = (max(x for x in chain if x < v), v)
                break
        if upper is not None and probe(upper[1] + 1):  # fails again just past: not a bucket (beyond the budget)
            chain.append(upper[1] + 1)
            periodic, upper = True, None
        elif upper is not None:
            upper = _bisect(probe, upper[0], upper[1])
    monotone = not periodic
    ordered = sorted(chain)
    for lo, hi in zip(ordered, ordered[1:]):  # a passing value between failing ones breaks monotony
        if probe.spent:
            break
        mid = (lo + hi) // 2
        if lo < mid < hi and not probe(mid):
            monotone = False
    last = upper[0] if upper is not None else None
    if any(not f for val, f in probe.seen.items() if _beyond(val, failing, passing, last)):
        monotone = False
    period = _alignment(probe, passing, failing, top) if abs(failing - passing) == 1 else None
    blind = dim == "k" and passing < start and probe.blind(passing, failing)
    edge = upper if upper is not None else (None, None)
    replanted = tuple(sorted(probe.replanted))
    monotone = monotone and period is None
    return Boundary(
        dim, passing, failing, probe.calls, monotone, _points(probe), replanted, blind, *edge, period=period
    )


def _alignment(probe: _Probe, passing: int, failing: int, top: int) -> Optional[int]:
    """The alignment a failure needs, where ``passing`` passes alone (its lowest set bit ``low`` >= 2): a value an
    odd step away from it on the side away from ``failing`` fails (``+-1``, then ``+-(low - 1)``: a tail of one
    element may hide in the values; a threshold passes both), and one toward ``failing`` (``-+1``) fails too; the
    period is then the smallest power of two ``d`` <= ``low`` with ``passing + d`` passing, searched down from
    ``low`` (``passing + d / 2`` fails), and ``passing - d`` passes (or is below 1). None otherwise, or where the
    budget ends first."""
    low = passing & -passing
    if low < 2:
        return None
    side = 1 if passing > failing else -1  # away from the failing side

    def fails_at(v: int) -> bool:
        return 1 <= v <= max(top, passing + low) and probe.formable(v) and not probe.spent and probe(v)

    steps = (1, low - 1) if low > 2 else (1,)
    if not any(fails_at(passing + side * s) for s in steps) or not fails_at(passing - side):
        return None
    period = None
    d = low
    while d >= 2 and not probe.spent:
        if fails_at(passing + d):
            break
        period, d = d, d // 2
    if period is None or probe.spent:
        return None
    below = passing - period
    return period if below < 1 or not probe.formable(below) or not probe(below) else None


def _bisect(probe: _Probe, failing: int, passing: int) -> tuple[int, int]:
    """``(failing, passing)`` adjacent (budget allowing), bisecting between the two given."""
    while abs(failing - passing) > 1 and not probe.spent:
        mid = (failing + passing) // 2
        if probe(mid):
            failing = mid
        else:
            passing = mid
    return failing, passing


def _beyond(value: int, failing: int, passing: int, last: Optional[int] = None) -> bool:
    """``value`` lies on the failing side of the pair (failing included; up to ``last`` when the side ends)."""
    if failing > passing:
        return failing <= value <= (last if last is not None else value)
    return value <= failing


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
    focus: bool = True,
    on_call: Optional[Callable[[str, GemmOperands, BoundarySearch], None]] = None,
    product: bool = True,
    total: Optional[int] = None,
    seconds: Optional[float] = None,
) -> BoundarySearch:
    """The boundaries of failing case ``ops`` for ``check_id`` (a per-case check id of ``per_case_checks(spec)``,
    or C10): :func:`search_dimension` for each of ``dims`` (at most ``budget`` calls each, values up to ``cap``,
    shapes up to ``max_macs`` going up; with ``focus``, a passing probe retried re-planted with the case's
    differing rows / columns, one call to find them); with ``product`` and all three dimensions,
    :func:`search_product` (at most :data:`PRODUCT_CALLS`); then, with ``categorical``, one call per variant of
    :func:`conformance.triage.flips.flips` (each :class:`Flip` with the case's own value; a passing one retried on
    the differing lines tiled, then, but for a :data:`VALUE_FLIPS` one, on a case planted for the flipped attribute:
    ``reshape.replanted``). ``on_call(what, ops, search)`` is told of each kernel call before it is made, with
    the search so far (a crash's last words). ``total``: the calls of the whole search; past it the product is
    not verified and a flip gets its first call only; ``seconds``: the search's time, a quarter of it per
    dimension, the product and the flips' retries only while some is left (then not deterministic: a slower machine
    probes less). Deterministic otherwise; never raises for a kernel's failure.

    Raises:
        ValueError: a dimension outside ``DIMENSIONS``.
    """
    bad = [d for d in dims if d not in DIMENSIONS]
    if bad:
        raise ValueError(f"find_boundaries: unknown dimension(s) {bad}; known: {DIMENSIONS}")
    out = BoundarySearch(check_id, [ops.m, ops.k, ops.n])
    t0 = time.perf_counter()

    def tell(what: str, probe: GemmOperands) -> None:
        if on_call is not None:
            on_call(what, probe, out)

    if focus:
        tell("the case (where it differs)", ops)
        out.lines = differing_lines(spec, ops, check_id, device)
        out.calls += 1
    for d in dims:
        quarter = None if seconds is None else seconds / 4
        b = search_dimension(spec, ops, check_id, d, budget, cap, device, max_macs, out.lines, tell, quarter)
        out.boundaries[d] = b
        out.calls += b.calls

    def left() -> bool:
        in_time = seconds is None or time.perf_counter() - t0 < seconds
        return (total is None or out.calls < total) and in_time

    if product and all(d in out.boundaries for d in DIMENSIONS) and left():
        out.product = search_product(spec, ops, check_id, out.boundaries, cap, device, max_macs)
        out.calls += out.product.calls
    if categorical:
        again: Optional[dict] = None
        own = own_values(ops)
        for attribute, value, variant in flips(ops):
            tell(f"flip {attribute} {value}", variant)
            verdict = fails(spec, variant, check_id, device)
            out.calls += 1
            if not verdict and out.lines is not None and left():  # retried on the differing lines tiled
                if again is None:
                    focused = at_shape(ops, rows=out.lines.rows, cols=out.lines.cols)
                    again = {(a, v): o for a, v, o in flips(focused)}
                if (attribute, value) in again:
                    tell(f"flip {attribute} {value} on the differing lines", again[(attribute, value)])
                    verdict = fails(spec, again[(attribute, value)], check_id, device)
                    out.calls += 1
            if not verdict and out.lines is not None and not attribute.startswith(VALUE_FLIPS) and left():
                fresh = replanted(variant, variant.k)  # values planted for the flipped attribute (its out dtype...)
                tell(f"flip {attribute} {value} re-planted", fresh)
                verdict = fails(spec, fresh, check_id, device)
                out.calls += 1
            retriable = out.lines is not None and not attribute.startswith(VALUE_FLIPS)
            unverified = not verdict and retriable and not left()
            out.flips.append(Flip(attribute, value, verdict, own.get(attribute, ""), unverified))
    return out


def _products(ops: GemmOperands, boundaries: dict, dims: tuple) -> tuple[list, list]:
    """``(passing, failing)``: ``(product of dims, (M, K, N))`` of every probe of the ``dims``' boundaries (others at
    the case's)."""
    passing, failing = [], []
    for d in dims:
        for v, f in boundaries[d].points:
            size = {"m": ops.m, "n": ops.n, "k": ops.k, d: int(v)}
            prod = math.prod(size[x] for x in dims)
            (failing if f else passing).append((prod, (size["m"], size["k"], size["n"])))
    return passing, failing


def _gating(b: Boundary) -> Optional[str]:
    """Why ``b`` cannot be a factor of a product boundary (None: it can: monotone, larger values failing, a
    passing value found)."""
    if not b.monotone:
        return "not monotone"
    if b.passes_at is None:
        return "no passing value"
    return None if b.fails_above else "fails below"


def search_product(
    spec,
    ops: GemmOperands,
    check_id: str,
    boundaries: dict,
    cap: int = DEFAULT_CAP,
    device: Optional[str] = None,
    max_macs: int = DEFAULT_MAX_MACS,
) -> ProductBoundary:
    """Whether a product of dimensions (M*N*K, else M*N, M*K or N*K: :data:`PRODUCTS`) decides the failure of
    ``ops`` (module docstring). ``boundaries``: a :class:`Boundary` per M, N, K. The first product whose factors
    are each monotone with larger values failing and a passing value found, and whose probes (its factors' only)
    put every passing product (P the largest) below every failing one (F the smallest), is verified: for the first
    pair (x, y) of its factors (:data:`PRODUCT_PAIRS`) that fits (x >= 1, 2 y <= ``cap``), y doubled, x = P // (2 y
    z) must pass and x = ceil(F / (2 y z)) must fail (z: its other factor, if any; a gate on one dimension alone
    contradicts one of the two). At most :data:`PRODUCT_CALLS` kernel calls; never raises for a kernel's failure."""
    why = {d: _gating(boundaries[d]) for d in DIMENSIONS}
    size = {"m": ops.m, "n": ops.n, "k": ops.k}
    notes = []
    for dims in PRODUCTS:
        label = "*".join(d.upper() for d in dims)
        bad = next((d for d in dims if why[d] is not None), None)
        if bad is not None:
            notes += [] if f"{bad.upper()}: {why[bad]}" in notes else [f"{bad.upper()}: {why[bad]}"]
            continue
        passing, failing = _products(ops, boundaries, dims)
        (p, p_at), (f, f_at) = max(passing), min(failing)
        if p >= f:
            at = lambda q: ",".join(map(str, q))  # noqa: E731
            notes.append(f"{label} {p} passes at M,K,N {at(p_at)}, {f} fails at {at(f_at)}")
            continue
        free = math.prod(size[d] for d in DIMENSIONS if d not in dims)  # the dimensions the product leaves out
        for x, y in PRODUCT_PAIRS:
            if x not in dims or y not in dims:
                continue
            y2 = 2 * size[y]
            rest = y2 * math.prod(size[z] for z in dims if z not in (x, y))
            lo, hi = p // rest, -(-f // rest)
            if lo < 1 or y2 > cap or hi * rest * free > max(max_macs, 2 * f * free):
                continue
            probes = []
            for v in (lo, hi):
                at = dict(size, **{y: y2, x: v})
                verdict = fails(spec, at_shape(ops, m=at["m"], n=at["n"], k=at["k"]), check_id, device)
                probes.append((at["m"], at["k"], at["n"], verdict))
            if probes[0][3] or not probes[1][3]:
                shape = ", ".join(f"{'fails' if q[3] else 'passes'} at M,K,N {q[0]},{q[1]},{q[2]}" for q in probes)
                note = f"the dimensions act separately (at another aspect ratio {label} does not decide: {shape})"
                return ProductBoundary(p, f, False, len(probes), tuple(probes), note, dims)
            return ProductBoundary(max(p, lo * rest), min(f, hi * rest), True, len(probes), tuple(probes), "", dims)
        return ProductBoundary(p, f, False, 0, (), "not verified: no other aspect ratio within the cap", dims)
    return ProductBoundary(None, None, False, 0, (), f"the dimensions act separately ({'; '.join(notes[:2])})")
