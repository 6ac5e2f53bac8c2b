"""Odd K in the built-in ``triton`` kernel: natively, a K that is not a multiple of
16 makes a call of M*N*K >= 2^30, or any call with ``INT8CONF_TRITON_AUTOTUNE=0``,
copy ``a`` and ``b`` into zero-padded [*, K'] buffers (``builtin_triton._padded_k`` /
``_pad_k``; without it Triton can vectorise no load: up to 80x slower on the H200,
reports/bench/nvidia-h200/probe-2026-12-02/NOTE.md). The padding is forced under the interpreter here
so that the first (planned) and the cached call run the code path on a CPU; the
native run is ``test_triton_cuda.py::test_odd_k_natively_pads_and_stays_exact``."""

from __future__ import annotations

import pytest
import torch

from conformance.kernels import builtin_triton as bt
from conformance.kernels import trace
from reference.accumulate import exact_int_mm
from reference.contract import TRITON_STYLE
from reference.epilogue import apply_epilogue

BIG = bt.PAD_K_MIN_MACS


@pytest.mark.parametrize(
    "m, n, k, native, autotune, want",
    [
        # large: M*N*K >= PAD_K_MIN_MACS (2**30)
        (512, 6144, 2049, True, "1", 2064),
        (4096, 4096, 4097, True, "1", 4112),
        (1024, 1024, 1024 + 1, True, "1", 1040),
        (1024, 1024, 1023, True, "1", 0),  # 1023: < 2**30
        (4096, 4096, 4096, True, "1", 0),  # aligned K: never
        (16, 6144, 2049, True, "1", 0),  # small and tuned: the tuner copes
        (16, 6144, 2049, True, "0", 2064),  # untuned: always
        (16, 16, 131073, True, "off", 131088),
        (1, 1, 1, True, "0", 16),
        (4096, 4096, 4097, False, "1", 0),
        (16, 16, 131073, False, "0", 0),  # interpreter: never
    ],
)
def test_k_is_padded_natively_when_large_or_untuned(monkeypatch, m, n, k, native, autotune, want):
    monkeypatch.setenv("INT8CONF_TRITON_AUTOTUNE", autotune)
    assert (m * n * k >= BIG) == (
        (m, n, k) in ((512, 6144, 2049), (4096, 4096, 4097), (1024, 1024, 1025), (4096, 4096, 4096))
    )
    assert bt._padded_k(m, n, k, native) == want


def test_pad_k_copies_any_layout_and_fills_zeros():
    w_kn = torch.arange(-50, 55, dtype=torch.int8).reshape(7, 15)  # [K, N] buffer
    b = w_kn.t()  # [N=15, K=7], transposed
    got = bt._pad_k(b, 16)
    assert got.shape == (15, 16) and got.is_contiguous() and got.dtype == torch.int8
    assert torch.equal(got[:, :7], b) and not got[:, 7:].any()


def _operands(m, k, n, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k + 5), dtype=torch.int8, generator=g)[:, :k]
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g).t()  # column-major
    sa = torch.rand(m, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, generator=g) * 0.01 + 1e-4
    bias = (torch.randn(n, generator=g) * 2).to(torch.bfloat16)
    return a, b, sa, sb, bias


def _want_bits(a, b, sa, sb, bias):
    acc = exact_int_mm(a.contiguous(), b.contiguous())
    return apply_epilogue(acc, sa, sb, TRITON_STYLE, bias, torch.bfloat16).view(torch.int16)


def test_padded_calls_are_exact_on_the_planned_and_the_cached_path(monkeypatch):
    monkeypatch.setattr(bt, "_padded_k", lambda m, n, k, native: (k + 15) // 16 * 16 if k % 16 else 0)
    for cache in ("_CALLS", "_PLANS", "_CHOSEN"):  # this test's own plans
        monkeypatch.setattr(bt, cache, {})
    m, k, n = 5, 37, 24
    for seed in (1, 2):  # seed 2: same metadata, so the cached call (pads in _run)
        a, b, sa, sb, bias = _operands(m, k, n, seed)
        with trace.capture() as t:
            out = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
        assert torch.equal(out.view(torch.int16), _want_bits(a, b, sa, sb, bias))
        assert t.extra["k_padded_to"] == 48
        acc = bt.int_mm(a, b)
        assert torch.equal(acc.to(torch.int64), exact_int_mm(a.contiguous(), b.contiguous()))
    calls = list(bt._CALLS.values())
    assert len(calls) == 2 and all(c.pad_k == 48 and c.k == 48 for c in calls)


def test_the_interpreter_does_not_pad(monkeypatch):
    for cache in ("_CALLS", "_PLANS", "_CHOSEN"):
        monkeypatch.setattr(bt, cache, {})
    a, b, sa, sb, bias = _operands(3, 37, 16, 3)
    with trace.capture() as t:
        out = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
    assert torch.equal(out.view(torch.int16), _want_bits(a, b, sa, sb, bias))
    assert "k_padded_to" not in t.extra
    assert [c.pad_k for c in bt._CALLS.values()] == [0]
