"""Bit-level comparison of a kernel output with a reference output (C5, C6, C8, pairwise).

Distances are in spacings (ulp) of the output dtype: ``reference.bits.spacing_distance``
(difference of ordered integer encodings; NaN vs number = ``NAN_DISTANCE``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from reference import memo, readback
from reference.bits import NAN_DISTANCE, bits_of, histogram_dict, isnan_of, spacing_distance, ulp_histogram_counts

#: evidence keys of compare_bits, in the order stored rows have them
_EV_KEYS = "n_elements n_compared n_differ n_bits_differ n_signed_zero n_over_tol tol_ulp max_ulp ulp_histogram".split()


def _num(x: float):
    """float -> JSON-able (non-finite values become their repr string)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else repr(x)


def _hex(bits: int, dtype: torch.dtype) -> str:
    width = 8 if dtype == torch.float32 else 4
    return f"0x{int(bits):0{width}X}"


def skipped_reason(run) -> Optional[str]:
    """The runner's reason when the kernel could not run here at all (``n/a``, not a failure)."""
    man = getattr(run, "manifest", None) or {}
    if man.get("skipped"):
        return run.error or "kernel not runnable here"
    return None


def problem_kind(out: Optional[Tensor], shape: tuple, dtype: torch.dtype, error: Optional[str] = None) -> Optional[str]:
    """Category of :func:`output_problem`'s line: ``dtype``, ``shape``, ``type``
    (not a tensor), ``exception``, ``nan``, ``in-place``, ``no output``, ``error``
    (other runner error); None when the output can be compared. Matches the
    runner's ``error`` wording ("... returned dtype X, expected Y")."""
    if error:
        e = error.lower()
        for key, kind in (
            ("returned dtype", "dtype"),
            ("returned shape", "shape"),
            (" nan ", "nan"),
            ("in place", "in-place"),
            ("raised", "exception"),
            ("expected a torch.tensor", "type"),
        ):
            if key in e:
                return kind
        return "error"
    if out is None:
        return "no output"
    if not isinstance(out, Tensor):
        return "type"
    if tuple(out.shape) != tuple(shape):
        return "shape"
    if out.dtype != dtype:
        return "dtype"
    return None


def output_problem(
    out: Optional[Tensor], shape: tuple, dtype: torch.dtype, error: Optional[str] = None
) -> Optional[str]:
    """One line saying why ``out`` cannot be compared (starting with its
    :func:`problem_kind`, e.g. ``dtype error: ...``), or None if it can.
    ``shape``: expected ``(M, N)``; ``error``: the runner's error text."""
    kind = problem_kind(out, shape, dtype, error)
    if kind is None:
        return None
    if error:
        line = error
    elif out is None:
        line = "kernel produced no output"
    elif not isinstance(out, Tensor):
        line = f"kernel returned {type(out).__name__}, not a tensor"
    elif kind == "shape":
        line = f"kernel output shape {tuple(out.shape)} != expected {tuple(shape)}"
    else:
        line = f"kernel output dtype {out.dtype} != expected {dtype}"
    if kind in ("dtype", "shape", "type"):
        return f"{kind} error: {line}"
    return f"kernel failed ({kind}): {line}"


def _at(t: Tensor, idx: Tensor) -> Tensor:
    """``t.reshape(-1)[idx]`` on ``idx``'s device without reading the index back."""
    return memo.moved(t, idx.device).reshape(-1).index_select(0, idx)


def _element_values(
    out: Tensor, ref: Tensor, flat: Tensor, szero: Tensor, ops, exact: Optional[Tensor], w: Tensor, n_cols: int
) -> tuple[list, list]:
    """``(ints, floats)`` unread, of flat element ``w`` (long [1]): int64 [1]
    ``[ulp, out_bits, ref_bits, signed_zero, (acc), (scale_a_bits, scale_b_bits,
    (bias_bits))]`` and float64 [1] ``[out, ref, (scale_a, scale_b, (bias))]``."""
    o, r = _at(out, w), _at(ref, w)
    ints = [_at(flat, w), bits_of(o), bits_of(r), _at(szero, w).to(torch.int64)]
    floats = [o.to(torch.float64), r.to(torch.float64)]
    if exact is not None:  # an FP8 case's float32 accumulator travels as its float64 bits
        e = _at(exact, w)
        ints.append(readback.float_bits(e.to(torch.float64)) if e.is_floating_point() else e.to(torch.int64))
    if ops is not None:
        i, j = w // n_cols, w % n_cols
        for s, idx in ((ops.scale_a, i), (ops.scale_b, j)):
            v = _at(s, idx if s.numel() > 1 else torch.zeros_like(idx)).to(torch.float32)
            ints.append(bits_of(v))
            floats.append(v.to(torch.float64))
        if ops.bias is not None:
            bv = _at(ops.bias, j)
            ints.append(bits_of(bv))
            floats.append(bv.to(torch.float64))
    return ints, floats


def _element_dict(ints: list, floats: list, out_dtype: torch.dtype, ops, has_exact) -> dict:
    """The ``worst`` evidence (besides ``index``) from :func:`_element_values`' values, read; ``has_exact``:
    falsy, True (an int64 accumulator) or ``"float"`` (a float32 one)."""
    ulp, ob, rb, sz = ints[:4]
    d = {
        "ulp": int(ulp),
        "out": _num(floats[0]),
        "ref": _num(floats[1]),
        "out_bits": _hex(ob, out_dtype),
        "ref_bits": _hex(rb, out_dtype),
    }
    if sz:
        d["kind"] = "signed zero"
    if ops is None:
        return d
    rest = ints[4:]
    if has_exact == "float":
        d["acc"] = _num(readback.unpack_float(rest.pop(0)))
    else:
        d["acc"] = int(rest.pop(0)) if has_exact else None
    d.update(
        {
            "scale_a": _num(floats[2]),
            "scale_a_bits": _hex(rest[0], torch.float32),
            "scale_b": _num(floats[3]),
            "scale_b_bits": _hex(rest[1], torch.float32),
            "bias": None,
        }
    )
    if ops.bias is not None:
        d["bias"] = _num(floats[4])
        d["bias_bits"] = _hex(rest[2], ops.bias.dtype)
    return d


def bit_differences(out: Tensor, ref: Tensor) -> tuple[Tensor, Tensor]:
    """``(differ, signed_zero)`` bool tensors of ``out`` / ``ref``'s shape (same
    dtype: bf16 / fp16 / fp32): bit patterns differ, any NaN equal to any NaN
    (IEEE 754 section 6.2.3 leaves payloads open); one is +0, the other -0."""
    nan = isnan_of(out) & isnan_of(ref)
    differ = (bits_of(out) != bits_of(ref)) & ~nan
    signed_zero = differ & (out == 0) & (ref == 0)
    return differ, signed_zero


def _comparison_parts(out: Tensor, ref: Tensor, mask: Optional[Tensor]) -> tuple[dict, Tensor]:
    dist = spacing_distance(out, ref)
    differ, szero = bit_differences(out, ref)
    if mask is not None:
        dist = torch.where(mask, dist, 0)
        differ = differ & mask
        szero = szero & mask
    flat = dist.reshape(-1)
    z = torch.zeros((), dtype=torch.int64, device=flat.device)
    # masked-out elements become -1, which no bin counts (distances are >= 0):
    # no boolean indexing, whose result size would need a sync of its own
    hist = ulp_histogram_counts(flat if mask is None else torch.where(mask.reshape(-1), flat, -1))
    heads = [mask.sum() if mask is not None else z, (dist > 0).sum(), differ.sum(), szero.sum()]
    heads += [flat.max().to(torch.int64) if flat.numel() else z, (dist > 1).sum()]
    counts = torch.cat([torch.stack(heads), hist])
    return {"dist": dist, "differ": differ, "szero": szero}, counts


def _comparison_from(parts: dict, counts: list, masked: bool) -> dict:
    n_masked, n_differ, n_bits, n_szero, max_ulp, n_over1 = (int(c) for c in counts[:6])
    n = int(parts["dist"].numel())
    ev = {
        "n_elements": n,
        "n_compared": n_masked if masked else n,
        "n_differ": n_differ,
        "n_bits_differ": n_bits,
        "n_signed_zero": n_szero,
        "max_ulp": max_ulp,
        "ulp_histogram": histogram_dict(counts[6:]),
    }
    return dict(parts, ev=ev, n_over={0: n_bits, 1: n_over1})


def ask_comparison(out: Tensor, ref: Tensor, mask: Optional[Tensor]):
    """Deferred comparison of ``out`` with ``ref`` ([M, N], same dtype and
    device; ``mask`` bool [M, N] or None): ``{"dist", "differ", "szero"}`` (masked
    tensors), ``"ev"`` (tolerance-free counts of :func:`compare_bits`' evidence)
    and ``"n_over"`` ({0: bits differ, 1: over 1 spacing})."""

    def ask():
        parts, counts = _comparison_parts(out, ref, mask)
        return readback.ask([counts], lambda v: _comparison_from(parts, v, mask is not None))

    return memo.cached("comparison", (out, ref, mask), ask)


def _ask_worst_evidence(
    cmp: dict, out: Tensor, ref: Tensor, tol_ulp: int, n_over: int, ops, exact: Optional[Tensor], max_listed: int
):
    """Deferred ``(worst, first_over_tol, signed_zero_first)`` of a read comparison
    ``cmp`` with a differing element: the first element of largest distance (else
    of differing bits), the first ``[i, j, ulp]`` over ``tol_ulp``, the first ±0 ``[i, j]``."""
    dist, differ = cmp["dist"], cmp["differ"]
    flat = dist.reshape(-1)
    n, n_cols = flat.numel(), (dist.shape[1] if dist.dim() == 2 else 1)
    # argmax: the first maximal element, the first difference when every distance is 0
    w = (flat if cmp["ev"]["max_ulp"] > 0 else differ.reshape(-1).to(torch.uint8)).argmax()
    w = w.reshape(1)
    ints, floats = _element_values(out, ref, flat, cmp["szero"], ops, exact, w, n_cols)

    def first_k(where: Tensor, k: int) -> Tensor:
        # ascending positions of the first k True elements, n where there are fewer: the j-th True
        # is where the running count first reaches j (a scan and a search, not a multi-pass top-k)
        seen = where.reshape(-1).cumsum(0)
        return torch.searchsorted(seen, torch.arange(1, k + 1, dtype=seen.dtype, device=seen.device))

    k = min(max_listed, n) if n_over else 0
    first = first_k(differ if tol_ulp == 0 else dist > tol_ulp, k)
    first_ulp = flat.index_select(0, first.clamp(max=n - 1))
    kz = min(max_listed, n) if cmp["ev"]["n_signed_zero"] else 0
    zfirst = [first_k(cmp["szero"], kz)] if kz else []
    parts = [w] + ints + [first, first_ulp] + zfirst + [readback.float_bits(f) for f in floats]
    ni, nf = len(ints), len(floats)

    def convert(vals: list) -> tuple:
        wi, ivals = vals[0], vals[1 : 1 + ni]
        fvals = [readback.unpack_float(v) for v in vals[len(vals) - nf :]]
        at = 1 + ni
        fpos, fulp = vals[at : at + k], vals[at + k : at + 2 * k]
        zpos = vals[at + 2 * k : at + 2 * k + kz]
        worst = {"index": list(divmod(int(wi), n_cols))}
        kind = None if exact is None else "float" if exact.is_floating_point() else True
        worst.update(_element_dict(ivals, fvals, out.dtype, ops, kind))
        listed = [[*divmod(int(p), n_cols), int(u)] for p, u in zip(fpos, fulp) if p < n]
        zeros = [list(divmod(int(p), n_cols)) for p in zpos if p < n] if kz else None
        return worst, listed, zeros

    return readback.ask(parts, convert)


def evidence_questions(
    out: Tensor,
    ref: Tensor,
    tol_ulp: int,
    ops=None,
    exact: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    max_listed: int = 5,
) -> tuple:
    """``(out, mask, cmp, n_over, worst)``: :func:`compare_bits`' inputs on ref's
    device, its comparison (read), the count over ``tol_ulp`` and the Deferred
    failure evidence (None when no element differs)."""
    out = memo.moved(out, ref.device)
    if mask is not None:
        mask = mask.to(ref.device)
    cmp = ask_comparison(out, ref, mask).get()
    n_over = cmp["n_over"].get(int(tol_ulp))
    if n_over is None:  # a tolerance other than C5/C8's 0 and C6's 1: one more read-back
        n_over = int((cmp["dist"] > tol_ulp).sum())
    worst = None
    if cmp["dist"].numel() and (cmp["ev"]["max_ulp"] > 0 or cmp["ev"]["n_bits_differ"]):
        key = ("worst", int(tol_ulp), int(max_listed), ops is not None)
        tensors = (out, ref, mask, exact) + (() if ops is None else (ops.scale_a, ops.scale_b, ops.bias))
        worst = memo.cached(
            key, tensors, lambda: _ask_worst_evidence(cmp, out, ref, tol_ulp, n_over, ops, exact, max_listed)
        )
    return out, mask, cmp, n_over, worst


def _plain_copy(x):
    """A deep copy of plain data (dicts, lists, tuples of scalars: the memoized evidence, which the
    checks share), without ``copy.deepcopy``'s generic bookkeeping."""
    if isinstance(x, dict):
        return {k: _plain_copy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain_copy(v) for v in x)
    return x


def compare_bits(
    out: Tensor,
    ref: Tensor,
    tol_ulp: int,
    ops=None,
    exact: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    max_listed: int = 5,
) -> tuple[int, dict]:
    """``(n_over_tol, evidence)`` of ``out`` vs ``ref`` ([M, N], same dtype) on ref's device.

    Over tolerance: bits differ for ``tol_ulp == 0`` (±0 counts, NaN payloads do
    not), else spacing distance > ``tol_ulp``; ±0 differences are counted as
    ``n_signed_zero``. ``ops`` adds the worst element's operands and the digests,
    ``exact`` its ``acc``; ``mask`` (bool [M, N]) limits the comparison. Evidence
    keys: :data:`_EV_KEYS`, ``worst``, ``first_over_tol``, ``signed_zero_first``.
    """
    out, mask, cmp, n_over, worst = evidence_questions(out, ref, tol_ulp, ops, exact, mask, max_listed)
    ev: dict = dict(_plain_copy(cmp["ev"]), n_over_tol=n_over, tol_ulp=int(tol_ulp))
    ev = {k: ev[k] for k in _EV_KEYS}
    if ev["max_ulp"] == NAN_DISTANCE:
        ev["max_ulp_is_nan_mismatch"] = True
    if worst is not None:
        w, first, zeros = _plain_copy(worst.get())
        if ev["n_signed_zero"]:
            ev["signed_zero_first"] = zeros
        ev["worst"], ev["first_over_tol"] = w, first
    if ops is not None:
        ev["operand_digests"] = ops.digests()
    return n_over, ev
