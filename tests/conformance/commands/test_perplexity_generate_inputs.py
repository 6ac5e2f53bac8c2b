"""Fixes to ``int8conf perplexity`` / ``generate`` / C7 found by a new-user test:

1. a checkpoint with a missing or misshapen tensor is a one-line
   CheckpointError (never transformers' random initialization + rc 0);
2. windows / prompt + new tokens beyond ``max_position_embeddings`` are
   rejected with both numbers named;
3. ``--checkpoint`` labels the scale mode from the checkpoint itself;
4. C7's summary says ``ppl reference(declared contract) X vs kernel Y``.

A tiny random Qwen3 (``reference.model.checkpoint.write_random_qwen3``, context 64
tokens) with the shipped tokenizer keeps every run well under a second.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from conformance.cli import main
from reference.errors import CheckpointError, OperandError
from reference.model import forward as wf
from reference.model.checkpoint import load_qwen3_state, save_safetensors_atomic, write_random_qwen3

CTX = 64  # max_position_embeddings of the tiny model
DROPPED = "model.layers.1.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from reference.model.assets import default_model_dir
    from reference.model.tokenizer import load_tokenizer

    tok_src = default_model_dir() / "tokenizer.json"
    if not tok_src.is_file():
        pytest.skip("shipped tokenizer not built yet (reference/model/assets/default_model)")
    d = write_random_qwen3(
        tmp_path_factory.mktemp("fix_tiny"),
        seed=5,
        vocab_size=load_tokenizer().get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=CTX,
    )
    shutil.copy(tok_src, d / "tokenizer.json")
    return d


def _variant(src: Path, dst: Path, edit) -> Path:
    """Copy of ``src`` whose model.safetensors is ``edit(state)``."""
    shutil.copytree(src, dst)
    _, state = load_qwen3_state(src)
    save_safetensors_atomic(edit(dict(state)), dst / "model.safetensors")
    return dst


def _drop(state):
    del state[DROPPED]
    return state


def _shrink(state):
    state[DROPPED] = state[DROPPED][:100].clone()
    return state


def _run(capfd, *argv):
    rc = main([str(a) for a in argv])
    out = capfd.readouterr()
    return rc, out.out, out.err


# ----------------------------------------------------- 1. checkpoint validation


@pytest.mark.parametrize(
    "cmd", [["perplexity", "--windows", 1, "--window-len", 8], ["generate", "--max-new-tokens", 2]]
)
def test_missing_tensor_is_one_line_error_not_random_weights(model_dir, tmp_path, capfd, cmd):
    bad = _variant(model_dir, tmp_path / "bad", _drop)
    rc, out, err = _run(capfd, cmd[0], "--model", bad, *cmd[1:])
    assert rc == 2 and out == ""
    assert err == (
        f"int8conf: error: {bad / 'model.safetensors'}: missing tensor {DROPPED!r} required by {bad / 'config.json'}\n"
    )


def test_shape_mismatch_is_one_line_error(model_dir, tmp_path, capfd):
    bad = _variant(model_dir, tmp_path / "bad", _shrink)
    rc, out, err = _run(capfd, "perplexity", "--model", bad, "--windows", 1, "--window-len", 8)
    assert rc == 2 and out == ""
    assert err == (
        f"int8conf: error: {bad / 'model.safetensors'}: tensor {DROPPED!r} has shape "
        f"[100, 128], config implies [256, 128]\n"
    )


def test_transformers_side_guard_and_quiet_logging(model_dir, tmp_path, capfd, monkeypatch):
    """If the validator let a gap through, transformers' loading info still
    stops it (and its multi-line report is not printed); verbosity restored."""
    from transformers.utils import logging as hf_logging

    import reference.model.checkpoint as ckpt

    bad = _variant(model_dir, tmp_path / "bad", _drop)
    monkeypatch.setattr(ckpt, "load_qwen3_state", lambda d: None)
    level = hf_logging.get_verbosity()
    capfd.readouterr()
    with pytest.raises(CheckpointError) as ei:
        wf.load_model(bad)
    assert str(ei.value) == (
        f"{bad}: tensor {DROPPED!r} missing (1 such; transformers would have initialized them randomly)"
    )
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "MISSING" not in err and "Loading weights" not in err
    assert hf_logging.get_verbosity() == level


def test_good_dir_loads_the_stored_weights(model_dir):
    model = wf.load_model(model_dir)
    _, state = load_qwen3_state(model_dir)
    assert torch.equal(model.get_parameter(DROPPED), state[DROPPED])


# ----------------------------------------------------- 2. context length


def test_perplexity_window_beyond_context_rejected(model_dir, capfd):
    rc, out, err = _run(capfd, "perplexity", "--model", model_dir, "--windows", 1, "--window-len", CTX + 1)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err == (
        f"int8conf: error: --window-len {CTX + 1}: {CTX + 1} tokens exceeds the model's "
        f"context of {CTX} tokens (max_position_embeddings in config.json)\n"
    )
    rc, out, _ = _run(capfd, "perplexity", "--model", model_dir, "--windows", 1, "--window-len", CTX, "--json")
    assert rc == 0 and json.loads(out)["predicted_tokens"] == CTX - 1  # exactly the context is fine


def test_generate_prompt_plus_new_tokens_beyond_context_rejected(model_dir, capfd):
    from reference.model.tokenizer import encode, load_tokenizer

    prompt = "Shall I compare thee"
    p = len(encode(load_tokenizer(model_dir), prompt))
    n = CTX - p + 1
    rc, out, err = _run(capfd, "generate", "--model", model_dir, "--prompt", prompt, "--max-new-tokens", n)
    assert rc == 2 and out == ""
    assert err == (
        f"int8conf: error: prompt ({p} tokens) + --max-new-tokens ({n}): {CTX + 1} tokens "
        f"exceeds the model's context of {CTX} tokens (max_position_embeddings in "
        f"config.json)\n"
    )


def test_library_guards_teacher_forced_greedy_and_c7(model_dir):
    from conformance.checks.token_flip import check_token_flip
    from conformance.kernels.registry import get_kernel

    model = wf.load_model(model_dir)
    with pytest.raises(OperandError, match=rf"^window length: {CTX + 1} tokens .* context of {CTX} "):
        wf.teacher_forced(model, torch.ones(1, CTX + 1, dtype=torch.long))
    with pytest.raises(
        OperandError,
        match=rf"\(3 tokens\) \+ max_new_tokens \({CTX - 2}\): "
        rf"{CTX + 1} tokens .* context of {CTX} ",
    ):
        wf.greedy_generate(model, [1, 2, 3], CTX - 2)
    assert len(wf.greedy_generate(model, [1, 2, 3], CTX - 3)) >= 1  # P + N == context: allowed
    with pytest.raises(OperandError, match=rf"^C7 window_len {CTX + 1}: .* context of {CTX} "):
        check_token_flip(get_kernel("cpu"), model_dir=model_dir, windows=1, window_len=CTX + 1)
    with pytest.raises(OperandError, match=rf"^C7 window length: {CTX + 1} tokens"):
        check_token_flip(get_kernel("cpu"), model_dir=model_dir, windows=torch.ones(1, CTX + 1, dtype=torch.long))


# ----------------------------------------------------- 3. scale label from the checkpoint


@pytest.fixture(scope="module")
def checkpoints(model_dir, tmp_path_factory):
    from reference.model.compressed_tensors import build_w8a8_checkpoint
    from reference.model.pow2 import build_pow2_checkpoint, requantize_pow2

    root = tmp_path_factory.mktemp("fix_ck")
    own = root / "own"
    build_w8a8_checkpoint(model_dir, own)
    # pow2 scales written without a pow2 scale_rule record (meta says "own"): inferred
    anon = root / "anon"
    build_w8a8_checkpoint(model_dir, anon, quantizer=lambda w: requantize_pow2(w, rule="nearest"))
    p2n = root / "p2n"
    build_pow2_checkpoint(model_dir, own, p2n, rule="nearest")
    return {"own": own, "anon": anon, "p2n": p2n}


@pytest.mark.parametrize(
    "kind,mode,label",
    [
        ("own", "own", "own scales (from checkpoint)"),
        ("anon", "pow2", "power-of-two scales (from checkpoint)"),
        ("p2n", "pow2-nearest", "pow2-nearest scales (from checkpoint)"),
    ],
)
def test_checkpoint_scale_label(model_dir, checkpoints, capfd, monkeypatch, kind, mode, label):
    import conformance.checks.token_flip as tfl

    seen = []
    real = tfl.kernel_layer_callables

    def spy(kernel, names, scale_mode="own", *a, **k):
        seen.append(scale_mode)
        return real(kernel, names, scale_mode, *a, **k)

    monkeypatch.setattr(tfl, "kernel_layer_callables", spy)
    args = ["perplexity", "--model", model_dir, "--windows", 1, "--window-len", 8, "--checkpoint", checkpoints[kind]]
    rc, out, _ = _run(capfd, *args)
    assert rc == 0
    assert re.fullmatch(
        rf"perplexity \S+  \[W8A8 {re.escape(label)}, kernel cpu \(cpu-exact\); "
        rf"1 windows x 8 tokens, 7 predicted; .*\]\n",
        out,
    ), out
    rc, out, _ = _run(capfd, *args, "--json")
    rec = json.loads(out)
    assert rc == 0 and rec["scale_mode"] == mode and rec["scale_label"] == label
    assert seen == [mode, mode]  # the kernel's GemmOperands get the checkpoint's mode too
    rc, out, _ = _run(
        capfd, "generate", "--model", model_dir, "--max-new-tokens", 1, "--json", "--checkpoint", checkpoints[kind]
    )
    assert rc == 0 and json.loads(out)["scale_mode"] == mode


def test_checkpoint_scale_mode_unit():
    from reference.model.compressed_tensors import W8A8Checkpoint
    from reference.model.weights import checkpoint_scale_mode

    def ck(scales, meta):
        return W8A8Checkpoint(
            dir=Path("x"),
            config={},
            quantization_config={},
            weights={},
            scales={"l": torch.tensor(scales).reshape(-1, 1)},
            meta=meta,
        )

    assert checkpoint_scale_mode(ck([0.5, 2.0**-9], {})) == ("pow2", "power-of-two scales (from checkpoint)")
    assert checkpoint_scale_mode(ck([0.25, 2.0**-12], {"scale_rule": "pow2-ceiling"})) == (
        "pow2-ceiling",
        "pow2-ceiling scales (from checkpoint)",
    )
    # a record that the stored scales contradict is not believed
    assert checkpoint_scale_mode(ck([0.75, 0.5], {"scale_rule": "pow2-nearest"})) == (
        "own",
        "per-channel scales (from checkpoint)",
    )
    assert checkpoint_scale_mode(ck([0.75, 0.5], {"scale_rule": "own"})) == ("own", "own scales (from checkpoint)")
    # bf16-stored scales (compressed-tensors' dtype) widen exactly: 3 * 2**-8 is not pow2
    s = torch.tensor([[2.0**-8], [3 * 2.0**-8]], dtype=torch.bfloat16)
    c = W8A8Checkpoint(dir=Path("x"), config={}, quantization_config={}, weights={}, scales={"l": s})
    assert checkpoint_scale_mode(c)[0] == "own"


def test_checkpoint_with_other_scale_mode_rejected(model_dir, checkpoints, capfd):
    rc, out, err = _run(
        capfd,
        "perplexity",
        "--model",
        model_dir,
        "--scale-mode",
        "bf16",
        "--checkpoint",
        checkpoints["own"],
        "--windows",
        1,
        "--window-len",
        8,
    )
    assert rc == 2 and out == ""
    assert err == (
        f"int8conf: error: --checkpoint takes its weights and scales from "
        f"{checkpoints['own']}; drop --scale-mode bf16\n"
    )


# ----------------------------------------------------- 4. C7 summary wording


def test_c7_summary_names_declared_contract_reference(model_dir):
    from conformance.checks.token_flip import check_token_flip
    from conformance.kernels.registry import get_kernel

    win = torch.randint(0, 4096, (2, 12), generator=torch.Generator().manual_seed(1))
    r = check_token_flip(get_kernel("cpu"), model_dir=model_dir, windows=win)
    ev = r.evidence
    assert r.verdict == "pass" and ev["flips"] == 0
    assert r.summary.endswith(
        f"; ppl reference(declared contract) {ev['ppl_reference']:.4f} vs kernel {ev['ppl_kernel']:.4f}"
    )
    assert "ppl ref " not in r.summary
