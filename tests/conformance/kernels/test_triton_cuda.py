"""The built-in ``triton`` kernel natively (skipped without a GPU): CUDA-graph
capture and replay, exact split-K, TMA and persistent variants, strided
operands -- bits against the reference of the declared contract."""

from __future__ import annotations

import pytest
import torch

from conformance.kernels import builtin_triton as bt
from reference.accumulate import exact_int_mm
from reference.contract import TRITON_STYLE
from reference.epilogue import apply_epilogue

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _ops(m, k, n, seed, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, generator=g) * 0.01 + 1e-4
    bias = (torch.randn(n, generator=g) * 2).to(torch.bfloat16)
    return [t.to(device) for t in (a, b, sa, sb, bias)]


def _ref_bits(a, b, sa, sb, bias=None):
    acc = exact_int_mm(a.cpu().contiguous(), b.cpu().contiguous())
    ref = apply_epilogue(
        acc,
        sa.cpu().contiguous().reshape(-1),
        sb.cpu().contiguous(),
        TRITON_STYLE,
        None if bias is None else bias.cpu(),
        torch.bfloat16,
    )
    return ref.view(torch.int16)


def _captured(a, b, sa, sb):
    """``(graph, out)``: one ``bt.scaled_mm`` call captured in a CUDA graph, after a
    warm-up call on a side stream (tuning happens there, never inside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        bt.scaled_mm(a, b, sa, sb)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = bt.scaled_mm(a, b, sa, sb)
    return graph, out


@pytest.mark.parametrize("m", [1, 16, 512])
def test_cuda_graph_capture_and_replay(m):
    k, n = 2048, 1024
    a, b, sa, sb, _ = _ops(m, k, n, seed=m)
    graph, out = _captured(a, b, sa, sb)
    for seed in (101, 102):  # new operand values in the captured buffers
        a2, _, sa2, _, _ = _ops(m, k, n, seed=seed)
        a.copy_(a2)
        sa.copy_(sa2)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a, b, sa, sb))


@pytest.mark.parametrize(
    "cfg",
    [
        bt.Config("ptr", 16, 64, 256, 1, 2, 4, 4),
        bt.Config("ptr", 16, 64, 128, 1, 8, 4, 4),
        # what untimed calls pick for few tiles over a long K (builtin_triton._untuned)
        bt.Config("ptr", 16, 64, 256, 1, 4, 4, 4),
        bt.Config("ptr", 32, 64, 128, 8, 4, 4, 4),
    ],
    ids=lambda c: c.label(),
)
def test_split_k_natively_exact(cfg):
    for m, k in ((1, 6144), (13, 1000)):  # K a multiple of the split and not
        a, b, sa, sb, bias = _ops(m, k, 200, seed=k)
        out = bt.scaled_mm_config(cfg, a, b, sa, sb, torch.bfloat16, bias)
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a, b, sa, sb, bias))
        acc = bt.scaled_mm_config(cfg, a, b, sa, sb, None)
        assert torch.equal(acc.cpu().to(torch.int64), exact_int_mm(a.cpu(), b.cpu()))


@pytest.mark.parametrize(
    "cfg",
    [
        c
        for c in bt.BUCKET_CONFIGS["large"]
        if c.kernel == "tma"
        and c.label() not in bt._EXCLUDED
        and (c.persistent or c.warp_spec or c.block_k != 128 or c == bt._c("tma", 128, 256, 128, 8, 1, 8, 3))
    ],
    ids=lambda c: c.label(),
)
def test_tma_and_persistent_natively_exact(cfg):
    a, b, sa, sb, bias = _ops(300, 1040, 520, seed=7)  # edge tiles in M, N and K
    try:
        out = bt.scaled_mm_config(cfg, a, b, sa, sb, torch.bfloat16, bias)
    except Exception as e:  # noqa: BLE001 -- a variant this Triton cannot build is skipped by tuning
        pytest.skip(f"{cfg.label()} does not build here: {type(e).__name__}")
    assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a, b, sa, sb, bias))


@pytest.mark.parametrize("m", [1, 33])
def test_strided_operands_natively(m):
    k, n = 100, 72
    a, b, sa, sb, bias = _ops(m, k + 28, n, seed=3)
    av = a[:, :k]
    w_kn = b[:, :k].t().contiguous()
    bv = w_kn.t()  # vLLM's column-major b
    sav = sa.reshape(m, 1)
    out = bt.scaled_mm(av, bv, sav, torch.tensor(0.004, device="cuda"), torch.bfloat16, bias)
    want = _ref_bits(av, bv, sav, torch.full((n,), 0.004), bias)
    assert torch.equal(out.view(torch.int16).cpu(), want)


@pytest.mark.parametrize("m, k, n", [(16, 131073, 16), (1, 2047, 300), (33, 100, 77), (300, 1000, 520)])
def test_odd_k_natively_pads_and_stays_exact(monkeypatch, m, k, n):
    """K % 16 != 0 (padding forced down to these sizes): the call copies a and b
    zero-padded to K' (the next multiple of 16; builtin_triton._pad_k) on the planned
    and on the cached path; a strided a and a column-major b; bits against the
    declared contract; the manifest says K'."""
    from conformance.kernels import trace

    monkeypatch.setattr(bt, "PAD_K_MIN_MACS", 0)
    kp = (k + 15) // 16 * 16
    for seed in (1, 2):  # 2: same metadata, the cached call
        a, b, sa, sb, bias = _ops(m, k + 3, n, seed=seed)
        av, bv = a[:, :k], b[:, :k].t().contiguous().t()
        with trace.capture() as t:
            out = bt.scaled_mm(av, bv, sa, sb, torch.bfloat16, bias)
        assert t.extra["k_padded_to"] == kp
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(av, bv, sa, sb, bias))
        acc = bt.int_mm(av, bv)
        assert torch.equal(acc.cpu().to(torch.int64), exact_int_mm(av.cpu(), bv.cpu()))


def test_odd_k_large_gemm_pads_by_default_and_small_tuned_one_does_not():
    from conformance.kernels import trace

    for (m, k, n), padded in (((1024, 1041, 1024), 1056), ((64, 1041, 64), None)):
        a, b, sa, sb, bias = _ops(m, k, n, seed=k + m)
        with trace.capture() as t:
            out = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
        assert t.extra.get("k_padded_to") == padded
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a, b, sa, sb, bias))


def test_odd_k_call_captured_in_a_cuda_graph_replays_exactly(monkeypatch):
    monkeypatch.setattr(bt, "PAD_K_MIN_MACS", 0)
    m, k, n = 16, 1000, 256
    a, b, sa, sb, _ = _ops(m, k, n, seed=7)
    graph, out = _captured(a, b, sa, sb)
    a2 = _ops(m, k, n, seed=8)[0]
    a.copy_(a2)  # the padded copy is part of the graph: replay re-reads a
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a, b, sa, sb))


def test_every_tuned_plan_reports_its_config():
    from conformance.kernels import trace

    a, b, sa, sb, _ = _ops(512, 2048, 2048, seed=9)
    with trace.capture() as t:
        bt.scaled_mm(a, b, sa, sb)
    assert t.path == "triton-native" and t.extra["config"] and "split_k" in t.extra


def _plan_of(a, b, sa, sb):
    key_hits = [c for c in bt._CALLS.values() if c.m == a.shape[0] and c.n == b.shape[0] and c.k == a.shape[1]]
    return key_hits


@pytest.mark.parametrize("m", [1, 512])
def test_repeated_calls_use_the_raw_launcher_and_stay_exact(m):
    k, n = 2048, 1536
    a, b, sa, sb, bias = _ops(m, k, n, seed=40 + m)
    bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
    calls = [c for c in _plan_of(a, b, sa, sb) if c.fast is not None]
    assert calls, "an aligned first call keeps the compiled kernel"
    for seed in (41, 42):  # new tensors, same metadata: the cached raw launch
        a2, b2, sa2, sb2, bias2 = _ops(m, k, n, seed=seed)
        out = bt.scaled_mm(a2, b2, sa2, sb2, torch.bfloat16, bias2)
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(a2, b2, sa2, sb2, bias2))


@pytest.mark.parametrize("m", [1, 40])
def test_unaligned_view_with_cached_metadata_takes_the_full_launch(m):
    # same shape and strides as an aligned call (so the same cache entry), but
    # a base pointer 1 byte off: Triton specialised the cached kernel on
    # 16-byte alignment, so it must not be reused
    k, n = 256, 96
    buf, b, sa, sb, _ = _ops(m, k + 16, n, seed=5)
    b = b[:, :k]
    aligned, shifted = buf[:, :k], buf[:, 1 : k + 1]
    for x in (aligned, shifted, aligned, shifted):
        out = bt.scaled_mm(x, b, sa, sb)
        assert torch.equal(out.view(torch.int16).cpu(), _ref_bits(x, b, sa, sb))


def test_raw_and_standard_bare_launches_write_the_call_s_bits():
    a, b, sa, sb, _ = _ops(1, 2048, 6144, seed=11)
    want = bt.scaled_mm(a, b, sa, sb)
    for raw in (False, True):
        launch, out, _ = bt.launch_spec(a, b, sa, sb, raw=raw)
        out.zero_()
        launch()
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), want.view(torch.int16))


# (M, K, N, out dtype, layout): the default suite's families that reach tile
# edges (large_shapes, layouts, ties at M = 33, 17x16x16); the tuner may pick
# any candidate of the bucket for them, so every candidate must be exact
_EDGE_SHAPES = [
    (128, 257, 300, torch.bfloat16, "dense"),
    (129, 1040, 257, torch.bfloat16, "dense"),
    (257, 520, 328, torch.float16, "dense"),
    (16, 8195, 320, torch.float32, "dense"),
    (2, 8195, 383, torch.bfloat16, "dense"),
    (17, 16, 16, torch.bfloat16, "dense"),
    (33, 100, 77, torch.float16, "a_padded"),
    (33, 96, 80, torch.bfloat16, "b_transposed"),
    (5, 64, 48, torch.float32, "b_transposed"),
    # TMA-eligible (K, N multiples of 16) with more tiles than SMs, so persistent
    # programs loop over several tiles: the 512x2048x6144 layer shape is where
    # a warp-specialised candidate hung natively (none of the above allows TMA)
    (512, 2048, 6144, torch.bfloat16, "dense"),
    (200, 1024, 4096, torch.float16, "dense"),
]


def _edge_operands(m, k, n, layout, seed, device="cuda"):
    a, b, sa, sb, bias = _ops(m, k + 32, n, seed=seed, device=device)
    a, b = a[:, :k], b[:, :k]
    if layout != "a_padded":
        a = a.contiguous()
    b = b.t().contiguous().t() if layout == "b_transposed" else b.contiguous()
    return a, b, sa, sb, bias


@pytest.mark.parametrize("shape", _EDGE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}-{str(s[3]).split('.')[-1]}-{s[4]}")
def test_every_candidate_configuration_exact_on_edge_shapes(shape):
    _check_candidates(shape, "cuda")


def _check_candidates(shape, device):
    """Every candidate of the shape's bucket (TMA ones where the operands
    allow TMA) against the declared contract's bits; one line per wrong one."""
    m, k, n, out_dtype, layout = shape
    a, b, sa, sb, bias = _edge_operands(m, k, n, layout, seed=m + k + n, device=device)
    bias = bias.to(out_dtype)
    acc = exact_int_mm(a.cpu().contiguous(), b.cpu().contiguous())
    want = apply_epilogue(acc, sa.cpu(), sb.cpu(), TRITON_STYLE, bias.cpu(), out_dtype)
    ibits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
    tma = a.is_cuda and m > 16 and bt._tma_ok(a, b)
    bad, built = [], 0
    for cfg in bt._candidates(m, tma):
        try:
            out = bt.scaled_mm_config(cfg, a, b, sa, sb, out_dtype, bias)
        except Exception:  # noqa: BLE001 -- the tuner drops a variant that does not build
            continue
        built += 1
        got = out.cpu().view(ibits[out_dtype])
        diff = (got != want.view(ibits[out_dtype])).nonzero()
        if len(diff):
            i, j = diff[0].tolist()
            mask = (1 << (8 * got.element_size())) - 1
            bad.append(
                f"{cfg.label()}: {len(diff)} of {m * n} differ, first [{i},{j}] got "
                f"{int(got[i, j]) & mask:#x} want "
                f"{int(want.view(ibits[out_dtype])[i, j]) & mask:#x}"
            )
    assert built, "no candidate configuration builds"
    assert not bad, "; ".join(bad)
