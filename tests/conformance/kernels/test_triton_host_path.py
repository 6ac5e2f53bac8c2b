"""Host path of the built-in ``triton`` kernel, checkable without a GPU: the
raw launcher's argument order, launch hooks, cached TMA descriptors, and the
tuning space (the plain GEMM's configurations are always candidates; an
excluded configuration never is)."""

from __future__ import annotations

import inspect

import pytest
import torch
import triton

from conformance.bench import gemm as bench
from conformance.kernels import builtin_triton as bt
from conformance.kernels import triton_gemm


def test_constexpr_tail_is_every_constexpr_in_signature_order():
    kern = triton.jit(triton_gemm.w8a8_mm)
    cfg = bt.Config("ptr", 16, 64, 256, 1, 4, 4, 4)
    a = torch.zeros(3, 2048, dtype=torch.int8)
    b = torch.zeros(40, 2048, dtype=torch.int8)
    _, ints, kw, _ = bt._layout(cfg, False, a, b, 1, 1, None, torch.bfloat16, 3, 40, 2048, False)
    tail = bt._constexpr_tail(kern, kw)
    params = list(inspect.signature(triton_gemm.w8a8_mm).parameters)
    first = params.index("HAS_BIAS")
    # runtime parameters: 8 tensors + the integer arguments, then only constexprs
    assert first == 8 + len(ints)
    # HAS_BIAS, OUT_KIND, ACC_ONLY, BLOCK_M/N/K, GROUP_M, SPLIT_K, EVEN_K (2048 = 2 x 1024),
    # INT64_IDX, K_ITERS_STATIC (0 natively), FLOAT_DOT (interpreter only)
    assert tail == (False, 0, False, 16, 64, 256, 1, 4, True, False, 0, False)
    assert tail == tuple(kw[p] for p in params[first:])


def test_tma_constexpr_tail_carries_warp_specialisation():
    kern = triton.jit(triton_gemm.w8a8_mm_tma)
    a = torch.zeros(300, 1024, dtype=torch.int8)
    b = torch.zeros(520, 1024, dtype=torch.int8)
    for cfg, ws in (
        (bt.Config("tma", 128, 256, 128, 8, 1, 8, 3, warp_spec=True), 2),
        (bt.Config("tma", 128, 256, 128, 8, 1, 8, 3), 0),
    ):
        _, ints, kw, words = bt._layout(cfg, False, a, b, 1, 1, None, torch.bfloat16, 300, 520, 1024, False)
        assert words == 0 and ints[-1] == 9  # NUM_PROGS: 3 x 3 tiles, not persistent
        assert bt._constexpr_tail(kern, kw)[-2:] == (False, ws)  # FLATTEN, WARP_SPEC


def test_launch_hooks_only_when_a_profiler_installed_one():
    assert bt._hooks() == (None, None)
    rt = triton.knobs.runtime
    seen = []

    def hook(meta):
        seen.append(meta)

    rt.launch_enter_hook.add(hook)
    try:
        enter, leave = bt._hooks()
        assert enter is rt.launch_enter_hook and leave is rt.launch_exit_hook
    finally:
        rt.launch_enter_hook.remove(hook)
    assert bt._hooks() == (None, None)


def test_cached_descriptor_has_the_validated_fields_and_the_new_base():
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.zeros(64, 256, dtype=torch.int8)
    y = torch.ones(64, 256, dtype=torch.int8)
    d1 = bt._descriptor(x, 64, 256, 256, 32, 128)
    d2 = bt._descriptor(y, 64, 256, 256, 32, 128)
    want = TensorDescriptor(y, [64, 256], [256, 1], [32, 128])
    assert d2.base is y and d1.base is x
    assert (d2.shape, d2.strides, d2.block_shape, d2.padding) == (
        want.shape,
        want.strides,
        want.block_shape,
        want.padding,
    )


@pytest.mark.parametrize("bucket", ["small", "large"])
def test_plain_gemm_space_is_always_a_candidate(bucket):
    cands = bt.BUCKET_CONFIGS[bucket]
    for bm, bn, bk, w, s in bench.PLAIN_CONFIGS:
        assert bt.Config("ptr", bm, bn, bk, 8, 1, w, s) in cands, (bm, bn, bk, w, s)
    assert len(set(cands)) == len(cands)


def test_excluded_configuration_is_never_a_candidate():
    cfg = bt.BUCKET_CONFIGS["large"][0]
    assert cfg in bt._candidates(4096, True)
    bt.exclude_configs([cfg.label()])
    try:
        assert cfg not in bt._candidates(4096, True)
        assert bt._candidates(4096, True)  # the others remain
    finally:
        bt._EXCLUDED.discard(cfg.label())


def test_labels_name_every_option():
    c = bt.Config("tma", 128, 256, 128, 8, 1, 8, 3, persistent=True, flatten=True, warp_spec=True)
    assert c.label() == "tma 128x256x128 g8 sk1 w8 s3 persistent flat ws"
    for cfgs in bt.BUCKET_CONFIGS.values():  # a label names one configuration of a bucket
        assert len({c.label() for c in cfgs}) == len(cfgs)


class _Event:
    """Stands in for a ``torch.cuda.Event``: complete after ``polls`` queries."""

    def __init__(self, polls):
        self.polls, self.queries = polls, 0

    def query(self):
        self.queries += 1
        return self.polls is not None and self.queries > self.polls


def test_wait_returns_once_the_event_completes():
    ev = _Event(polls=3)
    bt._wait(ev, "ptr 16x64x256 g1 sk1 w4 s4", limit_s=300)  # returns at the 4th query
    assert ev.queries == 4


def test_a_launch_that_never_finishes_is_named_not_waited_on_forever():
    label = "tma 128x256x128 g8 sk1 w8 s3 persistent ws"
    with pytest.raises(bt.KernelHang) as e:
        bt._wait(_Event(polls=None), label, limit_s=0.05)
    assert f"'{label}' did not finish within 0.05 s" in str(e.value)
    assert f"INT8CONF_TRITON_EXCLUDE='{label}'" in str(e.value)


def test_the_tuner_stops_at_a_hang_instead_of_queueing_the_next_candidate(monkeypatch):
    tried = []

    def fake_time(fn, batches=5, what="?"):
        tried.append(what)
        if len(tried) == 2:
            raise bt.KernelHang(what)
        return 1.0

    monkeypatch.setattr(bt, "_time_e2e", fake_time)
    monkeypatch.setattr(bt, "_issue", lambda *a: None)
    cands = list(bt.BUCKET_CONFIGS["large"][:4])
    with pytest.raises(bt.KernelHang):
        bt._tune(cands, lambda cfg: cfg, ())
    assert tried == [c.label() for c in cands[:2]]


def test_no_candidate_is_the_configuration_that_hung_on_the_h200():
    labels = {c.label() for cs in bt.BUCKET_CONFIGS.values() for c in cs}
    assert "tma 128x128x128 g8 sk1 w4 s4 persistent ws" not in labels


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "inf"])
def test_a_bad_hang_limit_is_named(monkeypatch, raw):
    monkeypatch.setenv("INT8CONF_TRITON_HANG_S", raw)
    with pytest.raises(ValueError, match=f"INT8CONF_TRITON_HANG_S must be a number of seconds > 0, got '{raw}'"):
        bt._hang_limit_s()
    monkeypatch.setenv("INT8CONF_TRITON_HANG_S", "2.5")
    assert bt._hang_limit_s() == 2.5


@pytest.mark.parametrize(
    "m, n, k, want",
    [
        # the sweep's F6 window (16 x 16, K padded to 131328): one 16x64 tile walking 513
        # K blocks -> the first candidate with the fewest K blocks per program, 129 (sk4)
        (16, 16, 131328, "ptr 16x64x256 g1 sk4 w4 s4"),
        (1, 16, 8195, "ptr 16x64x256 g1 sk4 w4 s4"),
        # short K loop (8 blocks < 16): a split is not worth its atomics
        (16, 16, 2048, "ptr 16x64x256 g1 sk1 w4 s4"),
        # tiles already fill half of 132 SMs (96 of 16x64): the default stays
        (1, 6144, 2048, "ptr 16x64x256 g1 sk1 w4 s4"),
        # small bucket, an F7 case: 64 x 1024 x 3072, 8 tiles of 64x128 walking 24 blocks
        (64, 1024, 3072, "ptr 32x64x128 g8 sk4 w4 s4"),
        (512, 6144, 2048, None),  # large bucket: its default, always
    ],
)
def test_untimed_calls_split_k_only_when_the_default_leaves_the_gpu_idle(m, n, k, want):
    cands = bt._candidates(m, tma=True)
    got = bt._untuned(cands, m, n, k, sms=132)
    assert got.label() == (want or cands[0].label())
    # the choice is exact like every candidate: a listed configuration of this bucket
    assert got in bt.BUCKET_CONFIGS[bt.bucket(m)]
