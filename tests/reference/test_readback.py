"""Deferred read-backs (``reference.readback``, issue 7g): questions asked
before any is read come back in one transfer, with the values a direct read
gives; the sweep's helpers built on it (bounds noted in the memo, parts of a
tensor, the host subnormal probe, the mask-based error direction) give what
the direct computations give."""

import pytest
import torch

from reference import memo, readback


class _Tolist:
    """Counts ``Tensor.tolist`` calls (the one read-back of a flush)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = torch.Tensor.tolist

        def counted(t):
            self.n += 1
            return real(t)

        monkeypatch.setattr(torch.Tensor, "tolist", counted)


def test_questions_asked_first_are_read_in_one_transfer_with_their_values(monkeypatch):
    tl = _Tolist(monkeypatch)
    x = torch.tensor([[3, -7, 2], [5, 0, -1]], dtype=torch.int32)
    a = readback.ask([x.abs().max(), (x > 0).sum()], lambda v: tuple(v))
    b = readback.ask([x.reshape(-1)[:4], torch.tensor(True)])  # vector + bool scalar
    c = readback.ask([x.to(torch.int16)], lambda v: sum(v))  # 2-D, another dtype
    e = readback.ask([], lambda v: "nothing")  # answered at once
    assert e.done and e.get() == "nothing" and readback.pending() == 3 and tl.n == 0
    assert a.get() == (7, 3) and tl.n == 1 and b.done and c.done and readback.pending() == 0
    assert b.get() == [3, -7, 2, 5, 1] and c.get() == 2 and tl.n == 1
    d = a.then(lambda v: v[0] * 10).then(lambda v: v + 1)
    assert d.done and d.get() == 71 and tl.n == 1


def test_a_question_dropped_unread_is_not_read_and_a_bad_convert_stays_its_own(monkeypatch):
    tl = _Tolist(monkeypatch)
    t = torch.arange(5)
    readback.ask([t.sum()])  # dropped at once
    bad = readback.ask([t.max()], lambda v: 1 // 0)
    good = readback.ask([t.min()], lambda v: v[0])
    assert good.get() == 0 and tl.n == 1
    with pytest.raises(ZeroDivisionError):
        bad.get()
    assert readback.flush() == 0 and tl.n == 1


def test_floats_travel_as_bits_and_float_parts_are_refused():
    vals = torch.tensor([1.5, -0.0, float("inf"), 2.0**-140, float("nan")], dtype=torch.float32)
    got = readback.read([readback.float_bits(vals)], lambda v: [readback.unpack_float(x) for x in v])
    assert [str(x) for x in got] == [str(float(x)) for x in vals.tolist()]
    with pytest.raises(TypeError, match="float_bits"):
        readback.ask([vals.sum()])


def test_a_failed_transfer_leaves_its_questions_pending(monkeypatch):
    q = readback.ask([torch.tensor(4)])
    real = torch.Tensor.tolist

    def lost(t):
        raise RuntimeError("lost")

    monkeypatch.setattr(torch.Tensor, "tolist", lost)
    with pytest.raises(RuntimeError, match="lost"):
        q.get()
    monkeypatch.setattr(torch.Tensor, "tolist", real)
    assert not q.done and q.get() == [4]


def test_a_noted_bound_spares_the_int64_conversion_its_read_back_and_changes_nothing(monkeypatch):
    from reference.accumulate import exact_int_mm
    from reference.epilogue import acc_to_fp32

    g = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (4, 40), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (3, 40), generator=g, dtype=torch.int16).to(torch.int8)
    want = acc_to_fp32(exact_int_mm(a, b))
    reads = []
    real = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda t: reads.append(1) or real(t))
    with memo.scope():
        acc = exact_int_mm(a, b)
        assert memo.known_bound(acc) == 40 * 16384
        assert torch.equal(acc_to_fp32(acc), want) and reads == []
        acc.add_(0)  # a write voids the note
        assert memo.known_bound(acc) is None
    assert torch.equal(acc_to_fp32(exact_int_mm(a, b)), want) and len(reads) == 1


def test_a_part_of_a_checked_tensor_needs_no_value_check_of_its_own():
    from reference.errors import OperandError
    from reference.validate import _check_values

    s = torch.rand(32) + 0.5
    with memo.scope():
        _check_values(s, "scale_b")
        part = s[4:20].contiguous()
        memo.note_part(s, part)
        assert memo.part_source(part) is s
        _check_values(part, "scale_b")
        assert memo.peek("nonfinite", (part,)) == (0, 0)
        bad = torch.tensor([1.0, float("nan")])
        cut = bad[1:].contiguous()
        memo.note_part(bad, cut)
        with pytest.raises(OperandError, match="NaN"):  # the whole's counts are not (0, 0)
            _check_values(cut, "scale_b")
    assert memo.part_source(part) is None  # nothing outside a scope


def test_the_host_subnormal_probe_agrees_with_a_torch_probe():
    from reference.bits import _flushes_subnormals

    def torch_probe() -> bool:
        return float(torch.tensor([2.0**-130]) * 0.5) == 0.0

    assert _flushes_subnormals() is False and torch_probe() is False
    if not torch.set_flush_denormal(True):
        pytest.skip("CPU without FTZ/DAZ control")
    try:
        assert _flushes_subnormals() is True and torch_probe() is True
    finally:
        torch.set_flush_denormal(False)
    assert _flushes_subnormals() is False


def test_the_masked_error_direction_equals_the_indexed_definition():
    from conformance.sweep.runner import direction_counts
    from reference.bits import bits_of

    ref = torch.tensor([1.0, -2.0, 3.0, 0.0, 5.0, -6.0, 7.0, float("nan"), 1.0, 2.0]).to(torch.bfloat16)
    out = torch.tensor([1.0, -1.5, 3.5, -0.0, -5.0, -6.0, float("nan"), float("nan"), 0.5, 2.0]).to(torch.bfloat16)
    differ = bits_of(out) != bits_of(ref)
    o, r = out.double()[differ], ref.double()[differ]
    same = torch.sign(o) == torch.sign(r)
    want = {
        "n_differ": int(differ.sum()),
        "toward_zero": int((same & (o.abs() < r.abs())).sum()),
        "away_from_zero": int((same & (o.abs() > r.abs())).sum()),
        "sign_change": int((~same).sum()),
    }
    assert (
        direction_counts(out, ref) == want == {"n_differ": 6, "toward_zero": 2, "away_from_zero": 1, "sign_change": 2}
    )
    with memo.scope():
        assert direction_counts(out, ref) == want


def test_each_thread_reads_its_own_questions():
    import threading

    mine = readback.ask([torch.tensor(1)])
    got = {}

    def other():
        theirs = readback.ask([torch.tensor(2)])
        got["theirs"] = theirs.get()
        got["mine_done"] = mine.done

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got == {"theirs": [2], "mine_done": False} and mine.get() == [1]
