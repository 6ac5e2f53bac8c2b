"""``int8conf perplexity`` / ``int8conf generate`` (conformance/commands/perplexity.py, generate.py)
on a tiny random Qwen3 that uses the shipped tokenizer."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from conformance.cli import main
from reference.contract import CUTLASS_STYLE
from reference.model import forward as wf
from reference.model.assets import default_model_dir
from reference.model.corpus import eval_windows
from reference.model.tokenizer import encode, eot_id, load_tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok_src = default_model_dir() / "tokenizer.json"
    if not tok_src.is_file():
        pytest.skip("shipped tokenizer not built yet (reference/model/assets/default_model)")
    vocab = load_tokenizer().get_vocab_size()
    torch.manual_seed(11)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        intermediate_size=256,
        tie_word_embeddings=True,
        max_position_embeddings=256,
    )
    d = tmp_path_factory.mktemp("tiny_tok_qwen3")
    Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
    shutil.copy(tok_src, d / "tokenizer.json")
    return d


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_bf16_perplexity_command_equals_hf_loss(model_dir, capsys):
    rc, out, _ = _run(
        capsys, "perplexity", "--model", model_dir, "--scale-mode", "bf16", "--windows", 3, "--window-len", 40, "--json"
    )
    assert rc == 0
    rec = json.loads(out)
    model = wf.load_model(model_dir)
    win = eval_windows(load_tokenizer(model_dir), 3, 40)
    with torch.no_grad():
        loss = model(input_ids=win, labels=win).loss
    assert math.isclose(rec["perplexity"], math.exp(float(loss)), rel_tol=2e-6)
    assert rec["predicted_tokens"] == 3 * 39 and rec["kernel"] is None


def test_w8a8_perplexity_command_cpu_kernel_equals_reference_pipeline(model_dir, capsys):
    rc, out, _ = _run(
        capsys,
        "perplexity",
        "--model",
        model_dir,
        "--kernel",
        "cpu",
        "--scale-mode",
        "own",
        "--windows",
        2,
        "--window-len",
        32,
        "--track-acc",
        "--json",
    )
    assert rc == 0
    rec = json.loads(out)
    model = wf.load_model(model_dir)
    ref, _ = wf.build_w8a8_model(model, wf.quantize_weights(model), wf.reference_scaled_mm_for(CUTLASS_STYLE))
    want = wf.perplexity(ref, eval_windows(load_tokenizer(model_dir), 2, 32))
    assert rec["perplexity"] == want  # cpu declares CUTLASS_STYLE: same bits, same value
    assert rec["kernel"] == "cpu" and rec["kernel_path"] == "cpu-exact"
    assert sorted(rec["max_abs_acc"]) == sorted(wf.linear_names(2))
    assert rec["layers_acc_ge_2_24"] == []
    rc, out, _ = _run(capsys, "perplexity", "--model", model_dir, "--windows", 2, "--window-len", 32)
    assert rc == 0 and out.startswith(f"perplexity {want:.4f}")


def test_generate_command_equals_greedy_reference(model_dir, capsys):
    rc, out, _ = _run(
        capsys, "generate", "--model", model_dir, "--prompt", "Shall I compare", "--max-new-tokens", 5, "--json"
    )
    assert rc == 0
    rec = json.loads(out)
    tok = load_tokenizer(model_dir)
    ids = encode(tok, "Shall I compare")
    model = wf.load_model(model_dir)
    ref, _ = wf.build_w8a8_model(model, wf.quantize_weights(model), wf.reference_scaled_mm_for(CUTLASS_STYLE))
    gen = wf.greedy_generate(ref, ids, 5, eos_token_id=eot_id(tok))
    assert rec["prompt_ids"] == ids and rec["generated_ids"] == gen and len(gen) >= 1
    assert rec["text"] == tok.decode(rec["generated_ids"])


def test_bad_model_dir_and_kernel_are_one_line_errors(model_dir, tmp_path, capsys):
    rc, out, err = _run(capsys, "perplexity", "--model", tmp_path / "nope")
    assert rc == 2 and err.count("\n") == 1 and "config.json" in err
    rc, out, err = _run(
        capsys, "perplexity", "--model", model_dir, "--kernel", "no_such_kernel", "--windows", 1, "--window-len", 8
    )
    assert rc == 2 and err.startswith("int8conf: error:") and "no_such_kernel" in err


def test_checkpoint_option_reads_compressed_tensors_weights(model_dir, tmp_path, capsys):
    from reference.model.compressed_tensors import build_w8a8_checkpoint
    from reference.model.pow2 import requantize_pow2

    own, p2 = tmp_path / "own", tmp_path / "p2"
    build_w8a8_checkpoint(model_dir, own)
    build_w8a8_checkpoint(model_dir, p2, quantizer=lambda w: requantize_pow2(w, rule="nearest"))
    args = ["perplexity", "--model", model_dir, "--windows", 2, "--window-len", 16, "--json"]
    ppl = {}
    for key, extra in (
        ("own", []),
        ("ck_own", ["--checkpoint", own]),
        ("pow2", ["--scale-mode", "pow2-nearest"]),
        ("ck_pow2", ["--checkpoint", p2]),
    ):
        rc, out, _ = _run(capsys, *args, *extra)
        assert rc == 0
        ppl[key] = json.loads(out)["perplexity"]
    # the checkpoints hold the quantizers' bytes: same perplexity as quantizing in process
    assert ppl["own"] == ppl["ck_own"] and ppl["pow2"] == ppl["ck_pow2"]
    assert ppl["own"] != ppl["pow2"]  # and the weights really come from the checkpoint
