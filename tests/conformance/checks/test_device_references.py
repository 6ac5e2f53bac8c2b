"""The checks' references computed on the operands' device (the sweep puts
operands on the kernel's GPU) give the CPU's bits and verdicts: IEEE float32
element-wise operations and integer bit arithmetic are the same everywhere.
The ``cpu`` parameter runs the same device-generic code path on the CPU."""

import pytest
import torch

from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
from reference.epilogue import apply_epilogue
from reference.operands import GemmOperands

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
    ),
]


def _hard_case(seed=0, m=24, k=96, n=40):
    """Accumulators, scales and biases that reach ties, subnormal and
    overflowing outputs and cancelling biases (every rounding path)."""
    g = torch.Generator().manual_seed(seed)
    acc = torch.randint(-(2**20), 2**20, (m, n), generator=g, dtype=torch.int64)
    acc[0, :8] = torch.tensor([0, 1, -1, 2**24 + 1, -(2**24 + 3), 2**31 - 1, -(2**31), 3])
    sa = torch.rand(m, generator=g, dtype=torch.float64).mul(2e-3).to(torch.float32)
    sw = torch.rand(n, generator=g, dtype=torch.float64).mul(2e-3).to(torch.float32)
    sa[1], sa[2], sa[3] = 2.0**-140, 0.0, 3.0e38  # subnormal, zero, overflowing products
    sw[1] = 2.0**-126
    bias = (torch.rand(n, generator=g) - 0.5).mul(8).to(torch.bfloat16)
    return acc, sa, sw, bias


@pytest.mark.parametrize("device", DEVICES)
def test_epilogue_emulation_on_the_device_gives_the_cpu_bits_for_every_contract(device):
    acc, sa, sw, bias = _hard_case()
    for order in SCALE_ORDERS:
        for point in BIAS_POINTS:
            c = EpilogueContract(order, point)
            for b in (None, bias):
                for dt in (torch.bfloat16, torch.float16, torch.float32):
                    bb = None if b is None else b.to(dt)
                    want = apply_epilogue(acc, sa, sw, c, bias=bb, out_dtype=dt)
                    got = apply_epilogue(
                        acc.to(device),
                        sa.to(device),
                        sw.to(device),
                        c,
                        bias=None if bb is None else bb.to(device),
                        out_dtype=dt,
                    )
                    assert got.device.type == device
                    iv = torch.int32 if dt == torch.float32 else torch.int16
                    nan = torch.isnan(want)
                    assert torch.equal(torch.isnan(got.cpu()), nan), (c.label(), dt)
                    assert torch.equal(got.cpu().view(iv)[~nan], want.view(iv)[~nan]), (c.label(), dt)


def _ops(seed=3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (16, 80), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (24, 80), generator=g, dtype=torch.int16).to(torch.int8)
    sa = torch.rand(16, generator=g).mul(1e-2)
    sb = torch.exp2(torch.randint(-12, -4, (24,), generator=g).to(torch.float32))
    return GemmOperands(a=a, b=b, scale_a=sa, scale_b=sb, scale_mode="pow2", name="t")


@pytest.mark.parametrize("device", DEVICES)
def test_every_per_case_check_gives_the_cpu_verdict_and_evidence_with_operands_on_the_device(device):
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from faults import inject

    kernel = get_kernel("cpu")
    verdicts = {}
    for fault in ("F1", "F3", "F4", "F8", "F9"):
        spec = inject(kernel, fault, "1%", 0)
        ops = _ops()
        cpu = evaluate_case(spec, ops, device="cpu", coverage=False)
        dev = evaluate_case(spec, ops.to(device), device="cpu", coverage=False)
        for cid, r in cpu.checks.items():
            d = dev.checks[cid]
            assert (d.verdict, d.summary, d.evidence) == (r.verdict, r.summary, r.evidence), (fault, cid)
        verdicts[fault] = (cpu.checks["C5"].verdict, cpu.checks["C8"].verdict)
    # not vacuous: truncation (F4) moves bits that C5 and C8 see; the null fault moves none
    assert verdicts["F4"] == ("fail", "fail") and verdicts["F8"] == ("pass", "pass")
