"""W8A8 model forward (reference/model/forward.py): bit-exact layers, teacher
forcing, perplexity, greedy decoding, on a tiny random Qwen3 (2 blocks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_qwen3 import VOCAB, tiny_model

from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.errors import CheckpointError, OperandError
from reference.model import forward as wf


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def weights(model):
    return wf.quantize_weights(model)


@pytest.fixture(scope="module")
def windows():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (4, 48), generator=g)


# -------------------------------------------------------------- slow path


def _bf16_rne_bits(x32: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even (no NaN here):
    add 0x7FFF plus the lowest kept bit, drop the low 16 bits."""
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _slow_linear_bits(x: torch.Tensor, q: torch.Tensor, s_w: torch.Tensor, contract: EpilogueContract) -> np.ndarray:
    """Independent slow W8A8 linear: numpy int64 accumulator (exact: |acc| <=
    K * 2**14 << 2**63), numpy float32 epilogue, manual RNE to bf16 bits."""
    from reference.quantize import quantize_activation_per_token

    a, s_a = quantize_activation_per_token(x.reshape(-1, x.shape[-1]))
    acc = a.numpy().astype(np.int64) @ q.numpy().astype(np.int64).T
    assert np.abs(acc).max() < 2**24  # so the int -> float32 conversion is exact
    accf = acc.astype(np.float32)
    sa = s_a.numpy().astype(np.float32)[:, None]
    sw = s_w.numpy().astype(np.float32)[None, :]
    if contract.scale_order == "a_then_w":
        y = (accf * sa).astype(np.float32) * sw
    elif contract.scale_order == "w_then_a":
        y = (accf * sw).astype(np.float32) * sa
    else:
        y = accf * (sa * sw).astype(np.float32)
    return _bf16_rne_bits(y.astype(np.float32))


@pytest.mark.parametrize("contract", [CUTLASS_STYLE, TRITON_STYLE, EpilogueContract("fused", "fp32_before_round")])
def test_every_block0_linear_matches_slow_path_bit_for_bit(model, weights, windows, contract):
    from reference.quantize import quantize_weight_per_channel

    w8, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(contract))
    seen = {}
    hooks = []
    for name, mod in w8.named_modules():
        if isinstance(mod, wf.W8A8Linear) and name.startswith("model.layers.0."):
            hooks.append(
                mod.register_forward_hook(lambda m, inp, out, name=name: seen.__setitem__(name, (inp[0], out)))
            )
    with torch.no_grad():
        w8(input_ids=windows[:2, :16])
    for h in hooks:
        h.remove()
    assert sorted(seen) == sorted(wf.linear_names(2)[:7])
    parents = dict(model.named_modules())
    for name, (x, y) in seen.items():
        w = parents[name].weight.detach()
        q, s = quantize_weight_per_channel(w)
        assert torch.equal(weights[name].q, q)
        # weight scale handed to scaled_mm: the quantizer's scale widened to fp32
        assert torch.equal(weights[name].scale, s.reshape(-1).to(torch.float32))
        want = _slow_linear_bits(x, q, s.reshape(-1).to(torch.float32), contract)
        got = y.reshape(-1, y.shape[-1]).view(torch.int16).numpy().view(np.uint16)
        assert y.dtype == torch.bfloat16 and y.shape[:-1] == x.shape[:-1]
        np.testing.assert_array_equal(got, want, err_msg=name)
        # and it is really W8A8: not the bf16 linear's output
        assert not torch.equal(y, parents[name](x))


def test_original_model_is_untouched_and_lm_head_stays_bf16(model, weights):
    w8, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(CUTLASS_STYLE))
    assert isinstance(model.model.layers[0].mlp.down_proj, torch.nn.Linear)
    assert isinstance(w8.model.layers[1].mlp.down_proj, wf.W8A8Linear)
    assert type(w8.lm_head) is torch.nn.Linear and w8.lm_head.weight.dtype == torch.bfloat16
    assert w8.lm_head.weight is w8.model.embed_tokens.weight  # tie kept
    n_w8 = sum(isinstance(m, wf.W8A8Linear) for m in w8.modules())
    assert n_w8 == 14


def test_weights_from_tensors_matches_quantize_weights(weights):
    ref = weights
    state = {}
    for n, qw in ref.items():
        state[f"{n}.weight"] = qw.q
        state[f"{n}.weight_scale"] = qw.scale.to(torch.bfloat16).reshape(-1, 1)
    got = wf.weights_from_tensors(state, 2)
    for n in ref:
        assert torch.equal(got[n].q, ref[n].q) and torch.equal(got[n].scale, ref[n].scale)
    del state["model.layers.1.mlp.up_proj.weight_scale"]
    with pytest.raises(CheckpointError, match="model.layers.1.mlp.up_proj.weight_scale"):
        wf.weights_from_tensors(state, 2)


def test_missing_or_misshapen_weight_raises_one_line(model, weights):
    bad = dict(weights)
    del bad["model.layers.0.self_attn.k_proj"]
    with pytest.raises(CheckpointError, match="model.layers.0.self_attn.k_proj"):
        wf.build_w8a8_model(model, bad, wf.reference_scaled_mm_for(CUTLASS_STYLE))
    bad = dict(weights)
    q = weights["model.layers.0.self_attn.k_proj"]  # [128, 256]
    bad["model.layers.0.self_attn.k_proj"] = wf.QuantWeight(q.q.T.contiguous(), q.scale)
    with pytest.raises(OperandError, match="k_proj"):
        wf.build_w8a8_model(model, bad, wf.reference_scaled_mm_for(CUTLASS_STYLE))


def test_acc_stats_equal_exact_accumulator_max(model, weights, windows):
    from reference.accumulate import int_mm_int64_naive
    from reference.quantize import quantize_activation_per_token

    w8, stats = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(CUTLASS_STYLE), track_acc=True)
    seen = {}
    mod = w8.model.layers[1].mlp.down_proj
    h = mod.register_forward_hook(lambda m, i, o: seen.update(x=i[0]))
    with torch.no_grad():
        w8(input_ids=windows[:1, :8])
    h.remove()
    a, _ = quantize_activation_per_token(seen["x"].reshape(-1, 1536))
    want = int(int_mm_int64_naive(a, weights["model.layers.1.mlp.down_proj"].q).abs().max())
    assert stats.max_abs_acc["model.layers.1.mlp.down_proj"] == want
    assert stats.max_k["model.layers.1.mlp.down_proj"] == 1536
    assert len(stats.max_abs_acc) == 14
    assert stats.layers_at_or_above(2**24) == []  # |acc| < 2**24 in this tiny model
    assert "model.layers.1.mlp.down_proj" in stats.layers_at_or_above(want)


# -------------------------------------------------------------- evaluation


def test_argmax_ties_go_to_smallest_id():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, -1.0, 0.5, 0.5]])
    assert wf.argmax_smallest(x).tolist() == [1, 0, 2]


def test_teacher_forced_matches_independent_logits_and_is_deterministic(model, weights, windows):
    tf = wf.teacher_forced(model, windows, batch_size=4)
    with torch.no_grad():
        logits = model(input_ids=windows).logits.float()
    srt = logits.sort(dim=-1, descending=True).values
    assert torch.equal(tf.margin, srt[..., 0] - srt[..., 1])
    assert torch.equal(tf.top1, srt[..., 0])
    # numpy's argmax returns the first (smallest) index among ties
    assert torch.equal(tf.argmax, torch.from_numpy(np.argmax(logits.numpy(), axis=-1)))
    assert tf.margin.dtype == torch.float32 and tf.argmax.dtype == torch.int64
    assert tf.nll.shape == (4, 47)
    w8, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(TRITON_STYLE))
    r1 = wf.teacher_forced(w8, windows, batch_size=4)
    r2 = wf.teacher_forced(w8, windows, batch_size=4)
    assert torch.equal(r1.argmax, r2.argmax) and torch.equal(r1.margin, r2.margin)
    assert torch.equal(r1.nll, r2.nll)
    # W8A8 really changes the logits (not a pass-through of the bf16 model)
    assert not torch.equal(r1.top1, tf.top1)


def test_bf16_perplexity_equals_hf_loss(model, windows):
    ppl = wf.perplexity(model, windows, batch_size=3)
    with torch.no_grad():
        loss = model(input_ids=windows, labels=windows).loss  # HF ForCausalLMLoss, fp32
    assert math.isclose(ppl, math.exp(float(loss)), rel_tol=2e-6)
    # a random model is near-uniform: perplexity near the vocabulary size
    assert 0.5 * VOCAB < ppl < 2 * VOCAB


def test_greedy_generate_matches_full_recompute(model, weights):
    w8, _ = wf.build_w8a8_model(model, weights, wf.reference_scaled_mm_for(CUTLASS_STYLE))
    prompt = [5, 17, 300, 2]
    out = wf.greedy_generate(w8, prompt, max_new_tokens=6)
    # independent: no KV cache, recompute the whole sequence each step
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            lg = w8(input_ids=torch.tensor([seq])).logits[0, -1].float()
            seq.append(int(wf.argmax_smallest(lg)))
    assert out == seq[len(prompt) :]
    stop = out[2]
    assert wf.greedy_generate(w8, prompt, 6, eos_token_id=stop) == out[: out.index(stop) + 1]


def test_bad_inputs_raise_one_line_errors(model, tmp_path):
    with pytest.raises(OperandError, match="outside"):
        wf.teacher_forced(model, torch.tensor([[1, VOCAB]]))
    with pytest.raises(OperandError, match=r"\[B, T\]"):
        wf.teacher_forced(model, torch.tensor([1, 2, 3]))
    with pytest.raises(OperandError, match="empty"):
        wf.greedy_generate(model, [], 3)
    with pytest.raises(CheckpointError, match="config.json"):
        wf.load_model(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(CheckpointError, match="llama"):
        wf.load_model(tmp_path)


def test_zero_activation_row_gives_zero_output(weights):
    lin = wf.W8A8Linear(
        "model.layers.0.self_attn.q_proj",
        weights["model.layers.0.self_attn.q_proj"],
        wf.reference_scaled_mm_for(CUTLASS_STYLE),
    )
    x = torch.randn(3, 256).to(torch.bfloat16)
    x[1] = 0
    y = lin(x)
    assert torch.equal(y[1], torch.zeros(256, dtype=torch.bfloat16))
    assert not torch.equal(y[0], torch.zeros(256, dtype=torch.bfloat16))


@pytest.mark.parametrize("rule", ["nearest", "ceiling"])
def test_pow2_scale_modes_requantize_from_parent(model, rule):
    from reference.model.pow2 import requantize_pow2

    w = wf.weights_for_scale_mode(model, f"pow2-{rule}")
    name = "model.layers.1.mlp.down_proj"
    q, s = requantize_pow2(model.get_submodule(name).weight.detach(), rule=rule)
    assert torch.equal(w[name].q, q)
    m, _ = torch.frexp(w[name].scale)
    assert bool((m == 0.5).all())  # every per-channel scale is exactly a power of two
    with pytest.raises(Exception, match="scale_mode"):
        wf.weights_for_scale_mode(model, "pow3")
