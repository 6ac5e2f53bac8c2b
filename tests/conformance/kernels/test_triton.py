"""What Triton's interpreter really does to each epilogue step, and proof that
the built-in ``triton`` kernel is still correct (explicit RNE) and says which
mode it ran in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import triton

from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from conformance.kernels.triton_probe import probe
from reference.epilogue import reference_scaled_mm
from reference.operands import GemmOperands

TRITON_39 = triton.__version__.startswith("3.9")


def test_interpreter_semantics_measured():
    p = probe(native=False)
    assert p["mode"] == "interpreter" and "error" not in p
    # numpy-backed steps are IEEE: int32 -> fp32 RNE (2**24+1 -> 2**24, 2**24+3 -> 2**24+4),
    # fp32 multiply correctly rounded incl. subnormal products, fp32 -> fp16 RNE.
    assert p["int32_to_fp32"] == "rne"
    assert p["fp32_mul"] == "ieee"
    assert p["fp32_to_fp16"] == "rne"
    if TRITON_39:
        # Triton 3.9 interpreter: fp32 -> bf16 truncates toward zero, even when
        # fp_downcast_rounding="rtne" is requested; subnormal casts are wrong both
        # ways; bf16 + bf16 adds the raw uint16 bit patterns as integers.
        assert p["fp32_to_bf16"] == "rtz"
        assert p["fp32_to_bf16_rtne"] == "rtz"
        assert p["fp32_to_bf16_subnormal"] == "other (16/16 differ from rne)"
        assert p["bf16_to_fp32"] == "other (4/16 differ from exact)"
        assert p["bf16_add"] == "other (14/16 differ from rne)"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_interpreter_bf16_cast_pinned_bits():
    # one element, computed by hand: 1 + 3*2**-8 is a tie between bf16 0x3F81 and
    # 0x3F82; RNE gives 0x3F82, truncation 0x3F81 (what the 3.9 interpreter does).
    from triton.runtime.interpreter import InterpretedFunction

    from conformance.kernels import triton_probe

    d = triton_probe._inputs()
    outs = triton_probe._run(InterpretedFunction(triton_probe._probe_kernel), d, d["x"], "cpu")
    got = int(outs["bf"][1].view(torch.int16)) & 0xFFFF
    assert got == (0x3F81 if TRITON_39 else got)
    assert int(d["x"][1:2].to(torch.bfloat16).view(torch.int16)) & 0xFFFF == 0x3F82


def test_triton_kernel_is_rne_despite_interpreter_cast():
    a = torch.ones((1, 1), dtype=torch.int8)
    b = torch.ones((2, 1), dtype=torch.int8)
    sw = torch.tensor([1 + 3 * 2**-8, 2.0**-130], dtype=torch.float32)
    run = run_kernel(get_kernel("triton"), GemmOperands(a, b, torch.ones(1), sw), device="cpu")
    assert run.error is None
    assert (run.output.view(torch.int16).to(torch.int64) & 0xFFFF).tolist() == [[0x3F82, 0x0008]]
    m = run.manifest
    assert m["path"] == "triton-interpreter" and m["interpreter"] is True
    assert m["extra"]["final_rounding"] == "explicit-rne-bitops"
    assert m["extra"]["interpreter_semantics"]["fp32_to_bf16"] == probe()["fp32_to_bf16"]


def test_bias_bits_subnormal_and_after_round():
    # TRITON_STYLE: rnd(rnd(y) + bias). y = 1 + 2**-8 + 2**-9 rounds to 1 + 2**-7
    # (0x3F81); + bias 2**-8 = 1 + 2**-7 + 2**-8 is a tie -> even 1 + 2**-6 (0x3F82).
    # Bias-before-round would give rnd(1 + 2**-8 + 2**-9 + 2**-8) = 0x3F82 too, so also
    # check a subnormal bias passes through exactly: y = 2**-133 (0x0001) + bias 2**-130.
    a = torch.ones((1, 1), dtype=torch.int8)
    b = torch.ones((2, 1), dtype=torch.int8)
    sw = torch.tensor([1 + 2**-8 + 2**-9, 2.0**-133], dtype=torch.float32)
    bias = torch.tensor([2**-8, 2.0**-130], dtype=torch.float32).to(torch.bfloat16)
    run = run_kernel(get_kernel("triton"), GemmOperands(a, b, torch.ones(1), sw, bias), device="cpu")
    assert (run.output.view(torch.int16).to(torch.int64) & 0xFFFF).tolist() == [[0x3F82, 0x0009]]


def test_env_var_set_before_import_gives_same_bits():
    # A user exporting TRITON_INTERPRET=1 (read by @triton.jit at decoration time)
    # must get the same kernel, path and bits.
    code = (
        "import torch, json\n"
        "from conformance.kernels.registry import get_kernel\n"
        "from conformance.kernels.runner import run_kernel\n"
        "from reference.operands import GemmOperands\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a = torch.randint(-128, 128, (9, 40), dtype=torch.int8, generator=g)\n"
        "b = torch.randint(-128, 128, (11, 40), dtype=torch.int8, generator=g)\n"
        "r = run_kernel(get_kernel('triton'), GemmOperands(a, b, torch.rand(9, generator=g) + .1,"
        " torch.rand(11, generator=g) + .1))\n"
        "print(json.dumps([r.error, r.manifest['path'],"
        " r.output.view(torch.int16).flatten().tolist()]))\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
    err, path, bits = json.loads(res.stdout.strip().splitlines()[-1])
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (9, 40), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (11, 40), dtype=torch.int8, generator=g)
    sa, sb = torch.rand(9, generator=g) + 0.1, torch.rand(11, generator=g) + 0.1
    ref = reference_scaled_mm(a, b, sa, sb, get_kernel("triton").contract)
    assert err is None and path == "triton-interpreter"
    assert bits == ref.view(torch.int16).flatten().tolist()
