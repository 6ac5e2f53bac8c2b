"""reference.memo (scoped memo of digests / exact accumulators / bounds) and
the exact accumulator on the operands' own device."""

import pytest
import torch

from reference import memo
from reference.accumulate import accumulator_row_col_bound, exact_int_mm, int_mm_int64_naive
from reference.operands import _digest, copy_keep_layout, tensor_digest

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
    ),
]


def _extreme_operands(m, k, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0, :] = -128  # row 0 x channel 0: every product is (-128) * (-128) = 16384
    b[0, :] = -128
    return a, b


@pytest.mark.parametrize("device", DEVICES)
def test_exact_accumulator_on_the_operands_device_equals_the_naive_int64_sum(device):
    # K = 2500 spans three float32 chunks of 1024; element [0, 0] is 2500 * 16384
    # = 40,960,000 > 2**24 (a single float32 GEMM would round it)
    a, b = _extreme_operands(5, 2500, 7)
    want = int_mm_int64_naive(a, b)
    assert int(want[0, 0]) == 2500 * 16384
    got = exact_int_mm(a.to(device), b.to(device))
    assert got.device.type == device and got.dtype == torch.int64
    assert torch.equal(got.cpu(), want)
    bound = accumulator_row_col_bound(a.to(device), b.to(device))
    assert bound.device.type == device
    assert torch.equal(bound.cpu(), a.to(torch.int64).abs() @ b.to(torch.int64).abs().T)


def test_memo_computes_each_digest_and_accumulator_once_inside_a_scope_only():
    a, b = _extreme_operands(4, 64, 6, seed=1)
    d0 = _digest(a)
    with memo.scope() as st:
        h0, m0 = st["hits"], st["misses"]
        assert tensor_digest(a) == d0
        assert tensor_digest(a) == d0
        acc1, acc2 = exact_int_mm(a, b), exact_int_mm(a, b)
        assert acc1 is acc2 and torch.equal(acc1, int_mm_int64_naive(a, b))
        assert (st["misses"] - m0, st["hits"] - h0) == (2, 2)
        # a copy made by copy_keep_layout inherits the digest without hashing
        c = copy_keep_layout(a)
        h1 = st["hits"]
        assert tensor_digest(c) == d0 and st["hits"] == h1 + 1
        # an in-place write bumps the version: recomputed, and right
        c[0, 0] = 5
        assert tensor_digest(c) == _digest(c) != d0
        a[1, 1] = 0 if int(a[1, 1]) != 0 else 1
        acc3 = exact_int_mm(a, b)
        assert acc3 is not acc1 and torch.equal(acc3, int_mm_int64_naive(a, b))
    # outside the scope nothing is stored: a fresh result per call
    assert exact_int_mm(a, b) is not exact_int_mm(a, b)
    assert not memo.active()


def test_memo_never_serves_a_freed_tensors_result_to_a_new_one_at_the_same_id():
    with memo.scope():
        ids = set()
        for i in range(40):
            t = torch.full((3, 3), i, dtype=torch.int8)
            ids.add(id(t))
            assert tensor_digest(t) == _digest(t)
            del t  # CPython usually reuses the id for the next tensor
