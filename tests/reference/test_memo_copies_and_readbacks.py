"""Per-cell cost reductions of the sweep (issue 7c): a copy's digest comes from
its source whichever is digested first, memoized reference epilogues and
device copies, the one-read-back histogram, the grouped in-place check."""

import hashlib

import pytest
import torch

from reference import memo
from reference.bits import NAN_DISTANCE, ulp_histogram, ulp_histogram_counts
from reference.contract import EpilogueContract
from reference.epilogue import apply_epilogue, cached_epilogue
from reference.operands import copy_keep_layout, tensor_digest


def _sha(t: torch.Tensor) -> str:
    """tensor_digest's definition, written out independently."""
    h = hashlib.sha256(f"{t.dtype};{','.join(str(s) for s in t.shape)};".encode())
    h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_a_copy_digested_before_its_source_hashes_once_and_gives_both_digests():
    a = torch.arange(-64, 64, dtype=torch.int8).reshape(8, 16)
    want = _sha(a)
    calls = []
    import reference.operands as ro

    real = ro._digest
    try:
        ro._digest = lambda t: calls.append(tuple(t.shape)) or real(t)
        with memo.scope():
            c = copy_keep_layout(a)  # source digest unknown at copy time
            assert tensor_digest(c) == want  # computed once, on the source
            assert tensor_digest(a) == want  # no second hash
            assert calls == [(8, 16)]
            # a copy made once the digest is known inherits it outright
            assert tensor_digest(copy_keep_layout(a)) == want and len(calls) == 1
            # a source written after the copy (digest unknown): the copy hashes itself
            e = a.clone()
            f = copy_keep_layout(e)
            e[0, 0] = 7
            assert tensor_digest(f) == want and tensor_digest(e) == _sha(e) != want
        assert len(calls) == 3
    finally:
        ro._digest = real
    # outside a scope nothing is remembered
    assert memo.copy_source(copy_keep_layout(a)) is None


def test_cached_epilogue_is_the_epilogue_and_is_computed_once_per_contract_in_a_scope():
    g = torch.Generator().manual_seed(3)
    acc = torch.randint(-(2**20), 2**20, (4, 6), generator=g, dtype=torch.int64)
    sa = torch.rand(4, generator=g) * 1e-3
    sb = torch.rand(6, generator=g) * 1e-2
    cs = [EpilogueContract(o) for o in ("a_then_w", "w_then_a", "fused")]
    with memo.scope() as st:
        outs = [cached_epilogue(acc, sa, sb, c) for c in cs]
        m = st["misses"]
        again = [cached_epilogue(acc, sa, sb, c) for c in cs]
        assert st["misses"] == m and all(x is y for x, y in zip(outs, again))
    for c, o in zip(cs, outs):
        assert torch.equal(o.view(torch.int16), apply_epilogue(acc, sa, sb, c).view(torch.int16))
    # python-number scales have no identity: never memoized, still right
    with memo.scope():
        x = cached_epilogue(acc, sa, sb, cs[0])
        assert memo.moved(x, "cpu") is x


def test_histogram_counts_every_bin_in_one_tensor():
    d = torch.tensor([0, 0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 256, 257, 10**6, NAN_DISTANCE, -1])
    want = {"0": 2, "1": 1, "2": 1, "3-4": 2, "5-8": 2, "9-16": 2, "17-256": 2, ">256": 2, "nan": 1}
    assert ulp_histogram(d) == want
    assert ulp_histogram_counts(d).tolist() == list(want.values())
    assert ulp_histogram(torch.zeros(0, dtype=torch.int64)) == {k: 0 for k in want}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_histogram_counts_on_cuda_are_the_cpu_counts():
    g = torch.Generator().manual_seed(5)
    d = torch.randint(-1, 600, (64, 6144), generator=g, dtype=torch.int64)
    d.view(-1)[::97] = NAN_DISTANCE
    for x in (d, d[:0], d[:1, :7]):
        assert ulp_histogram_counts(x.cuda()).tolist() == ulp_histogram_counts(x).tolist()


def test_grouped_in_place_check_names_exactly_the_written_operands():
    from conformance.kernels.runner import _differing

    a = torch.zeros(3, 4, dtype=torch.int8)
    sa = torch.tensor([1.0, -0.0, float("nan")])
    orig = {"a": a, "b": a.clone(), "scale_a": sa, "scale_b": sa.clone(), "bias": None}
    given = {k: None if v is None else v.clone() for k, v in orig.items()}
    assert _differing(orig, given)[0] == []
    given["scale_b"][1] = 0.0  # -0 -> +0: same value, other bits
    given["a"][2, 3] = 1
    assert _differing(orig, given)[0] == ["a", "scale_b"]
    given["b"] = given["b"][:, :2]  # another shape
    assert _differing(orig, given)[0] == ["a", "b", "scale_b"]


def test_batched_chunk_accumulator_equals_the_chunk_loop_and_the_naive_sum_at_f6_scale(monkeypatch):
    # K > 131,072 (an F6 case): 129 float32 chunks; row 0 x channel 0 is all
    # (-128) * (-128), i.e. exactly K * 16384 > 2**31
    import reference.accumulate as acc_mod
    from reference.accumulate import exact_int_mm, int_mm_int64_naive

    g = torch.Generator().manual_seed(5)
    k = 131_073 + 7
    a = torch.randint(-128, 128, (2, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (3, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0], b[0] = -128, -128
    batched = exact_int_mm(a, b)
    monkeypatch.setattr(acc_mod, "_BATCHED_ELEMS", 0)  # force the per-chunk loop
    assert torch.equal(batched, exact_int_mm(a, b))
    assert torch.equal(batched, int_mm_int64_naive(a, b))
    assert int(batched[0, 0]) == k * 16384


def test_a_derived_digest_is_its_recipes_and_replaces_hashing_inside_a_scope(monkeypatch):
    import hashlib

    import reference.operands as O

    src = torch.arange(12, dtype=torch.int8).reshape(3, 4)
    built = torch.zeros((3, 8), dtype=torch.int8)
    with memo.scope():
        d = O.derived_digest(built, (src,), "pad 4")
        # SHA-256 of "dtype;shape;derived;<source digests>;<recipe>", by hand
        want = hashlib.sha256(f"torch.int8;3,8;derived;{O._digest(src)};pad 4".encode()).hexdigest()
        assert d == want
        monkeypatch.setattr(O, "_digest", lambda t: pytest.fail("hashed a tensor with a known digest"))
        assert O.tensor_digest(built) == d
        copy = torch.empty_like(built).copy_(built)
        memo.note_copy(built, copy)
        assert O.tensor_digest(copy) == d  # a copy shares it
        assert O.derived_digest(torch.zeros((3, 8), dtype=torch.int8), (src,), "pad 5") != d
        monkeypatch.undo()
        built.add_(1)  # written since: hashed again, by content
        assert O.tensor_digest(built) == O._digest(built) != d
    assert O.tensor_digest(copy) == O._digest(copy) != d  # outside a scope: content, always
