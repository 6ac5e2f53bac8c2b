"""The Gluon int8 GEMM (``conformance.kernels.gluon_gemm``), verified offline: compiled
for sm_90 on a machine without a GPU, its PTX must show what it was written for --
int8 wgmma whose int32 accumulator stays in flight across K steps (``wait_group 1``,
which Triton's own pipeliner never emits for an int32 accumulator; reports/bench/
nvidia-h200/probe-2026-12-01f/NOTE.md) -- one entry function, no local-memory spills,
and the shared epilogue's bf16 rounding. Its bits on a GPU are checked by the probe
(probe_8192.py, probe_ws.py) and natively by ``pytest --kernel=triton`` on sm_90.

Also: the Gluon candidates join the tuning only on sm_90 (on by default there since
2026-12-01g, when they ran exact natively; ``INT8CONF_TRITON_GLUON=0`` leaves them out).

The warp-specialised ping-pong variant (``w8a8_mm_gluon_ws``, written offline, exact on
the H200 since 2026-12-02): its PTX must show a register-reallocated producer / two-consumer split
(``setmaxnreg`` 240 / 24), int8 wgmma kept in flight in each consumer's K loop
(``wait_group 1``) with the ring slot released (``mbarrier.arrive``) only after that
wait, TMA loads only in the producer after its empty-slot wait, no spills and shared
memory within 227 KiB; its candidates join wherever the other Gluon ones do, unless
``INT8CONF_TRITON_GLUON_WS=0``.
"""

import os
import re
import subprocess

import pytest

from conformance.kernels import builtin_triton as bt
from conformance.kernels import gluon_gemm

needs_gluon = pytest.mark.skipif(
    not gluon_gemm.AVAILABLE, reason="this Triton has no Gluon Hopper API (triton.experimental.gluon ... nvidia.hopper)"
)

#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the configurations the probe times
CONFIGS = [(128, 256, 128, 8, 3), (128, 128, 128, 4, 3), (256, 128, 128, 8, 3)]


def _compile(bm, bn, bk, warps, stages, ws=False, **kw):
    import triton
    from triton.backends.compiler import GPUTarget

    src = gluon_gemm.sm90_source(bm, bn, bk, stages, ws=ws, **kw)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "enable_fp_fusion": False}
    )


def _ptxas():
    """The ptxas this Triton uses for sm_90 (3.9: ``ptxas-blackwell``; its plain
    ``ptxas`` is too old for the PTX it emits), else ``bin/ptxas``; None if absent."""
    import triton

    try:
        from triton.backends.nvidia.compiler import get_ptxas

        path = get_ptxas(90).path
    except Exception:  # noqa: BLE001 -- another Triton layout
        path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return path if path and os.path.exists(path) else None


@needs_gluon
@pytest.mark.parametrize("has_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "{}x{}x{}w{}s{}".format(*c))
def test_sm90_ptx_keeps_one_int8_wgmma_group_in_flight(cfg, has_bias, tmp_path):
    k = _compile(*cfg, has_bias=has_bias, out_kind=0)
    ptx = k.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.s32\.s8\.s8", ptx)
    waits = set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx))
    assert "1" in waits, waits  # the point of the kernel
    # a slot freed by a wait (1 in the K loop, 0 before the next tile's prefetch) is
    # refilled only after every warp passed its wait: a bar.sync before the next TMA load
    for w in re.finditer(r"wgmma\.wait_group\.sync\.aligned \d+;", ptx):
        rest = ptx[w.end() :]
        nxt = rest.find("cp.async.bulk.tensor")
        assert nxt < 0 or "bar.sync" in rest[:nxt]
    assert len(re.findall(r"^\.visible \.entry ", ptx, re.MULTILINE)) == 1
    assert "32767" in ptx  # the epilogue's bf16 RNE rounding constant 0x7FFF
    assert not re.search(r"\bfma\.", ptx)  # no contraction into FMA
    _assert_no_local_memory(ptx, tmp_path)


def _assert_no_local_memory(ptx, tmp_path):
    """``ptxas -v`` (Triton's own for sm_90) reports no stack frame and no spills;
    nothing to check without a ptxas that reads this PTX."""
    ptxas = _ptxas()
    if ptxas is None:
        return  # only the spill check needs ptxas
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    res = subprocess.run(
        [ptxas, "-v", "-arch=sm_90a", str(src), "-o", os.devnull], capture_output=True, text=True, check=False
    )
    if res.returncode != 0 and "Unsupported .version" in res.stderr:
        return  # a bundled ptxas older than the PTX this Triton emits
    assert res.returncode == 0, res.stderr[-2000:]
    # no local memory at all: no stack frame, no spills
    assert re.search(r"(?<!\d)0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", res.stderr), res.stderr


@needs_gluon
def test_sm90_fp32_bias_epilogue_is_not_contracted():
    """fp32 out with bias is ``(acc * s_a) * s_w + bias``: with ``enable_fp_fusion=False``
    the last multiply and the add stay two roundings, as in ``triton_gemm.fused_epilogue``."""
    ptx = _compile(64, 128, 128, 4, 4, has_bias=True, out_kind=2).asm["ptx"]
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx
    assert not re.search(r"\bfma\.", ptx)


def test_gluon_joins_on_sm90_by_default_and_the_opt_out_removes_it(monkeypatch):
    import torch

    monkeypatch.delenv("INT8CONF_TRITON_GLUON", raising=False)
    assert not bt._gluon_enabled(torch.device("cpu"))  # a CPU has no sm_90
    monkeypatch.setattr(bt, "_capability", lambda dev: (9, 0))
    monkeypatch.setattr(gluon_gemm, "AVAILABLE", True)
    h200 = torch.device("cuda", 0)
    assert bt._gluon_enabled(h200)  # the default on sm_90
    monkeypatch.setenv("INT8CONF_TRITON_GLUON", "0")
    assert not bt._gluon_enabled(h200)  # the opt-out
    monkeypatch.setenv("INT8CONF_TRITON_GLUON", "1")
    assert bt._gluon_enabled(h200)
    monkeypatch.setattr(bt, "_capability", lambda dev: (10, 0))
    assert not bt._gluon_enabled(torch.device("cuda", 0))  # sm_100: not wgmma code
    monkeypatch.setattr(bt, "_capability", lambda dev: (9, 0))
    monkeypatch.setattr(gluon_gemm, "AVAILABLE", False)
    assert not bt._gluon_enabled(h200)  # no Gluon Hopper API in this Triton
    for m in (8, 128, 4096):
        cands = bt._candidates(m, True)
        assert all(c.kernel != "gluon" for c in cands)
        assert cands == bt._candidates(m, True, False)
    assert all(c.kernel != "gluon" for cs in bt.BUCKET_CONFIGS.values() for c in cs)
    # enabled, the Gluon candidates follow the bucket's own, for TMA-able operands
    large = bt._candidates(4096, True, True)
    assert large[: len(bt._candidates(4096, True))] == bt._candidates(4096, True)
    assert [c for c in large if c.kernel == "gluon"] == list(bt.GLUON_CONFIGS["large"])
    assert all(c.kernel != "gluon" for c in bt._candidates(4096, False, True))
    assert all(c.kernel != "gluon" for c in bt._candidates(8, True, True))  # decode: none


def test_gluon_labels():
    assert bt.Config("gluon", 128, 256, 128, 8, 1, 8, 3).label() == "gluon 128x256x128 g8 w8 s3"
    assert (
        bt.Config("gluon", 128, 256, 128, 8, 1, 8, 3, persistent=True).label()
        == "gluon 128x256x128 g8 w8 s3 persistent"
    )
    assert bt.Config("tma", 128, 256, 128, 8, 1, 8, 3).label() == "tma 128x256x128 g8 sk1 w8 s3"


@needs_gluon
def test_gluon_launch_keywords_match_the_kernel():
    """The host's launch of a gluon configuration binds every constexpr of
    ``w8a8_mm_gluon`` (STAGES from num_stages, which is not passed on) and the
    runtime integers in order: what ``_issue`` / ``_launch_raw`` hand the kernel."""
    import torch

    cfg = bt.Config("gluon", 128, 256, 128, 8, 1, 8, 3)
    a = torch.zeros((300, 256), dtype=torch.int8)
    b = torch.zeros((520, 256), dtype=torch.int8)
    bias = torch.zeros(520, dtype=torch.bfloat16)
    grid, ints, kw, words = bt._layout(cfg, False, a, b, 1, 1, bias, torch.bfloat16, 300, 520, 256, False)
    assert grid == (3 * 3,) and words == 0
    assert ints == (300, 520, 256, 1, 1, 1, 520, 9)  # M N K strides(sa sb bias om) NUM_PROGS
    assert kw["STAGES"] == 3 and "num_stages" not in kw and kw["enable_fp_fusion"] is False
    kern = bt._kernel("gluon", True)[0]
    assert bt._constexpr_tail(kern, kw) == (True, 0, False, 128, 256, 128, 8, 3)
    runtime = [p.name for p in kern.params if not p.is_constexpr]
    assert runtime[:6] == ["a_desc", "b_desc", "sa_ptr", "sb_ptr", "bias_ptr", "out_ptr"]
    assert len(runtime) == 6 + len(ints)


def test_gluon_config_refused_off_sm90():
    import torch

    from reference.errors import OperandError

    a = torch.zeros((64, 32), dtype=torch.int8)
    b = torch.zeros((32, 32), dtype=torch.int8)
    s = torch.ones(())
    with pytest.raises((ValueError, OperandError), match="sm_90|gluon"):
        bt.scaled_mm_config(bt.Config("gluon", 64, 32, 32, 8, 1, 4, 3), a, b, s, s)


# ------------------------------------------------- warp-specialised ping-pong variant
#: (BLOCK_M, BLOCK_N, BLOCK_K, stages, out_kind, has_bias, acc_only): the largest ring
#: with the epilogue that needs the most registers (bf16 + bias), and the BLOCK_K 64 ring
#: with the accumulator-only store
WS_CASES = [(128, 128, 128, 6, 0, True, False), (128, 128, 64, 10, 0, False, True)]


def _ops(ptx):
    """(kind, position) of the PTX's synchronisation-relevant instructions, in order."""
    pat = (
        r"(mbarrier\.try_wait|mbarrier\.arrive\.expect_tx|mbarrier\.arrive\.shared"
        r"|wgmma\.mma_async|wgmma\.wait_group\.sync\.aligned \d|cp\.async\.bulk\.tensor"
        r"|setmaxnreg\.\w+\.sync\.aligned\.u32\s+\d+)"
    )
    return [(m.group(1), m.start()) for m in re.finditer(pat, ptx)]


@needs_gluon
@pytest.mark.parametrize("case", WS_CASES, ids=lambda c: "{}x{}x{}s{}-out{}-bias{}-acc{}".format(*c))
def test_sm90_ws_ptx_ping_pong(case, tmp_path):
    bm, bn, bk, stages, out_kind, has_bias, acc_only = case
    k = _compile(bm, bn, bk, 4, stages, ws=True, out_kind=out_kind, has_bias=has_bias, acc_only=acc_only)
    ptx = k.asm["ptx"]
    assert len(re.findall(r"^\.visible \.entry ", ptx, re.MULTILINE)) == 1
    assert k.metadata.num_warps == 12  # 4 (consumer 0) + 4 (consumer 1) + 1 producer, padded
    assert k.metadata.shared <= 227 * 1024
    assert k.metadata.shared >= stages * (bm + bn) * bk
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.s32\.s8\.s8", ptx)
    # register reallocation: consumers up to 240 registers a thread, the producer 24
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+240;", ptx)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    ops = _ops(ptx)
    kinds = [o for o, _ in ops]
    waits = [o[-1] for o in kinds if o.startswith("wgmma.wait_group")]
    assert waits.count("1") == 2, waits  # one K loop per consumer partition keeps a group in flight
    assert waits.count("0") == 2, waits  # ... and each drains it once per tile
    for i, o in enumerate(kinds):
        if o == "wgmma.wait_group.sync.aligned 1":
            # the slot is released after the wait retired the previous step's wgmma,
            # before anything else touches a barrier or issues a wgmma
            nxt = next(x for x in kinds[i + 1 :] if not x.startswith("setmaxnreg"))
            assert nxt == "mbarrier.arrive.shared", kinds[i : i + 4]
        if o == "wgmma.mma_async":
            # every wgmma follows a ready wait since the previous wait_group / arrive
            prev = [x for x in kinds[:i] if x != "wgmma.mma_async"]
            assert prev[-1] == "mbarrier.try_wait", prev[-3:]
    # TMA loads: only the producer's two (a and b), after its empty-slot wait and expect,
    # with no wgmma in that partition
    tma = [i for i, o in enumerate(kinds) if o == "cp.async.bulk.tensor"]
    assert len(tma) == 2 and tma[1] == tma[0] + 1
    assert kinds[tma[0] - 2 : tma[0]] == ["mbarrier.try_wait", "mbarrier.arrive.expect_tx"]
    assert kinds.count("mbarrier.arrive.expect_tx") == 1
    # per consumer: order wait + ready wait; arrivals: slot in the loop, order, last slot
    assert kinds.count("mbarrier.try_wait") == 5
    assert kinds.count("mbarrier.arrive.shared") == 6
    if not acc_only:
        assert "32767" in ptx  # the shared epilogue's bf16 RNE constant
    assert not re.search(r"\bfma\.", ptx)
    _assert_no_local_memory(ptx, tmp_path)


def test_gluon_ws_configs_and_labels():
    """The ws configurations: gluon kernel, ping-pong flag, persistent, 4 warps (the
    default partition), a ring within 227 KiB; labels unique among every table the
    bench resolves (``config_by_label``)."""
    ws = bt.GLUON_WS_CONFIGS["large"]
    assert ws and set(bt.GLUON_WS_CONFIGS) == {"large"}
    for c in ws:
        assert c.kernel == "gluon" and c.warp_spec and c.persistent and c.num_warps == 4
        assert c.split_k == 1 and c.num_stages >= 2
        assert c.num_stages * (c.block_m + c.block_n) * c.block_k <= 227 * 1024 - 1024
        assert c.label().endswith(" persistent ws") and bt._kernel_name(c) == "gluon_ws"
    assert (
        bt.Config("gluon", 128, 128, 128, 8, 1, 4, 6, persistent=True, warp_spec=True).label()
        == "gluon 128x128x128 g8 w4 s6 persistent ws"
    )
    assert bt._kernel_name(bt.Config("gluon", 128, 256, 128, 8, 1, 8, 4)) == "gluon"
    assert bt._kernel_name(bt.Config("tma", 128, 256, 128, 8, 1, 8, 4, warp_spec=True)) == "tma"
    labels = [
        c.label() for t in (bt.BUCKET_CONFIGS, bt.GLUON_CONFIGS, bt.GLUON_WS_CONFIGS) for cs in t.values() for c in cs
    ]
    assert len(set(labels)) == len(
        set(c for t in (bt.BUCKET_CONFIGS, bt.GLUON_CONFIGS, bt.GLUON_WS_CONFIGS) for cs in t.values() for c in cs)
    )
    assert not set(c.label() for c in ws) & set(
        c.label() for t in (bt.BUCKET_CONFIGS, bt.GLUON_CONFIGS) for cs in t.values() for c in cs
    )


def test_gluon_ws_joins_with_gluon_unless_opted_out(monkeypatch):
    import torch

    monkeypatch.delenv("INT8CONF_TRITON_GLUON", raising=False)
    monkeypatch.delenv("INT8CONF_TRITON_GLUON_WS", raising=False)
    monkeypatch.setattr(bt, "_capability", lambda dev: (9, 0))
    monkeypatch.setattr(gluon_gemm, "AVAILABLE", True)
    h200 = torch.device("cuda", 0)
    assert bt._gluon_enabled(h200) and bt._gluon_ws_enabled(h200)  # on by default
    monkeypatch.setenv("INT8CONF_TRITON_GLUON_WS", "0")
    assert bt._gluon_enabled(h200) and not bt._gluon_ws_enabled(h200)  # its own opt-out
    for off in ("false", " OFF ", "no"):  # the spellings INT8CONF_TRITON_AUTOTUNE takes
        monkeypatch.setenv("INT8CONF_TRITON_GLUON_WS", off)
        assert not bt._gluon_ws_enabled(h200)
        monkeypatch.setenv("INT8CONF_TRITON_GLUON", off)
        assert not bt._gluon_enabled(h200)
        monkeypatch.delenv("INT8CONF_TRITON_GLUON")
    monkeypatch.setenv("INT8CONF_TRITON_GLUON_WS", "1")
    assert bt._gluon_ws_enabled(h200)
    monkeypatch.setenv("INT8CONF_TRITON_GLUON", "0")
    assert not bt._gluon_ws_enabled(h200)  # the Gluon opt-out covers it too
    monkeypatch.delenv("INT8CONF_TRITON_GLUON")
    monkeypatch.setattr(bt, "_capability", lambda dev: (10, 0))
    assert not bt._gluon_ws_enabled(h200)  # sm_90 code only
    monkeypatch.setattr(bt, "_capability", lambda dev: (9, 0))
    monkeypatch.setattr(gluon_gemm, "AVAILABLE", False)
    assert not bt._gluon_ws_enabled(h200)
    assert not bt._gluon_ws_enabled(torch.device("cpu"))
    # candidates: after the bucket's own and the Gluon ones, large bucket, TMA-able only
    large = bt._candidates(4096, True, True, True)
    assert large[: len(bt._candidates(4096, True, True))] == bt._candidates(4096, True, True)
    assert [c for c in large if c.warp_spec and c.kernel == "gluon"] == list(bt.GLUON_WS_CONFIGS["large"])
    assert bt._candidates(4096, True, True) == bt._candidates(4096, True, True, False)
    assert bt._candidates(4096, True, False, True) == bt._candidates(4096, True)  # needs gluon
    assert not any(c.kernel == "gluon" for c in bt._candidates(4096, False, True, True))
    small = bt._candidates(128, True, True, True)
    assert not any(c.warp_spec and c.kernel == "gluon" for c in small)


@needs_gluon
def test_gluon_ws_launch_keywords_match_the_kernel(monkeypatch):
    """A ws configuration launches through the same host path as the other Gluon kernel:
    same runtime arguments and constexprs (so ``_issue`` / ``_launch_raw`` / the TMA
    descriptors need nothing new), num_warps 4, one program per SM at most."""
    import torch

    monkeypatch.setattr(bt, "_num_sms", lambda dev: 132)
    cfg = bt.GLUON_WS_CONFIGS["large"][0]
    a = torch.zeros((3000, 1168), dtype=torch.int8)
    b = torch.zeros((2000, 1168), dtype=torch.int8)
    grid, ints, kw, words = bt._layout(cfg, False, a, b, 1, 1, None, torch.float16, 3000, 2000, 1168, False)
    tiles = -(-3000 // cfg.block_m) * -(-2000 // cfg.block_n)
    assert grid == (min(tiles, 132),) and words == 0 and ints[-1] == grid[0]
    assert kw["num_warps"] == 4 and kw["STAGES"] == cfg.num_stages and "num_stages" not in kw
    assert kw["enable_fp_fusion"] is False
    ws = bt._kernel("gluon_ws", True)[0]
    plain = bt._kernel("gluon", True)[0]
    assert ws is gluon_gemm.w8a8_mm_gluon_ws and plain is gluon_gemm.w8a8_mm_gluon
    assert [p.name for p in ws.params] == [p.name for p in plain.params]
    assert [p.is_constexpr for p in ws.params] == [p.is_constexpr for p in plain.params]
    assert bt._constexpr_tail(ws, kw) == (False, 1, False, 128, 128, 128, 8, cfg.num_stages)
