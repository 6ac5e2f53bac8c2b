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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import torch

from conformance.checks.result import CheckResult, not_applicable
from conformance.kernels.runner import pick_device
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


def measure_accumulator(scaled_mm: Callable, device: str = "cpu", k: int = K_PROBE) -> MeasuredAccumulator:
    """Measure the accumulator of ``scaled_mm`` (the kernel contract's callable, e4m3 operands) on ``device`` with
    probe rows of ``k`` products. A kernel that raises, returns a wrong dtype / shape, or loses even a 2-bit sum
    gives ``model=None`` and ``error``."""
    rows = probes(k)
    a, b = probe_operands(rows, k)
    try:
        out = _observe(scaled_mm, a, b, device)
    except Exception as e:  # the kernel's failure is a result, not a crash
        return MeasuredAccumulator(None, 0, {}, f"kernel call failed: {first_line(e)}")
    observed: dict[str, dict] = {}
    for r, p in enumerate(rows):
        row = out[r]
        o = float(row[0])
        entry = {"exact": p.exact, "observed": o if math.isfinite(o) else repr(o), "kept": bool((row == p.exact).all())}
        for label, v in p.expect:
            entry[label] = bool((row == v).all())
        if not bool((row == row[0]).all()):
            entry["columns_disagree"] = int((row != row[0]).sum())
        observed[p.name] = entry
    broken = [n for n, e in observed.items() if n.startswith("bits 1 ") and not e["kept"]]
    if broken:
        e = observed[broken[0]]
        line = f"the output is not the accumulator: probe {broken[0]!r} gave {e['observed']}, exact {e['exact']}"
        return MeasuredAccumulator(None, 0, {"probes": observed}, line)
    return _interpret(rows, observed)


def _interpret(rows: list[Probe], obs: dict) -> MeasuredAccumulator:
    notes: list[str] = []
    lost = [p.param for p in rows if p.kind == "bits" and not obs[p.name]["kept"]]
    bits = min(lost) if lost else FP32_BITS
    if any(p.kind == "bits" and p.param > bits and obs[p.name]["kept"] for p in rows):
        notes.append("bits: an addend below the first lost one was kept (non-monotone)")
    rnd = [obs[p.name] for p in rows if p.kind == "rounding" and p.param == max(bits, 2)]
    rounding = "rne" if all(x["up"] for x in rnd) else "truncate"
    ties = [obs[p.name] for p in rows if p.kind == "tie" and p.param == max(bits, 2)]
    if rounding == "rne" and any(x["up"] for x in ties):
        notes.append("rounding: a tie at the retained precision rounded away from zero")
    exact_rows = [obs[p.name]["kept"] for p in rows if p.kind == "exactness"]
    promote, interval = None, None
    if bits < FP32_BITS:
        promote, interval = _interval(rows, obs, notes)
    if bits >= FP32_BITS and rounding == "rne" and all(exact_rows):
        model = AccumulatorModel("exact")
    elif bits >= FP32_BITS and rounding == "rne":
        model = AccumulatorModel("fp32")
    else:
        if bits < 2:
            notes.append(f"bits: keeps {bits} significant bit(s); model clamped to 2")
        model = AccumulatorModel("fp32", max(bits, 2), rounding, promote)
    ev = {"measured": model.label(), "measured_model": model.to_dict(), "bits_observed": bits}
    ev.update(promotion_interval=interval, notes=notes, probes=obs)
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


def check_fp8_accumulator(
    spec_or_callable,
    declared: Union[None, str, AccumulatorModel] = None,
    device: Optional[str] = None,
    ks: tuple = K_PROBES,
) -> CheckResult:
    """C11 for a KernelSpec (its ``scaled_mm``, devices and, when ``declared`` is None, its accumulator on the device
    it runs on) or a bare ``scaled_mm`` (device default cpu), measured at every K of ``ks`` the kernel accepts.
    fail: at some K the kernel keeps less than declared (:func:`shortfall`) or its call fails; n/a: no declaration,
    int8 operands, no device here, or no K of ``ks`` inside its constraints. Evidence: the first measurement's
    (``measured`` names every K's model when they differ) and ``by_k`` (K -> measured label). ContractError on a
    bad declaration."""
    fn = getattr(spec_or_callable, "scaled_mm", spec_or_callable)
    if getattr(spec_or_callable, "operands", "e4m3") != "e4m3":
        return not_applicable(C11, "kernel takes int8 operands (C11 measures FP8 accumulation)")
    if fn is not spec_or_callable:
        device, reason = pick_device(spec_or_callable, device)
        if device is None:
            return not_applicable(C11, reason)
        m_probe = -(-len(probes()) // 16) * 16
        outside = {k: spec_or_callable.constraints.violations(m_probe, k, N_PROBE) for k in ks}
        ks = tuple(k for k in ks if not outside[k])
        if not ks:
            bad = "; ".join(v for vs in outside.values() for v in vs)
            return not_applicable(C11, f"probe shapes outside the kernel's constraints: {bad}")
        if declared is None:
            declared = spec_or_callable.accumulator_on(device)
    if declared is None:
        return not_applicable(C11, "kernel declares no FP8 accumulator")
    declared = parse_accumulator(declared)
    runs = [(k, measure_accumulator(fn, device or "cpu", k)) for k in ks]
    for k, m in runs:
        if m.model is None:
            ev = dict(m.evidence, declared=declared.label(), error=m.error, failure_kind="kernel", probe_k=k)
            return CheckResult(C11, "fp8_accumulator", "fail", f"{m.error} (probe K={k})", ev)
    by_k = {k: m.model.label() for k, m in runs}
    short = [(k, m, shortfall(m.model, declared, m.bits_observed)) for k, m in runs]
    k0, m0, why = next(((k, m, w) for k, m, w in short if w), short[0])
    ev = dict(m0.evidence, declared=declared.label(), shortfall=why, by_k=by_k, probe_k=k0)
    one = len(set(by_k.values())) == 1
    if not one:  # every K's model, in the report's line and its evidence
        ev["measured"] = "; ".join(f"{v!r} at K={k}" for k, v in by_k.items())
    shown = repr(m0.model.label()) if one else ev["measured"]
    head = f"measured {shown}, declared {declared.label()!r}"
    if why:
        line = f"{head}: {'; '.join(why)}" + ("" if one else f" at K={k0}")
        return CheckResult(C11, "fp8_accumulator", "fail", line, dict(ev, failure_kind="kernel"))
    return CheckResult(C11, "fp8_accumulator", "pass", f"{head}: at least as precise as declared", ev)
