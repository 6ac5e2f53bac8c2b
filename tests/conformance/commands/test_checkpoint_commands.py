"""``int8conf quantize`` / ``pow2`` / ``capture``."""

import json

import pytest

from conformance.cli import main
from reference.model.checkpoint import write_random_qwen3
from reference.model.compressed_tensors import read_w8a8_checkpoint


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    return write_random_qwen3(tmp_path_factory.mktemp("cli") / "m", seed=3, num_hidden_layers=1)


def test_quantize_and_pow2_write_checkpoints(parent, tmp_path, capsys):
    assert main(["quantize", "--model", str(parent), "--out", str(tmp_path / "own")]) == 0
    own = read_w8a8_checkpoint(tmp_path / "own")
    assert f"state digest {own.digest[:16]}, scales own" in capsys.readouterr().out
    assert (
        main(
            [
                "pow2",
                "--model",
                str(parent),
                "--committed",
                str(tmp_path / "own"),
                "--rule",
                "ceiling",
                "--out",
                str(tmp_path / "ceil"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "reconstruction gate passed: 20 tensors" in out and "scales pow2-ceiling" in out
    cfg = json.loads((tmp_path / "ceil" / "config.json").read_text())
    assert cfg["int8conf"]["scale_rule"] == "pow2-ceiling"
    assert cfg["int8conf"]["committed_digest"] == own.digest


def test_errors_are_one_line_exit_2(parent, tmp_path, capsys):
    assert main(["quantize", "--model", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err == f"int8conf: error: {tmp_path}/config.json: missing (not a Hugging Face checkpoint directory)\n"
    assert main(["pow2", "--model", str(parent), "--committed", str(parent)]) == 2
    assert capsys.readouterr().err == (
        f"int8conf: error: {parent}/config.json: no quantization_config (not a committed W8A8 checkpoint)\n"
    )
    assert main(["capture", "--model", str(parent), "--out", str(tmp_path / "cap")]) == 2
    assert "tokenizer.json: missing tokenizer.json" in capsys.readouterr().err


def test_capture_fresh_removes_only_capture_files(parent, tmp_path, monkeypatch):
    import torch

    from reference.model.capture import capture_model, remove_capture

    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "cap"
    ids = torch.arange(64).reshape(2, 32) % 512
    capture_model(parent, out, input_ids=ids, tokens_per_window=4)
    (out / "notes.txt").write_text("mine")
    assert remove_capture(out) == 7 + 1
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
