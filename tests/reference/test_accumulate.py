"""reference.accumulate: the exact accumulator and its bounds.

Expected accumulators are integers computed by hand from the operands'
construction (e.g. K copies of -128 x -128 = K * 2**14).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.accumulate import (
    CHUNK_K,
    FP32_EXACT_INT,
    INT32_MAX,
    INT32_MIN,
    accumulator_bound,
    accumulator_row_col_bound,
    exact_int_mm,
    int_mm_int64_naive,
)
from reference.errors import OperandError
from reference.strategies import int8_tensors, shapes


def i8(values):
    return torch.tensor(values, dtype=torch.int8)


def row(*segments):
    """1 x K int8 row from (value, count) segments."""
    out = []
    for v, c in segments:
        out += [v] * c
    return i8([out])


def test_constants():
    assert (INT32_MAX, INT32_MIN, FP32_EXACT_INT) == (2147483647, -2147483648, 16777216)
    assert CHUNK_K * 128 * 128 == 2**24  # the exactness argument's chunk bound


def test_minus128_squared():
    a, b = i8([[-128]]), i8([[-128]])
    assert exact_int_mm(a, b).tolist() == [[16384]]
    assert int_mm_int64_naive(a, b).tolist() == [[16384]]
    assert exact_int_mm(a, b).dtype == torch.int64


@pytest.mark.parametrize(
    "k,expected",
    [
        (1023, 1023 * 16384),
        (1024, 2**24),  # one full chunk of worst-case products: exactly 2**24
        (1025, 2**24 + 16384),  # crosses the chunk boundary
        (4096, 2**26),
    ],
)
def test_worst_case_all_minus128(k, expected):
    a = torch.full((2, k), -128, dtype=torch.int8)
    b = torch.full((3, k), -128, dtype=torch.int8)
    assert exact_int_mm(a, b).tolist() == [[expected] * 3] * 2


def test_mixed_extremes_small_hand_case():
    a = i8([[-128, 127, -1], [127, 127, 127]])
    b = i8([[-128, -128, 0], [127, -128, 5]])
    # row0: 16384 - 16256 + 0 = 128; -16256 - 16256 - 5 = -32517
    # row1: -16256 - 16256 + 0 = -32512; 16129 - 16256 + 635 = 508
    assert exact_int_mm(a, b).tolist() == [[128, -32517], [-32512, 508]]


def test_accumulator_around_2_pow_24():
    # 1024 x (-128 x -128) = 2**24, plus a tail of (1 x d)
    for d, expected in [(-1, 2**24 - 1), (0, 2**24), (1, 2**24 + 1), (3, 2**24 + 3)]:
        a = row((-128, 1024), (1, 1))
        b = row((-128, 1024), (d, 1))
        assert exact_int_mm(a, b).item() == expected


def test_accumulator_around_int32_bounds():
    # 2**31 - 1 = 131071 * 16384 + 129 * 127
    a = row((-128, 131071), (127, 129))
    b = row((-128, 131071), (1, 129))
    assert exact_int_mm(a, b).item() == INT32_MAX
    # 2**31 = 131072 * 16384: one past INT32_MAX, returned without wrap-around
    a = torch.full((1, 131072), -128, dtype=torch.int8)
    assert exact_int_mm(a, a).item() == 2**31
    # -2**31 = 132104 * (-128 * 127) + 8 * (-128 * 1); one more (-1 x 1) goes below INT32_MIN
    a = row((-128, 132104), (-128, 8))
    b = row((127, 132104), (1, 8))
    assert exact_int_mm(a, b).item() == INT32_MIN
    a2 = row((-128, 132104), (-128, 8), (-1, 1))
    b2 = row((127, 132104), (1, 8), (1, 1))
    assert exact_int_mm(a2, b2).item() == INT32_MIN - 1
    assert int_mm_int64_naive(a2, b2).item() == INT32_MIN - 1


def test_non_contiguous_operands_are_fine():
    a = torch.full((8, 4), 3, dtype=torch.int8).t()  # [4, 8] transposed view
    b = torch.full((8, 5), -2, dtype=torch.int8).t()  # [5, 8]
    assert exact_int_mm(a, b).tolist() == [[-48] * 5] * 4


def test_k_mismatch_and_dtype_errors():
    with pytest.raises(OperandError, match="K mismatch"):
        exact_int_mm(torch.zeros(2, 3, dtype=torch.int8), torch.zeros(2, 4, dtype=torch.int8))
    with pytest.raises(OperandError, match="b has dtype torch.float32"):
        exact_int_mm(torch.zeros(2, 3, dtype=torch.int8), torch.zeros(2, 3))


def test_bounds_hand_values():
    a = i8([[-128, 0, 1], [2, -3, 4]])
    b = i8([[127, -1, 0], [-128, -128, -128]])
    assert accumulator_bound(a, b) == 3 * 128 * 128
    # |a| @ |b|^T: [128*127+0+0, 128*128+0+128] ; [2*127+3*1+0, (2+3+4)*128]
    assert accumulator_row_col_bound(a, b).tolist() == [[16256, 16512], [257, 1152]]
    full = torch.full((1, 4096), -128, dtype=torch.int8)
    assert accumulator_bound(full, full) == 4096 * 16384
    assert accumulator_row_col_bound(full, full).tolist() == [[4096 * 16384]]


@given(st.data())
def test_fast_path_equals_naive(data):
    m, k, n = data.draw(shapes(max_m=9, max_k=2600, max_n=9))
    a = data.draw(int8_tensors((m, k)))
    b = data.draw(int8_tensors((n, k)))
    ref = int_mm_int64_naive(a, b)
    assert torch.equal(exact_int_mm(a, b), ref)
    bound = accumulator_row_col_bound(a, b)
    assert bool((ref.abs() <= bound).all())
    assert int(bound.max()) <= accumulator_bound(a, b)


def test_row_blocked_path_for_large_b(monkeypatch):
    import reference.accumulate as acc_mod

    monkeypatch.setattr(acc_mod, "_B_BLOCK_ELEMS", 3000)  # force several b row blocks
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (5, 2100), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (11, 2100), generator=g, dtype=torch.int8)
    b[4] = -128
    a[0] = -128
    assert torch.equal(exact_int_mm(a, b), int_mm_int64_naive(a, b))
    assert exact_int_mm(a, b)[0, 4].item() == 2100 * 16384
    expected_bound = (a.long().abs()[:, None, :] * b.long().abs()[None, :, :]).sum(-1)
    assert torch.equal(accumulator_row_col_bound(a, b), expected_bound)
    assert accumulator_row_col_bound(a, b)[0, 4].item() == 2100 * 16384


def test_reduced_matmul_precision_setting_is_overridden_and_restored():
    prev = torch.get_float32_matmul_precision()
    a = torch.full((4, 3000), -128, dtype=torch.int8)
    a[:, ::7] = 127
    try:
        torch.set_float32_matmul_precision("medium")
        got = exact_int_mm(a, a)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(prev)
    assert torch.equal(got, int_mm_int64_naive(a, a))
