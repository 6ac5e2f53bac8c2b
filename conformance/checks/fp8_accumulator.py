"""C11 fp8_accumulator (DESIGN.md section 3b): measure a kernel's effective FP8 accumulation, compare it with the
declared :class:`~reference.fp8.AccumulatorModel`.

One call ``scaled_mm(a, b, 1, 1, float32)`` per K of :data:`K_PROBES` (4096, 6144 and 16384: a kernel may change path
at large K): ``a`` [192, K] e4m3 probe rows (zero-padded), ``b`` [16, K]
the fixed pattern ``2**8`` at even k, ``2**-9`` at odd k (a product at an even k lies in [2**-1, 448 * 2**8], at an
odd k in [2**-18, 448 * 2**-9]). The rows are built from the candidate models, never from the declared one. The epilogue is exact: with unit scales and float32 output the output is the float32 value of
the accumulator (an ``exact`` accumulator's one RNE cast included), whatever order the scales are applied in.
Probe rows (exact values in float64, every e4m3 value checked):

* bits, j = 1..24, both signs: ``±2**e`` at k=0, ``±2**(e-j)`` at k=1; B = the smallest j whose addend is not kept.
* rounding at B: ``2**e`` plus 0.75 ulp (both signs; rounded up: ``rne``, else ``truncate``) and 0.5 ulp (ties).
* exactness (B = 24): ``±(2**16, 2**-9, -2**16)`` at k = 0, 1, 2: only an exact accumulator keeps ``2**-9``.
* promotion (B <= 23): ``2**16`` at k=p, ``2**-7`` at k=q (kept only across a promotion): p = 0 and
  q = N-1, N+1 for N = 2..2048, q = 4095 (first interval), p = N and q = 2N±1 (periodicity).

Order: a bits, rounding or promotion row has two nonzero products, so every order or tree gives the same value;
they are added in fp32 when a promotion or split-K boundary separates them (a boundary between k = 0 and 1 makes
the kernel look precise). An exactness row loses ``2**-9`` for k increasing or decreasing, pairwise trees and
splits at even k; an order that cancels the two ``2**16`` first hides an inexact accumulator. Promotion intervals
are located assuming partial sums cover contiguous k ranges from k = 0 (a split-K boundary counts as one).

Regimes (:data:`REGIMES`: K tails, decode M at K >= 8192, N = 65,536, narrow N): :func:`regime_rows` built for the
declared model, judged by :func:`check_regime` against :func:`allowed_values` (exact where the declaration fixes a
row for every summation order, between the allowed values elsewhere). Every output is read through the declared
epilogue for a float32 output (:func:`through_epilogue`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import torch

from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import pick_device
from conformance.kernels.spec import declared_epilogue
from reference.epilogue import apply_steps
from reference.errors import first_line
from reference.fp8 import E4M3, E4M3_MAX, FP32_BITS, AccumulatorModel, parse_accumulator

C11 = "C11"
K_PROBE = 4096
#: Every K C11 measures at: a kernel may take another path (split-K, another tile or promotion setting) at large K;
#: 6144 is Qwen3-1.7B's down_proj K.
K_PROBES = (K_PROBE, 6144, 16384)
N_PROBE = 16
#: b at even / odd k.
B_EVEN, B_ODD = 2.0**8, 2.0**-9
#: Candidate promotion intervals located by the promotion rows.
INTERVALS = tuple(2**i for i in range(1, 12))
#: The promotion rows' addend is 2**-PROMOTE_J of the big product: lost inside any partial sum of <= 23 bits.
PROMOTE_J = 23
BIG_EXP = 16


@dataclass(frozen=True)
class Probe:
    """One probe row: ``kind`` (bits | rounding | tie | exactness | promotion | period), its parameter (j, B, q),
    ``sign``, ``products`` ((k, value), ...) and ``expect`` (name -> value the output may take)."""

    kind: str
    param: int
    sign: int
    products: tuple
    expect: tuple = ()

    @property
    def name(self) -> str:
        at = ",".join(str(k) for k, _ in self.products)
        return f"{self.kind} {self.param} {'+' if self.sign > 0 else '-'} k={at}"

    @property
    def exact(self) -> float:
        return float(sum(v for _, v in self.products))  # dyadic, span < 53 bits: exact


def _bits_probe(j: int, s: int) -> Probe:
    e = min(max(j - 1, -1), BIG_EXP)
    return Probe("bits", j, s, ((0, s * 2.0**e), (1, s * 2.0 ** (e - j))))


def _rounding_probes(bits: int, s: int) -> list[Probe]:
    e = min(bits - 1, BIG_EXP)
    big, ulp = s * 2.0**e, 2.0 ** (e - bits + 1)
    up, down = big + s * ulp, big
    return [
        Probe("rounding", bits, s, ((0, big), (1, s * 0.75 * ulp)), (("up", up), ("down", down))),
        Probe("tie", bits, s, ((0, big), (1, s * 0.5 * ulp)), (("up", up), ("down", down))),
    ]


def _promotion_probe(kind: str, p: int, q: int) -> Probe:
    return Probe(kind, q if kind == "promotion" else p, 1, ((p, 2.0**BIG_EXP), (q, 2.0 ** (BIG_EXP - PROMOTE_J))))


def probes(k: int = K_PROBE) -> list[Probe]:
    """The probe rows of one measurement (module docstring), K = ``k`` (even, >= 2 * max(INTERVALS) + 2)."""
    out = [_bits_probe(j, s) for s in (1, -1) for j in range(1, FP32_BITS + 1)]
    out += [p for s in (1, -1) for bits in range(2, FP32_BITS + 1) for p in _rounding_probes(bits, s)]
    big = 2.0**BIG_EXP
    out += [Probe("exactness", 25, s, ((0, s * big), (1, s * B_ODD), (2, -s * big))) for s in (1, -1)]
    qs = sorted({q for n in INTERVALS for q in (n - 1, n + 1)} | {k - 1})
    out += [_promotion_probe("promotion", 0, q) for q in qs]
    out += [_promotion_probe("period", n, q) for n in INTERVALS if 2 * n + 1 < k for q in (2 * n - 1, 2 * n + 1)]
    return out


def probe_operands(rows: list[Probe], k: int = K_PROBE, n: int = N_PROBE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a e4m3 [M, k], b e4m3 [n, k])``, M = len(rows) rounded up to 16 (zero rows); ValueError if a value is
    not e4m3."""
    m = -(-len(rows) // 16) * 16
    pattern = torch.tensor([B_EVEN if i % 2 == 0 else B_ODD for i in range(k)], dtype=torch.float64)
    a = torch.zeros(m, k, dtype=torch.float64)
    for r, probe in enumerate(rows):
        for kk, v in probe.products:
            a[r, kk] = v / float(pattern[kk])
    b = pattern.expand(n, k)
    a8, b8 = a.to(E4M3), b.to(E4M3)
    if not torch.equal(a8.to(torch.float64), a) or a.abs().max() > E4M3_MAX:
        raise ValueError("fp8_accumulator: a probe value is not e4m3-representable")
    return a8, b8.contiguous()


@dataclass
class MeasuredAccumulator:
    """A measurement: ``model`` (AccumulatorModel), ``bits_observed`` (B before clamping to the model's >= 2),
    ``evidence`` (label, per-probe observed vs exact, notes), ``error`` (one line, the kernel failed) or None."""

    model: Optional[AccumulatorModel]
    bits_observed: int = 0
    evidence: dict = field(default_factory=dict)
    error: Optional[str] = None


def _observe(scaled_mm: Callable, a, b, device: str) -> torch.Tensor:
    one = torch.ones((), dtype=torch.float32, device=device)
    out = scaled_mm(a.to(device), b.to(device), one, one.clone(), out_dtype=torch.float32, bias=None)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or tuple(out.shape) != (a.shape[0], b.shape[0]):
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"output {got}: expected float32 {(a.shape[0], b.shape[0])}")
    return out.detach().to("cpu", torch.float64)


def through_epilogue(steps, values) -> torch.Tensor:
    """float64 [len(values)]: what a kernel whose float32 accumulator holds each of ``values`` returns under the
    declared epilogue ``steps`` (unit scales, no bias, float32 output); ``steps`` None: the values as they are."""
    v = torch.tensor([float(x) for x in values], dtype=torch.float64)
    if steps is None:
        return v
    one = torch.ones(1, dtype=torch.float32)
    return apply_steps(v.to(torch.float32)[:, None], one, one, steps, None, torch.float32)[:, 0].to(torch.float64)


def _lost(p: Probe) -> float:
    """The row's value when its small addend is lost (an exactness row: 0, the two big products cancelled)."""
    return 0.0 if p.kind == "exactness" else float(p.products[0][1])


def measure_accumulator(
    scaled_mm: Callable, device: str = "cpu", k: int = K_PROBE, epilogue=None
) -> MeasuredAccumulator:
    """Measure the accumulator of ``scaled_mm`` (the kernel contract's callable, e4m3 operands) on ``device`` with
    probe rows of ``k`` products, read through the declared ``epilogue`` (steps for a float32 output, or None: the
    output is the accumulator): a row whose kept and lost values the epilogue rounds alike is ``hidden`` and
    measures nothing. A kernel that raises, returns a wrong dtype / shape, or loses even a 2-bit sum gives
    ``model=None`` and ``error``."""
    rows = probes(k)
    a, b = probe_operands(rows, k)
    try:
        out = _observe(scaled_mm, a, b, device)
    except Exception as e:  # noqa: BLE001 -- a user's kernel may raise anything: its failure is a result, not a crash
        return MeasuredAccumulator(None, 0, {}, f"kernel call failed: {first_line(e)}")
    kept_v = through_epilogue(epilogue, [p.exact for p in rows])
    lost_v = through_epilogue(epilogue, [_lost(p) for p in rows])
    observed: dict[str, dict] = {}
    for r, p in enumerate(rows):
        row = out[r]
        o = float(row[0])
        want = float(kept_v[r])
        entry = {"exact": p.exact, "observed": o if math.isfinite(o) else repr(o), "kept": bool((row == want).all())}
        if epilogue is not None and want == float(lost_v[r]):
            entry["hidden"] = True
        for label, v in p.expect:
            entry[label] = bool((row == float(through_epilogue(epilogue, [v])[0])).all())
        if not bool((row == row[0]).all()):
            entry["columns_disagree"] = int((row != row[0]).sum())
        observed[p.name] = entry
    broken = [n for n, e in observed.items() if n.startswith("bits 1 ") and not e["kept"]]
    if broken:
        first = observed[broken[0]]
        line = (
            f"the output is not the accumulator: probe {broken[0]!r} gave {first['observed']}, exact {first['exact']}"
        )
        return MeasuredAccumulator(None, 0, {"probes": observed}, line)
    return _interpret(rows, observed)


def _interpret(rows: list[Probe], obs: dict) -> MeasuredAccumulator:
    notes: list[str] = []
    seen = [p for p in rows if not obs[p.name].get("hidden")]
    lost = [p.param for p in seen if p.kind == "bits" and not obs[p.name]["kept"]]
    bits = min(lost) if lost else FP32_BITS
    if any(p.kind == "bits" and p.param > bits and obs[p.name]["kept"] for p in seen):
        notes.append("bits: an addend below the first lost one was kept (non-monotone)")
    rnd = [obs[p.name] for p in seen if p.kind == "rounding" and p.param == max(bits, 2)]
    rounding = "rne" if all(x["up"] for x in rnd) else "truncate"
    ties = [obs[p.name] for p in seen if p.kind == "tie" and p.param == max(bits, 2)]
    if rounding == "rne" and any(x["up"] for x in ties):
        notes.append("rounding: a tie at the retained precision rounded away from zero")
    exact_rows = [obs[p.name]["kept"] for p in seen if p.kind == "exactness"]
    promote, interval = None, None
    if bits < FP32_BITS:
        promote, interval = _interval(seen, obs, notes)
    if bits >= FP32_BITS and rounding == "rne" and all(exact_rows):
        model = AccumulatorModel("exact")
    elif bits >= FP32_BITS and rounding == "rne":
        model = AccumulatorModel("fp32")
    else:
        if bits < 2:
            notes.append(f"bits: keeps {bits} significant bit(s); model clamped to 2")
        model = AccumulatorModel("fp32", max(bits, 2), rounding, promote)
    ev = {"measured": model.label(), "measured_model": model.to_dict(), "bits_observed": bits}
    hidden = len(rows) - len(seen)
    if hidden:
        notes.append(f"{hidden} probe rows hidden by the declared epilogue's rounding (not measured)")
    ev.update(promotion_interval=interval, notes=notes, probes=obs, hidden_by_epilogue=hidden)
    return MeasuredAccumulator(model, bits, ev)


def _interval(rows: list[Probe], obs: dict, notes: list) -> tuple[Optional[int], Optional[list]]:
    """``(promote_every, [lo, hi])``: the first promotion boundary lies after lo - 1 and at most hi products
    (None, None: no boundary before K); promote_every = lo."""
    first = sorted((p.param, obs[p.name]["kept"]) for p in rows if p.kind == "promotion")
    kept = [q for q, k in first if k]
    if not kept:
        return None, None
    hi = kept[0]
    lo = max([q for q, k in first if q < hi] or [0]) + 1
    if any(not k for q, k in first if q > hi):
        notes.append("promotion: a small product past the first boundary was lost (non-monotone)")
    same = [obs[p.name]["kept"] for p in rows if p.kind == "period" and p.param == lo]
    if len(same) == 2 and same != [False, True]:
        notes.append(f"promotion: no second boundary at 2 x {lo} (not periodic)")
    return lo, [lo, hi]


def shortfall(measured: AccumulatorModel, declared: AccumulatorModel, bits_observed: Optional[int] = None) -> list:
    """Why ``measured`` keeps less than ``declared`` ([] when at least as precise): fewer bits; truncation where
    rne is declared at equal bits; promotion less often (only for a measured model that is not precise)."""
    bits = measured.bits if bits_observed is None else bits_observed
    if declared.kind == "exact":
        return [] if measured.kind == "exact" else [f"declared exact, measured {measured.label()!r}"]
    if measured.precise:
        return []
    out = []
    if bits < declared.bits:
        out.append(f"keeps {bits} significant bits, declared {declared.bits}")
    elif bits == declared.bits and measured.rounding == "truncate" and declared.rounding == "rne":
        out.append(f"truncates at {bits} bits where rne is declared")
    if declared.promote_every is not None and (
        measured.promote_every is None or measured.promote_every > declared.promote_every
    ):
        got = "never" if measured.promote_every is None else f"every {measured.promote_every} products"
        out.append(f"promotes {got}, declared every {declared.promote_every}")
    return out


@dataclass(frozen=True)
class Regime:
    """A shape at which C11 plants discriminating rows: ``name``, ``m`` rows (the first ``m`` of
    :func:`regime_rows`), ``k`` products, ``n`` columns (every column holds the same row)."""

    name: str
    m: int
    k: int
    n: int


#: The regimes a kernel may switch accumulation paths on, each as small as it allows: a K tail (K % 128 != 0, a
#: multiple of 16 and not), the decode path at large K (M = 16 and M = 1), wide N (>= 65,536) and narrow N.
REGIMES = (
    Regime("k_tail", 16, 1104, 16),
    Regime("k_tail_odd", 16, 1043, 16),
    Regime("decode", 16, 8272, 16),
    Regime("decode_m1", 1, 8208, 16),
    Regime("wide_n", 8, 144, 65536),
    Regime("narrow_n", 16, 1104, 8),
)


def _odd(k: int) -> int:
    """The largest odd index below ``k`` (where the small products of a row go)."""
    return k - 1 if (k - 1) % 2 else k - 2


def regime_rows(declared: AccumulatorModel, k: int) -> list[Probe]:
    """Discriminating rows for a K-product call, most telling first (a decode call keeps the first): big products
    (at even k, ``b`` = 2**8) and small ones (odd k, ``b`` = 2**-9) placed across the whole K, inside the last
    128-product chunk (the tail) and on both sides of the declared promotion boundaries (the first and the last
    before K). ``declared`` sets the retained bits ``B`` the rows are built for: a sum of ``B`` bits (kept in any
    order by a correct kernel), the rounding at ``B``; ``exact``: a cancellation only an exact accumulator keeps."""
    bits = FP32_BITS if declared.kind == "exact" else declared.bits
    last = _odd(k)
    tail0 = max(k - (k % 128 or 128), 0)
    tail0 += tail0 % 2
    big = 2.0**BIG_EXP
    e = min(bits - 2, BIG_EXP)
    cancel = Probe("exactness", 25, 1, ((0, big), (_odd(k // 2 + 1), B_ODD), (last - 1, -big)))
    out = [cancel] if declared.kind == "exact" else []
    out += [
        Probe("bits", bits - 1, 1, ((0, 2.0**e), (last, 2.0 ** (e - bits + 1)))),
        Probe("bits", bits - 1, -1, ((tail0, -(2.0**e)), (last, -(2.0 ** (e - bits + 1))))),
    ]
    n = declared.promote_every
    if n and n + 1 < k:
        edge = (k - 1) // n * n
        out += [_promotion_probe("promotion", n - 2, n + 1)]
        if edge > n and edge + 1 < k:
            out += [_promotion_probe("promotion", edge - 2, edge + 1)]
    out += [_promotion_probe("promotion", 0, last)]
    for p in _rounding_probes(bits, 1) + _rounding_probes(bits, -1):
        (k0, v0), (_, v1) = p.products
        out.append(Probe(p.kind, p.param, p.sign, ((tail0, v0), (last, v1)), p.expect))
    if declared.kind != "exact":
        out.append(cancel)
    out.append(Probe("exactness", 25, -1, ((tail0, -big), (last, -B_ODD), (tail0 + 2, big))))
    return out


def _round_bits(x: float, bits: int, rounding: str) -> float:
    """``x`` (dyadic float64) rounded to ``bits`` significant bits, toward zero or to nearest even."""
    if x == 0 or bits >= 53:
        return x
    _, e = math.frexp(abs(x))
    scaled = abs(x) * 2.0 ** (bits - e)  # exact: a power-of-two scaling
    q = math.floor(scaled) if rounding == "truncate" else round(scaled)
    return math.copysign(q * 2.0 ** (e - bits), x)


def _fl32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


def _partitions(items: list) -> list[list[list]]:
    if not items:
        return [[]]
    head, rest = items[0], items[1:]
    out = []
    for part in _partitions(rest):
        out.append([[head], *part])
        for i in range(len(part)):
            out.append(part[:i] + [[head, *part[i]]] + part[i + 1 :])
    return out


def allowed_values(p: Probe, model: AccumulatorModel) -> list[float]:
    """Every float32 accumulator value a kernel obeying ``model`` may return for row ``p`` (at most 3 products),
    ascending: products split into partial sums in any way (split-K, trees) except that two products in different
    promotion chunks (``k // promote_every``, chunks from k = 0) never share one; a partial sum adds its products in
    any order, rounding each addition to the model's bits; the fp32 total adds the partial sums in any order (RNE)."""
    if model.kind == "exact":
        return [_fl32(p.exact)]
    bits, rnd, n = model.bits, model.rounding, model.promote_every
    vals = set()
    for part in _partitions(list(p.products)):
        if n and any(len({kk // n for kk, _ in g}) > 1 for g in part):
            continue
        sums = []
        for g in part:
            opts = set()
            for order in itertools.permutations(v for _, v in g):
                acc = 0.0
                for v in order:
                    acc = _round_bits(acc + v, bits, rnd)
                opts.add(acc)
            sums.append(sorted(opts))
        for choice in itertools.product(*sums):
            for order in itertools.permutations(choice):
                tot = 0.0
                for v in order:
                    tot = _fl32(tot + v)
                vals.add(tot)
    return sorted(vals)


def regime_operands(rows: list[Probe], reg: Regime) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a e4m3 [reg.m, reg.k], b e4m3 [reg.n, reg.k])`` holding the first ``reg.m`` rows (zero rows after)."""
    a, b = probe_operands(rows[: reg.m], reg.k, reg.n)
    return a[: reg.m].contiguous(), b


def check_regime(scaled_mm: Callable, declared: AccumulatorModel, reg: Regime, device: str, epilogue=None) -> dict:
    """Plant :func:`regime_rows` at ``reg`` and judge each row in every column: where the declaration fixes the
    row's value for every summation order (one :func:`allowed_values`, read through ``epilogue``) the output must be
    that value; elsewhere it must lie between the smallest and largest allowed value, and the report gives the
    observed error beside the largest a correct kernel produces. Returns a dict: ``regime``, shape, ``wrong``
    (rows failed: name, observed, allowed, fixed, ``abs_err``, ``max_correct_err``), ``n_fixed``, ``n_bounded``,
    ``max_abs_err``, ``max_correct_err``, or ``error`` (the kernel's call failed, one line)."""
    rows = regime_rows(declared, reg.k)[: reg.m]
    a, b = regime_operands(rows, reg)
    ev: dict = {"regime": reg.name, "shape": [reg.m, reg.k, reg.n]}
    try:
        out = _observe(scaled_mm, a, b, device)
    except Exception as e:  # noqa: BLE001 -- a user's kernel may raise anything: its failure is a result, not a crash
        return dict(ev, error=f"kernel call failed: {first_line(e)}")
    wrong, n_fixed, worst, worst_ok = [], 0, 0.0, 0.0
    for r, p in enumerate(rows):
        allowed = through_epilogue(epilogue, allowed_values(p, declared))
        exact = float(through_epilogue(epilogue, [_fl32(p.exact)])[0])
        row = out[r]
        lo, hi = float(allowed.min()), float(allowed.max())
        fixed = lo == hi
        n_fixed += fixed
        bad = (row != lo) if fixed else ~((row >= lo) & (row <= hi))
        err = float(torch.nan_to_num((row - exact).abs(), nan=math.inf).max())
        ok_err = max(abs(lo - exact), abs(hi - exact))
        worst, worst_ok = max(worst, err), max(worst_ok, ok_err)
        if bool(bad.any()):
            o = float(row[bad.nonzero()[0, 0]])
            wrong.append(
                dict(row=p.name, observed=o, allowed=[lo, hi] if not fixed else lo, fixed=fixed, abs_err=err)
                | dict(max_correct_err=ok_err, columns=int(bad.sum()))
            )
    ev.update(wrong=wrong, n_rows=len(rows), n_fixed=n_fixed, n_bounded=len(rows) - n_fixed)
    return dict(ev, max_abs_err=worst, max_correct_err=worst_ok)


def _regime_line(res: dict) -> str:
    if "error" in res:
        return f"regime {res['regime']} {tuple(res['shape'])}: {res['error']}"
    w = res["wrong"][0]
    m, k, n = res["shape"]
    head = f"regime {res['regime']} (M={m}, K={k}, N={n}): row {w['row']!r} gave {w['observed']!r} in {w['columns']}"
    if w["fixed"]:
        return f"{head} column(s); the declaration fixes {w['allowed']!r} for every summation order"
    over = w["abs_err"] / w["max_correct_err"] if w["max_correct_err"] else math.inf
    return (
        f"{head} column(s), outside {w['allowed']}: error {w['abs_err']:.3g}, {over:.3g}x the largest a correct "
        f"kernel produces ({w['max_correct_err']:.3g})"
    )


def check_fp8_accumulator(
    spec_or_callable,
    declared: Union[None, str, AccumulatorModel] = None,
    device: Optional[str] = None,
    ks: tuple = K_PROBES,
    regimes: tuple = REGIMES,
) -> CheckResult:
    """C11 for a KernelSpec (its ``scaled_mm``, devices, declared epilogue and, when ``declared`` is None, its
    accumulator on the device it runs on) or a bare ``scaled_mm`` (device default cpu, output read as the
    accumulator): the model measured at every K of ``ks`` and the discriminating rows of every regime of
    ``regimes`` (:func:`check_regime`), each where the kernel's constraints admit it; outputs are read through the
    declared epilogue for a float32 output (a declared bf16 step rounds the output, not the accumulator).
    fail: at some K the kernel keeps less than declared (:func:`shortfall`), a regime row is outside what the
    declaration allows, or a call fails; n/a: no declaration, int8 operands, no device here, or no K of ``ks``
    inside its constraints. Evidence: the first measurement's (``measured`` names every K's model when they
    differ), ``by_k`` (K -> measured label), ``regimes`` (name -> :func:`check_regime`'s dict) and
    ``regimes_skipped`` (name -> the constraint that excludes it). ContractError on a bad declaration."""
    fn = getattr(spec_or_callable, "scaled_mm", spec_or_callable)
    if getattr(spec_or_callable, "operands", "e4m3") != "e4m3":
        return not_applicable(C11, "kernel takes int8 operands (C11 measures FP8 accumulation)")
    epilogue, skipped = None, {}
    if fn is not spec_or_callable:
        device, reason = pick_device(spec_or_callable, device)
        if device is None:
            return not_applicable(C11, reason)
        m_probe = -(-len(probes()) // 16) * 16
        cons = spec_or_callable.constraints
        outside = {k: cons.violations(m_probe, k, N_PROBE) for k in ks}
        ks = tuple(k for k in ks if not outside[k])
        if not ks:
            out_of = "; ".join(v for vs in outside.values() for v in vs)
            return not_applicable(C11, f"probe shapes outside the kernel's constraints: {out_of}")
        if cons.out_dtypes and "float32" not in cons.out_dtypes:
            only = ", ".join(cons.out_dtypes)
            return not_applicable(C11, f"C11 reads the sums through a float32 output; the kernel writes {only} only")
        skipped = {r.name: "; ".join(cons.violations(r.m, r.k, r.n)) for r in regimes}
        skipped = {name: why for name, why in skipped.items() if why}
        regimes = tuple(r for r in regimes if r.name not in skipped)
        if declared is None:
            declared = spec_or_callable.accumulator_on(device)
        has_steps = getattr(spec_or_callable, "steps", None) is not None  # a plain contract: the values as they are
        epilogue = declared_epilogue(spec_or_callable, device, torch.float32).steps if has_steps else None
    if declared is None:
        return not_applicable(C11, "kernel declares no FP8 accumulator")
    declared = parse_accumulator(declared)
    runs = [(k, measure_accumulator(fn, device or "cpu", k, epilogue)) for k in ks]
    models: dict[int, AccumulatorModel] = {}
    for k, m in runs:
        if m.model is None:
            ev = dict(m.evidence, declared=declared.label(), error=m.error, failure_kind="kernel", probe_k=k)
            return CheckResult(C11, "fp8_accumulator", Verdict.FAIL, f"{m.error} (probe K={k})", ev)
        models[k] = m.model
    by_k = {k: models[k].label() for k, _ in runs}
    short = [(k, m, shortfall(models[k], declared, m.bits_observed)) for k, m in runs]
    k0, m0, why = next(((k, m, w) for k, m, w in short if w), short[0])
    reg = {r.name: check_regime(fn, declared, r, device or "cpu", epilogue) for r in regimes}
    ev = dict(m0.evidence, declared=declared.label(), shortfall=why, by_k=by_k, probe_k=k0)
    ev.update(regimes=reg, regimes_skipped=skipped)
    one = len(set(by_k.values())) == 1
    if not one:  # every K's model, in the report's line and its evidence
        ev["measured"] = "; ".join(f"{v!r} at K={k}" for k, v in by_k.items())
    shown = repr(models[k0].label()) if one else ev["measured"]
    head = f"measured {shown}, declared {declared.label()!r}"
    if why:
        line = f"{head}: {'; '.join(why)}" + ("" if one else f" at K={k0}")
        return CheckResult(C11, "fp8_accumulator", Verdict.FAIL, line, dict(ev, failure_kind="kernel"))
    bad = [r for r in reg.values() if "error" in r or r["wrong"]]
    if bad:
        line = f"{head}, but {_regime_line(bad[0])}" + (f" (and {len(bad) - 1} more regimes)" if len(bad) > 1 else "")
        return CheckResult(C11, "fp8_accumulator", Verdict.FAIL, line, dict(ev, failure_kind="kernel"))
    n_rows = sum(r["n_rows"] for r in reg.values())
    n_fixed = sum(r["n_fixed"] for r in reg.values())
    where = f"; {n_rows} rows at {len(reg)} regimes as declared ({n_fixed} exact for every order, the rest bounded)"
    if skipped:
        where += f"; regimes outside the constraints: {', '.join(skipped)}"
    return CheckResult(C11, "fp8_accumulator", Verdict.PASS, f"{head}: at least as precise as declared{where}", ev)
