"""The Gluon int8 GEMM (``conformance.kernels.gluon_gemm``), verified offline: compiled
for sm_90 on a machine without a GPU, its PTX must show what it was written for --
int8 wgmma whose int32 accumulator stays in flight across K steps (``wait_group 1``,
which Triton's own pipeliner never emits for an int32 accumulator; reports/bench/
nvidia-h200/probe-2026-12-01f/NOTE.md) -- one entry function, no local-memory spills,
and the shared epilogue's bf16 rounding. Its bits on a GPU are checked by the probe
(probe_8192.py) and by the tuner's candidates once the opt-in is set.

Also: the Gluon candidates join the tuning only on sm_90 (on by default there since
2026-12-01g, when they ran exact natively; ``INT8CONF_TRITON_GLUON=0`` leaves them out).
"""

import os
import re
import subprocess

import pytest

from conformance.kernels import builtin_triton as bt
from conformance.kernels import gluon_gemm

needs_gluon = pytest.mark.skipif(not gluon_gemm.AVAILABLE,
                                 reason="this Triton has no Gluon Hopper API "
                                        "(triton.experimental.gluon ... nvidia.hopper)")

#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the configurations the probe times
CONFIGS = [(128, 256, 128, 8, 3), (128, 128, 128, 4, 3), (256, 128, 128, 8, 3)]


def _compile(bm, bn, bk, warps, stages, **kw):
    import triton
    from triton.backends.compiler import GPUTarget

    src = gluon_gemm.sm90_source(bm, bn, bk, stages, **kw)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "enable_fp_fusion": False})


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
        rest = ptx[w.end():]
        nxt = rest.find("cp.async.bulk.tensor")
        assert nxt < 0 or "bar.sync" in rest[:nxt]
    assert len(re.findall(r"^\.visible \.entry ", ptx, re.MULTILINE)) == 1
    assert "32767" in ptx  # the epilogue's bf16 RNE rounding constant 0x7FFF
    assert not re.search(r"\bfma\.", ptx)  # no contraction into FMA
    ptxas = _ptxas()
    if ptxas is None:
        return  # only the spill check needs ptxas
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    res = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(src), "-o", os.devnull],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0 and "Unsupported .version" in res.stderr:
        return  # a bundled ptxas older than the PTX this Triton emits
    assert res.returncode == 0, res.stderr[-2000:]
    # no local memory at all: no stack frame, no spills
    assert re.search(r"(?<!\d)0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
                     res.stderr), res.stderr


@needs_gluon
def test_sm90_fp32_bias_epilogue_is_not_contracted():
    """fp32 out with bias is ``(acc * s_a) * s_w + bias``: with ``enable_fp_fusion=False``
    the last multiply and the add stay two roundings, as in ``triton_gemm._epilogue``."""
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
    assert bt._gluon_enabled(h200)                      # the default on sm_90
    monkeypatch.setenv("INT8CONF_TRITON_GLUON", "0")
    assert not bt._gluon_enabled(h200)                  # the opt-out
    monkeypatch.setenv("INT8CONF_TRITON_GLUON", "1")
    assert bt._gluon_enabled(h200)
    monkeypatch.setattr(bt, "_capability", lambda dev: (10, 0))
    assert not bt._gluon_enabled(torch.device("cuda", 0))  # sm_100: not wgmma code
    monkeypatch.setattr(bt, "_capability", lambda dev: (9, 0))
    monkeypatch.setattr(gluon_gemm, "AVAILABLE", False)
    assert not bt._gluon_enabled(h200)                  # no Gluon Hopper API in this Triton
    for m in (8, 128, 4096):
        cands = bt._candidates(m, True)
        assert all(c.kernel != "gluon" for c in cands)
        assert cands == bt._candidates(m, True, False)
    assert all(c.kernel != "gluon" for cs in bt.BUCKET_CONFIGS.values() for c in cs)
    # enabled, the Gluon candidates follow the bucket's own, for TMA-able operands
    large = bt._candidates(4096, True, True)
    assert large[:len(bt._candidates(4096, True))] == bt._candidates(4096, True)
    assert [c for c in large if c.kernel == "gluon"] == list(bt.GLUON_CONFIGS["large"])
    assert all(c.kernel != "gluon" for c in bt._candidates(4096, False, True))
    assert all(c.kernel != "gluon" for c in bt._candidates(8, True, True))  # decode: none


def test_gluon_labels():
    assert bt.Config("gluon", 128, 256, 128, 8, 1, 8, 3).label() == "gluon 128x256x128 g8 w8 s3"
    assert (bt.Config("gluon", 128, 256, 128, 8, 1, 8, 3, persistent=True).label()
            == "gluon 128x256x128 g8 w8 s3 persistent")
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
    grid, ints, kw, words = bt._layout(cfg, False, a, b, 1, 1, bias, torch.bfloat16,
                                       300, 520, 256, False)
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
