"""``int8conf sweep --model DIR`` and the study's layer capture build their captures on the
kernel's CUDA device (``cached_capture(device=...)``), the CPU for a CPU kernel."""

from __future__ import annotations

import argparse

import pytest
import torch

from conformance.commands import sweep as sweep_cmd
from conformance.kernels.registry import get_kernel
from conformance.study import layer_agreement
from conformance.study.arms import StudyContext
from reference.model import capture as capture_mod
from reference.model.assets import default_model_dir

CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


class _Stop(Exception):
    pass


def _sweep_capture_device(monkeypatch, kernel: str, device) -> str:
    seen = {}

    def fake(mdir, progress=None, device="cpu", **kw):
        seen["device"] = device
        raise _Stop

    monkeypatch.setattr(capture_mod, "cached_capture", fake)
    args = argparse.Namespace(captures=None, model=str(default_model_dir()), quiet=True, device=device)
    with pytest.raises(_Stop):
        sweep_cmd._resolve_captures(args, get_kernel(kernel))
    return seen["device"]


def _study_capture_device(monkeypatch, kernels: tuple, device) -> str:
    seen = {}

    def fake(*args, device="cpu", **kw):
        seen["device"] = device
        raise _Stop

    monkeypatch.setattr(layer_agreement, "ensure_capture", fake)
    ctx = StudyContext(default_model_dir(), tuple(get_kernel(k) for k in kernels), device)
    with pytest.raises(_Stop):
        layer_agreement.run_layer_agreement(ctx, 64)
    return seen["device"]


@pytest.mark.parametrize("kernel, device", [("cpu", None), ("int_mm", "cpu")])
def test_a_cpu_kernel_captures_on_the_cpu(monkeypatch, kernel, device):
    assert _sweep_capture_device(monkeypatch, kernel, device) == "cpu"
    assert _study_capture_device(monkeypatch, (kernel, "cpu"), device) == "cpu"


@pytest.mark.parametrize("device, want", [(None, "cuda"), ("cuda:0", "cuda:0")])
@pytest.mark.parametrize("x", [pytest.param(0, marks=CUDA, id="cuda")])
def test_a_cuda_kernel_captures_on_its_device(monkeypatch, device, want, x):
    assert _sweep_capture_device(monkeypatch, "int_mm", device) == want
    assert _study_capture_device(monkeypatch, ("cpu", "int_mm"), device) == want
