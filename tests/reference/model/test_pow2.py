"""Power-of-two requantization and the reconstruction gate."""

import re
import shutil

import pytest
import torch

from reference.errors import CheckpointError
from reference.model.checkpoint import load_qwen3_state, save_safetensors_atomic, write_random_qwen3
from reference.model.compressed_tensors import build_w8a8_checkpoint
from reference.model.pow2 import (
    ReconstructionGateError,
    build_pow2_checkpoint,
    reconstruction_gate,
    requantize_pow2,
    rewrite_scales_pow2_without_requant,
)
from reference.quantize import quantize_weight_per_channel

# Hand-made rows (bf16-exact values), K = 4.
ROWS = torch.tensor(
    [
        [1.0, -0.5, 0.25, 0.0],  # own scale bf16(1/127.5) = 2^-7 (1 + 2^-7)
        [0.98828125, 0.0, 0.0, 0.0],  # 253/256: 126.5 * 2^-7
        [0.0, 0.0, 0.0, 0.0],  # all-zero row: own scale floored to bf16 eps 2^-7
        [1.5, 0.0, -0.75, 0.0],  # own scale bf16(1.5/127.5) = 0.011779785...
    ],
    dtype=torch.bfloat16,
)


def test_nearest_known_values():
    q, s = requantize_pow2(ROWS, "nearest")
    assert s.dtype == torch.bfloat16 and s.shape == (4, 1)
    assert s.reshape(-1).tolist() == [2.0**-7, 2.0**-7, 2.0**-7, 2.0**-6]
    assert q.tolist() == [
        [127, -64, 32, 0],  # 1.0 / 2^-7 = 128 clips to 127
        [126, 0, 0, 0],  # 126.5 -> 126 (round half to even)
        [0, 0, 0, 0],
        [96, 0, -48, 0],
    ]


def test_ceiling_known_values_never_clip():
    q, s = requantize_pow2(ROWS, "ceiling")
    # smallest 2^k with 127 * 2^k >= absmax: 1.0 -> 2^-6 (127 * 2^-7 = 0.992 < 1)
    assert s.reshape(-1).tolist() == [2.0**-6, 2.0**-7, 2.0**-7, 2.0**-6]
    assert q.tolist() == [[64, -32, 16, 0], [126, 0, 0, 0], [0, 0, 0, 0], [96, 0, -48, 0]]


def test_rules_on_random_weights():
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(64, 96, generator=g) * torch.logspace(-4, 1, 64)[:, None]).to(torch.bfloat16)
    _, s_own = quantize_weight_per_channel(w)
    for rule in ("nearest", "ceiling"):
        q, s = requantize_pow2(w, rule)
        m, _ = torch.frexp(s.to(torch.float64))
        assert torch.all(m == 0.5)  # exact powers of two
        exact = w.to(torch.float64) / s.to(torch.float64)
        if rule == "ceiling":
            assert exact.abs().max() <= 127  # never clips
            assert torch.equal(q.to(torch.float64), torch.round(exact))
            # and it is the smallest such power: half of it would clip
            assert torch.all(w.abs().amax(1).double() > 127 * s.reshape(-1).double() / 2)
        else:
            ratio = torch.log2(s.to(torch.float64) / s_own.to(torch.float64))
            assert ratio.abs().max() <= 0.5
            assert torch.equal(q.to(torch.float64), torch.round(exact).clamp(-128, 127))


def test_rewrite_without_requant_is_the_wrong_model():
    q_own, s_own = quantize_weight_per_channel(ROWS)
    q_rw, s_rw = rewrite_scales_pow2_without_requant(q_own, s_own, "nearest")
    assert q_rw is q_own  # weights untouched: that is the fault
    assert s_rw.dtype == s_own.dtype and s_rw.shape == s_own.shape
    assert s_rw[3, 0].item() == 2.0**-6
    # 1.5 stored as 127 * 0.01178; the rewritten pair dequantizes to 127 * 2^-6
    assert q_own[3, 0].item() == 127
    assert (q_rw[3, 0].float() * s_rw[3, 0].float()).item() == 1.984375
    q_rq, s_rq = requantize_pow2(ROWS, "nearest")
    assert (q_rq[3, 0].float() * s_rq[3, 0].float()).item() == 1.5
    _, s_ceil = rewrite_scales_pow2_without_requant(q_own, s_own.reshape(-1).float(), "ceiling")
    assert s_ceil.dtype == torch.float32 and s_ceil.tolist()[:2] == [2.0**-6, 2.0**-7]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pow2")
    parent = write_random_qwen3(root / "parent", seed=7)
    committed = build_w8a8_checkpoint(parent, root / "own")
    return parent, committed


def test_gate_passes_and_pow2_checkpoints_build(models, tmp_path):
    parent, committed = models
    rep = reconstruction_gate(parent, committed.dir)
    assert rep["passed"] and rep["tensors"] == 2 * (7 * 2 + 4) + 2
    assert rep["state_digest"] == committed.digest
    for rule in ("nearest", "ceiling"):
        ck = build_pow2_checkpoint(parent, committed.dir, tmp_path / rule, rule=rule)
        assert ck.meta["scale_rule"] == f"pow2-{rule}" and ck.meta["reconstruction_gate"] == "passed"
        _, pstate = load_qwen3_state(parent)
        for name in ck.layer_names():
            q, s = requantize_pow2(pstate[f"{name}.weight"], rule)
            assert torch.equal(ck.weight(name), q) and torch.equal(ck.scales[name], s)


def _fp32_division(w):
    """The injected wrong quantizer: same scale, but ``w / scale`` in float32."""
    _, s = quantize_weight_per_channel(w)
    q = torch.round(torch.clamp(w.float() / s.float(), -128, 127)).to(torch.int8)
    return q, s


def _natural(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def test_gate_fails_on_float32_division_with_first_element(models, tmp_path):
    parent, committed = models
    with pytest.raises(ReconstructionGateError) as ei:
        reconstruction_gate(parent, committed.dir, quantizer=_fp32_division)
    err = ei.value
    # independently: first tensor (natural name order) and first element that differ
    _, pstate = load_qwen3_state(parent)
    linears = sorted((n for n in pstate if n.endswith("_proj.weight")), key=_natural)
    first = None
    for n in linears:
        a = quantize_weight_per_channel(pstate[n])[0]
        b = _fp32_division(pstate[n])[0]
        if not torch.equal(a, b):
            flat = int(torch.nonzero((a != b).reshape(-1))[0])
            first = (n, divmod(flat, a.shape[1]), int(a.reshape(-1)[flat]), int(b.reshape(-1)[flat]))
            break
    assert first is not None
    assert err.tensor == first[0] and err.index == first[1]
    assert (
        f"tensor '{first[0]}' element [{first[1][0]}, {first[1][1]}]: committed {first[2]}, "
        f"rebuilt {first[3]}" in str(err)
    )
    # nothing is built when the gate fails
    with pytest.raises(ReconstructionGateError):
        build_pow2_checkpoint(parent, committed.dir, tmp_path / "never", gate_quantizer=_fp32_division)
    assert not (tmp_path / "never").exists()


def test_gate_names_a_tampered_element(models, tmp_path):
    parent, committed = models
    d = tmp_path / "tampered"
    shutil.copytree(committed.dir, d)
    _, raw = load_qwen3_state(d)
    name = "model.layers.1.self_attn.k_proj.weight"
    orig = int(raw[name][5, 7])
    raw[name] = raw[name].clone()
    raw[name][5, 7] = orig - 1 if orig > -128 else orig + 1
    save_safetensors_atomic(raw, d / "model.safetensors")
    with pytest.raises(
        CheckpointError,
        match=rf"tensor '{re.escape(name)}' element \[5, 7\]: "
        rf"committed {int(raw[name][5, 7])}, rebuilt {orig}",
    ):
        reconstruction_gate(parent, d)
    # a scale stored in another dtype (another tool's checkpoint) is named too
    raw[name][5, 7] = orig
    sname = "model.layers.0.mlp.down_proj.weight_scale"
    raw[sname] = raw[sname].float()
    save_safetensors_atomic(raw, d / "model.safetensors")
    with pytest.raises(
        CheckpointError,
        match=rf"tensor '{re.escape(sname)}' is torch\.float32 \[256, 1\], "
        rf"rebuild gives torch\.bfloat16 \[256, 1\]",
    ):
        reconstruction_gate(parent, d)


def test_own_scale_shortcut_matches_full_quantizer():
    """pow2_exponents quantizes only the column of row absmaxes; the scales
    equal the full quantizer's (bf16, fp16, fp32, incl. an all-zero row)."""
    g = torch.Generator().manual_seed(9)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        w = (torch.randn(50, 70, generator=g) * torch.logspace(-3, 1, 50)[:, None]).to(dtype)
        w[7] = 0
        col = w.abs().amax(dim=1, keepdim=True)
        assert torch.equal(quantize_weight_per_channel(col)[1], quantize_weight_per_channel(w)[1])


def test_nearest_in_log2_straddles_sqrt2():
    """bf16 neighbours around sqrt(2) * 2^k = 1.41421...: 1.4140625 snaps
    down, 1.421875 snaps up (nearest in log2, not in linear distance, where
    the midpoint would be 1.5)."""
    from reference.model.pow2 import _nearest_exponent

    s = torch.tensor([1.4140625, 1.421875, 1.4140625 / 64, 1.421875 / 64, 1.49, 0.75], dtype=torch.bfloat16)
    assert _nearest_exponent(s).tolist() == [0, 1, -6, -5, 1, 0]
