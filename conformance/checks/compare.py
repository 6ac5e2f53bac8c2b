"""Bit-level comparison of a kernel output against a reference output.

Shared by the output checks (C5, C6, C8) and by pairwise comparison of two
kernels. Distances are in units of spacing (ulp) of the output dtype, from
``reference.bits.spacing_distance`` (difference of ordered integer
encodings; NaN vs number = ``NAN_DISTANCE``).
"""

from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import Tensor

from reference import memo, readback
from reference.bits import NAN_DISTANCE, bits_of, histogram_dict, spacing_distance, ulp_histogram_counts


def _num(x: float):
    """float -> JSON-able (non-finite values become their repr string)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else repr(x)


def _hex(bits: int, dtype: torch.dtype) -> str:
    width = 8 if dtype == torch.float32 else 4
    return f"0x{int(bits):0{width}X}"


def skipped_reason(run) -> Optional[str]:
    """The runner's reason when the kernel could not run here at all (device
    missing, shape outside its declared constraints): such a case is ``n/a``
    for the checks that need the kernel's output, not a failure."""
    man = getattr(run, "manifest", None) or {}
    if man.get("skipped"):
        return run.error or "kernel not runnable here"
    return None


def problem_kind(out: Optional[Tensor], shape: tuple, dtype: torch.dtype, error: Optional[str] = None) -> Optional[str]:
    """Category of :func:`output_problem`'s line: ``dtype`` (a tensor of
    another dtype than asked), ``shape``, ``type`` (not a tensor),
    ``exception`` (the kernel raised), ``nan`` (NaN where the declared
    reference has none), ``in-place`` (wrote into an operand), ``no output``,
    ``error`` (any other runner error); None when the output can be compared.

    The runner (``conformance.kernels.runner``) rejects a wrong dtype / shape
    before the checks see it and says so in ``error`` ("... returned dtype
    X, expected Y"); that wording is matched here so that a dtype error is
    reported as one, never as a spacing failure.
    """
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
    """One line saying why ``out`` cannot be compared, or None if it can.

    The line starts with the problem's category (:func:`problem_kind`), e.g.
    ``dtype error: kernel returned dtype torch.bfloat16, expected torch.float16``.

    Args:
        out: the kernel output (or None when the kernel failed).
        shape: expected ``(M, N)``.
        dtype: expected output dtype.
        error: the runner's error text for this run, if any.
    """
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
    """``t.reshape(-1)[idx]`` for a 1-element long index tensor, on ``idx``'s
    device, without reading the index back (``index_select``, not Python
    indexing, which would turn a 0-d tensor index into an int: a sync)."""
    from reference import memo

    return memo.moved(t, idx.device).reshape(-1).index_select(0, idx)


def _element_values(
    out: Tensor, ref: Tensor, flat: Tensor, szero: Tensor, ops, exact: Optional[Tensor], w: Tensor, n_cols: int
) -> tuple[list, list]:
    """Device values behind flat element ``w`` (a long [1] tensor), unread.

    Returns:
        ``(ints, floats)``: int64 [1] tensors ``[ulp, out_bits, ref_bits,
        signed_zero, (acc), (scale_a_bits, scale_b_bits, (bias_bits))]`` and
        float64 [1] tensors ``[out, ref, (scale_a, scale_b, (bias))]`` (the
        parenthesised ones only when ``exact`` / ``ops`` / ``ops.bias`` are
        given), in that order; :func:`_element_dict` reads them.
    """
    o, r = _at(out, w), _at(ref, w)
    ints = [_at(flat, w), bits_of(o), bits_of(r), _at(szero, w).to(torch.int64)]
    floats = [o.to(torch.float64), r.to(torch.float64)]
    if exact is not None:
        ints.append(_at(exact, w).to(torch.int64))
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


def _element_dict(ints: list, floats: list, out_dtype: torch.dtype, ops, has_exact: bool) -> dict:
    """The ``worst`` evidence (besides ``index``) from the values
    :func:`_element_values` gathered, read back (Python ints / floats, same
    order): ``ulp, out, ref, out_bits, ref_bits, [kind]`` and, with ``ops``,
    the operand values ``acc, scale_a(_bits), scale_b(_bits), bias(_bits)``."""
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
    """Element-wise bit inequality of two same-dtype tensors, NaN canonical.

    Args:
        out, ref: same shape and dtype (bf16 / fp16 / fp32), CPU.

    Returns:
        ``(differ, signed_zero)`` bool tensors of that shape: ``differ`` where
        the IEEE bit patterns differ, except that any NaN equals any NaN
        (payloads and the NaN's sign are canonicalised: IEEE 754 leaves NaN
        payload propagation implementation-defined, section 6.2.3);
        ``signed_zero`` where one is +0 and the other -0 (bits differ, values
        compare equal: the sign of zero is lost or invented).
    """
    nan = torch.isnan(out) & torch.isnan(ref)
    differ = (bits_of(out) != bits_of(ref)) & ~nan
    signed_zero = differ & (out == 0) & (ref == 0)
    return differ, signed_zero


def _comparison_parts(out: Tensor, ref: Tensor, mask: Optional[Tensor]) -> tuple[dict, Tensor]:
    """The element-wise tensors of :func:`_comparison` and its counts as one
    int64 [15] device tensor, not read back yet."""
    dist = spacing_distance(out, ref)
    differ, szero = bit_differences(out, ref)
    if mask is not None:
        dist = torch.where(mask, dist, torch.zeros_like(dist))
        differ = differ & mask
        szero = szero & mask
    flat = dist.reshape(-1)
    z = torch.zeros((), dtype=torch.int64, device=flat.device)
    # masked-out elements become -1, which no bin counts (distances are >= 0):
    # no boolean indexing, whose result size would need a sync of its own
    hist = ulp_histogram_counts(
        flat if mask is None else torch.where(mask.reshape(-1), flat, torch.full_like(flat, -1))
    )
    counts = torch.cat(
        [
            torch.stack(
                [
                    mask.sum() if mask is not None else z,
                    (dist > 0).sum(),
                    differ.sum(),
                    szero.sum(),
                    flat.max().to(torch.int64) if flat.numel() else z,
                    (dist > 1).sum(),
                ]
            ),
            hist,
        ]
    )
    return {"dist": dist, "differ": differ, "szero": szero}, counts


def _comparison_from(parts: dict, counts: list, masked: bool) -> dict:
    """:func:`_comparison`'s result from its parts and their counts read back
    (``masked``: the comparison had a mask)."""
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
    """The element-wise comparison of ``out`` with ``ref``, its counts asked
    (``reference.readback``), not read.

    Args:
        out, ref: same shape [M, N], dtype and device; mask: bool [M, N] on
            that device, or None (compare every element).

    Returns:
        ``reference.readback.Deferred`` of the dict
        ``{"dist", "differ", "szero"}`` (masked tensors: spacing distance,
        bits differ, ±0 difference), ``"ev"`` (the tolerance-free headline
        counts of :func:`compare_bits`' evidence) and ``"n_over"`` ({0:
        elements whose bits differ, 1: elements over 1 spacing}). Every count
        comes from one read-back, shared with whatever else is pending, and
        the whole is memoized on the tensors inside a ``reference.memo``
        scope: checks that compare one output with one reference (C5 and C8
        under pow2 when the declared order is ``a_then_w``) share it, and
        :func:`prefetch_comparisons` asks a case's comparisons before any of
        them is read.
    """

    def ask():
        parts, counts = _comparison_parts(out, ref, mask)
        return readback.ask([counts], lambda v: _comparison_from(parts, v, mask is not None))

    return memo.cached("comparison", (out, ref, mask), ask)


def _comparison(out: Tensor, ref: Tensor, mask: Optional[Tensor]) -> dict:
    """:func:`ask_comparison`'s dict, read."""
    return ask_comparison(out, ref, mask).get()


def prefetch_comparisons(triples: list) -> None:
    """Ask the comparison (:func:`ask_comparison`) of every ``(out, ref,
    mask)`` triple and leave it in the ``reference.memo`` scope, where
    :func:`compare_bits` finds it: the first one read brings back all of
    them, and everything else pending, in one read-back (the output checks
    of one sweep cell: one device sync, not one per check). No-op outside a
    scope."""
    from reference import memo

    if not memo.active():
        return
    for tr in triples:
        ask_comparison(*tr)


def _ask_worst_evidence(
    cmp: dict, out: Tensor, ref: Tensor, tol_ulp: int, n_over: int, ops, exact: Optional[Tensor], max_listed: int
):
    """``(worst, first_over_tol, signed_zero_first)`` of :func:`compare_bits`'
    evidence, every value gathered on the device and asked
    (``reference.readback.Deferred``), read together.

    ``worst`` is the element of largest distance (the first one), or the
    first bit difference when every distance is 0 (a ±0 difference);
    ``first_over_tol`` lists the first ``max_listed`` elements over
    ``tol_ulp`` in row-major order as ``[i, j, ulp]`` (empty when
    ``n_over == 0``); ``signed_zero_first`` the first ``max_listed`` ±0
    differences as ``[i, j]`` (None when there is none). Args as
    :func:`compare_bits` (``cmp`` from :func:`_comparison`); the comparison
    must have a differing element.
    """
    dist, differ = cmp["dist"], cmp["differ"]
    flat = dist.reshape(-1)
    n, n_cols = flat.numel(), (dist.shape[1] if dist.dim() == 2 else 1)
    # argmax returns the first maximal element: the first difference when
    # every distance is 0
    w = (flat if cmp["ev"]["max_ulp"] > 0 else differ.reshape(-1).to(torch.uint8)).argmax()
    w = w.reshape(1)
    ints, floats = _element_values(out, ref, flat, cmp["szero"], ops, exact, w, n_cols)
    idx = torch.arange(n, device=flat.device)

    def first_k(where: Tensor, k: int) -> Tensor:
        """Row-major positions of the first ``k`` True elements (``n`` pads)."""
        pos = torch.where(where.reshape(-1), idx, torch.full_like(idx, n))
        return pos.topk(k, largest=False).values  # ascending

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
        worst.update(_element_dict(ivals, fvals, out.dtype, ops, exact is not None))
        listed = [[*divmod(int(p), n_cols), int(u)] for p, u in zip(fpos, fulp) if p < n]
        zeros = [list(divmod(int(p), n_cols)) for p in zpos if p < n] if kz else None
        return worst, listed, zeros

    return readback.ask(parts, convert)


def _evidence_questions(
    out: Tensor,
    ref: Tensor,
    tol_ulp: int,
    ops=None,
    exact: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    max_listed: int = 5,
) -> tuple:
    """``(out, mask, cmp, n_over, worst)``: :func:`compare_bits`' inputs on
    ref's device, its comparison (read), the count over ``tol_ulp`` and the
    ``reference.readback.Deferred`` of its failure evidence
    (:func:`_ask_worst_evidence`, memoized on the tensors inside a
    ``reference.memo`` scope), or None when no element differs."""
    from reference import memo

    out = memo.moved(out, ref.device)  # one copy per output inside a memo scope (the sweep)
    if mask is not None:
        mask = mask.to(ref.device)
    cmp = _comparison(out, ref, mask)
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


def prefetch_failure_evidence(
    out: Tensor,
    ref: Tensor,
    tol_ulp: int,
    ops=None,
    exact: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    max_listed: int = 5,
) -> None:
    """Ask the evidence :func:`compare_bits` (same arguments) will read when
    the comparison has differing elements, so that the failing checks of a
    sweep cell read theirs together (one read-back). Reads the comparison
    itself if it is not read yet. No-op outside a ``reference.memo`` scope."""
    from reference import memo

    if memo.active():
        _evidence_questions(out, ref, tol_ulp, ops, exact, mask, max_listed)


def compare_bits(
    out: Tensor,
    ref: Tensor,
    tol_ulp: int,
    ops=None,
    exact: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    max_listed: int = 5,
) -> tuple[int, dict]:
    """Compare ``out`` with ``ref`` element by element on bit patterns.

    With ``tol_ulp == 0`` (bit identity: C5, C8, pairwise) an element is over
    tolerance when its bits differ (:func:`bit_differences`: the sign of zero
    counts, NaN payloads do not); ±0 differences are counted separately as
    ``n_signed_zero`` (their spacing distance is 0). With ``tol_ulp >= 1``
    (C6) an element is over tolerance when its spacing distance exceeds
    ``tol_ulp`` (a ±0 difference is then within tolerance, but still counted).

    Args:
        out, ref: same shape [M, N] and dtype (bf16 / fp16 / fp32), CPU.
        tol_ulp: largest allowed spacing distance (0 = bit-identical).
        ops: the case's ``GemmOperands`` (adds operand values of the worst
            element and the operand digests to the evidence), or None.
        exact: exact int64 accumulator [M, N] (adds ``acc`` of the worst element).
        mask: optional bool [M, N]; only True elements are compared.
        max_listed: how many offending elements to list besides the worst.

    Returns:
        ``(n_over_tol, evidence)``: the number of compared elements over
        tolerance, and a JSON-able dict with ``n_elements, n_compared,
        n_differ (distance > 0), n_bits_differ, n_signed_zero, n_over_tol,
        max_ulp, tol_ulp, ulp_histogram, worst {index, out, ref, out_bits,
        ref_bits, ulp, acc, scale_a, scale_b, bias}, first_over_tol
        [[i, j, ulp], ...], signed_zero_first [[i, j], ...],
        operand_digests``. ``worst`` is the element of largest distance, or
        the first ±0 difference when every distance is 0.
    """
    # on ref's device (the CPU for CPU references, the GPU for the sweep's
    # on-device references): integer bit arithmetic, the same result anywhere
    out, mask, cmp, n_over, worst = _evidence_questions(out, ref, tol_ulp, ops, exact, mask, max_listed)
    ev: dict = dict(copy.deepcopy(cmp["ev"]), n_over_tol=n_over, tol_ulp=int(tol_ulp))
    # key order of the evidence as it always was (stored rows are JSON of it)
    ev = {
        k: ev[k]
        for k in (
            "n_elements",
            "n_compared",
            "n_differ",
            "n_bits_differ",
            "n_signed_zero",
            "n_over_tol",
            "tol_ulp",
            "max_ulp",
            "ulp_histogram",
        )
    }
    if ev["max_ulp"] == NAN_DISTANCE:
        ev["max_ulp_is_nan_mismatch"] = True
    if worst is not None:
        w, first, zeros = copy.deepcopy(worst.get())
        if ev["n_signed_zero"]:
            ev["signed_zero_first"] = zeros
        ev["worst"], ev["first_over_tol"] = w, first
    if ops is not None:
        ev["operand_digests"] = ops.digests()
    return n_over, ev
