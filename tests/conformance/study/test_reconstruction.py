"""conformance.study.reconstruction: both quantization rules, checked against
compressed-tensors itself and against checkpoints built under each rule."""

import pytest
import torch

from conformance.study import reconstruction as gate
from reference.model.checkpoint import load_qwen3_state, write_random_qwen3
from reference.model.compressed_tensors import build_w8a8_checkpoint
from reference.model.pow2 import ReconstructionGateError
from reference.quantize import quantize_weight_per_channel


def _bf16(bits: int) -> torch.Tensor:
    return torch.tensor([bits], dtype=torch.int16).view(torch.bfloat16)


def test_the_issue_example_rounds_differently_under_the_two_rules():
    # w = 0x3CC7, scale = 0x3A25: bf16 quotient 38.5 -> 38 (half to even),
    # float32 quotient 38.59 -> 39. The row's absmax is chosen so that
    # absmax / 127.5 rounds to exactly 0x3A25 (found by scanning bf16 values).
    w = _bf16(0x3CC7)
    target = _bf16(0x3A25)
    absmax = next(
        _bf16(b)
        for b in range(0x3D80, 0x3DC0)
        if torch.equal((_bf16(b) / 127.5).view(torch.int16), target.view(torch.int16))
    )
    row = torch.cat([w, absmax]).reshape(1, 2)
    q_cpu, s = quantize_weight_per_channel(row)
    q_f32, s2 = quantize_weight_per_channel(row, division="float32")
    assert int(s.view(torch.int16)) == 0x3A25 and torch.equal(s, s2)
    assert float((w / target)[0]) == 38.5
    assert int(q_cpu[0, 0]) == 38 and int(q_f32[0, 0]) == 39
    from reference.errors import OperandError

    with pytest.raises(OperandError, match="division"):
        quantize_weight_per_channel(row, division="float64")


def test_the_cpu_rule_is_the_library_itself_on_the_cpu():
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    g = torch.Generator().manual_seed(0)
    w = (torch.randn(64, 256, generator=g) * 0.03).to(torch.bfloat16)
    w[5] = 0  # an all-zero row takes the library's eps scale
    args = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    s, zp = calculate_qparams(torch.amin(w, dim=1, keepdim=True), torch.amax(w, dim=1, keepdim=True), args)
    q = quantize(w, s, zp, args, dtype=torch.int8)
    rq, rs = gate.rule_quantizer("cpu")(w)
    assert torch.equal(q, rq), ct.__version__
    assert torch.equal(s.view(torch.int16), rs.view(torch.int16))
    fq, _ = gate.rule_quantizer("cuda-triton")(w)
    n = int((fq != q).sum())
    assert 0 < n < q.numel() // 5 and int((fq.int() - q.int()).abs().max()) == 1


def test_library_check_reports_every_layer_identical(tiny):
    pytest.importorskip("compressed_tensors")
    cfg, state = load_qwen3_state(tiny[0])
    rec = gate.library_check(cfg, state)
    assert rec["installed"] and rec["layers"] == 7
    assert rec["identical_q"] == 7 and rec["identical_scale"] == 7 and rec["first_difference"] is None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    parent = write_random_qwen3(
        d / "parent", seed=3, num_hidden_layers=1, hidden_size=128, intermediate_size=256, vocab_size=128
    )
    cpu = build_w8a8_checkpoint(parent, d / "cpu")
    f32 = build_w8a8_checkpoint(parent, d / "f32", quantizer=gate.rule_quantizer("cuda-triton"))
    return parent, cpu.dir, f32.dir


def test_gate_names_the_rule_that_reproduces_each_checkpoint(tiny):
    parent, cpu_dir, f32_dir = tiny
    assert gate.which_rule(parent, cpu_dir)["reproduced_by"] == ["cpu"]
    r = gate.which_rule(parent, f32_dir)
    assert r["reproduced_by"] == ["cuda-triton"] and r["rule"] == "cuda-triton"
    assert r["results"]["cpu"]["passed"] is False and r["results"]["cpu"]["tensor"].endswith(".weight")


def test_gate_fails_naming_tensor_and_element_when_neither_rule_reproduces(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    parent, cpu_dir, _ = tiny
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(cpu_dir, bad)
    t = load_file(str(bad / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    t[name][3, 7] = (int(t[name][3, 7]) + 5) % 100
    save_file(t, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ReconstructionGateError) as e:
        gate.which_rule(parent, bad)
    msg = str(e.value)
    assert "neither" in msg and "cpu" in msg and "cuda-triton" in msg
    assert "model.layers.0.mlp.up_proj.weight" in msg and "[3, 7]" in msg and "\n" not in msg


def test_pow2_arms_do_not_depend_on_the_rule_and_rules_differ_on_a_few_percent(tiny):
    parent, _, _ = tiny
    cfg, state = load_qwen3_state(parent)
    pi = gate.pow2_rule_independence(cfg, state)
    assert pi == {r: {"layers": 7, "differing_cpu": 0, "differing_cuda_triton": 0} for r in ("nearest", "ceiling")}
    rd = gate.rule_disagreement(cfg, state)
    assert 0.01 < rd["fraction"] < 0.2 and rd["max_abs_diff"] == 1
    f = rd["first"]
    assert f["cpu"] != f["cuda_triton"]
