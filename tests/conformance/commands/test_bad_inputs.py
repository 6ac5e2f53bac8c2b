"""bad command-line inputs found by a new-user test are one line + exit code 2.

1. ``int8conf perplexity --batch-size 0|-2`` and ``detllm perplexity
   --batch-size 0|-1`` (were Python tracebacks);
2. ``detllm perplexity --length`` beyond the artifact's context (was silently
   clamped) or < 2 (printed nan, exit 0); ``detllm --threads 0|-3``;
3. ``int8conf generate --prompt "   "`` (ran); text-mode ``generate`` prints a
   header naming the model arm;
4. ``int8conf check --out ""`` (wrote reports into the cwd).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conformance.cli import main as int8conf_main
from detllm import cli as dcli
from reference.errors import OperandError


def _int8conf(capfd, *argv):
    rc = int8conf_main([str(a) for a in argv])
    out = capfd.readouterr()
    return rc, out.out, out.err


def _argparse_exit(capfd, main, *argv) -> str:
    """argparse rejects ``argv``: SystemExit(2) and the last stderr line is the error."""
    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in argv])
    assert ei.value.code == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# ------------------------------------------------------------ 1. --batch-size


@pytest.mark.parametrize("bad", [0, -2])
def test_int8conf_perplexity_batch_size_must_be_positive(capfd, bad):
    line = _argparse_exit(capfd, int8conf_main, "perplexity", "--batch-size", bad)
    assert line == f"int8conf perplexity: error: argument --batch-size: expected an integer >= 1, got {bad}"


@pytest.mark.parametrize("bad", [0, -1])
def test_detllm_perplexity_batch_size_must_be_positive(capfd, bad):
    line = _argparse_exit(capfd, dcli.main, "perplexity", "--batch-size", bad)
    assert line == f"detllm perplexity: error: argument --batch-size: expected an integer >= 1, got {bad}"


# ------------------------------------------------------------ 2. detllm --length / --threads


@pytest.mark.parametrize("bad", [0, -3])
def test_detllm_threads_must_be_positive(capfd, bad):
    prev = torch.get_num_threads()
    line = _argparse_exit(capfd, dcli.main, "--threads", bad, "perplexity")
    assert line == f"detllm: error: argument --threads: expected an integer >= 1, got {bad}"
    assert torch.get_num_threads() == prev


def test_check_length_names_both_numbers():
    dcli.check_length(2, 256)
    dcli.check_length(256, 256)  # a window as long as the context: allowed
    with pytest.raises(OperandError, match=r"^--length 257 exceeds the model's context of 256 tokens"):
        dcli.check_length(257, 256)
    with pytest.raises(OperandError, match=r"^--length 1: a window needs at least 2 tokens \(model context 256"):
        dcli.check_length(1, 256)


@pytest.mark.parametrize("bad", [1, 0, -5])
def test_detllm_length_below_two_rejected_before_loading(capfd, tmp_path, bad):
    # the artifact does not exist: the length is rejected first (no nan perplexity, no prepare)
    rc = dcli.main(["perplexity", "--length", str(bad), "--artifact", str(tmp_path / "none")])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == [f"detllm: error: --length {bad}: a window needs at least 2 tokens"]


@pytest.fixture(scope="module")
def tiny_art(tmp_path_factory):
    from detllm.prepare import PrepareOptions, make_tiny_model, prepare

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("fix_cli_inputs")
    md = make_tiny_model(d / "model", seed=3)  # TINY_QWEN3: max_position 256
    art = prepare(md, d / "art", PrepareOptions(calib_windows=2, calib_len=16, calib_source="random"))
    torch.set_num_threads(prev)
    return md, art


def test_detllm_length_beyond_context_rejected_not_clamped(capfd, tiny_art):
    md, art = tiny_art
    ctx = art.config["model"]["max_position"]
    assert ctx == 256
    rc = dcli.main(["perplexity", "--length", "1000", "--artifact", str(art.path), "--model", str(md)])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1
    assert err[0].startswith("detllm: error: --length 1000 exceeds the model's context of 256 tokens")


# ------------------------------------------------------------ 3. int8conf generate


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from reference.model.assets import default_model_dir
    from reference.model.checkpoint import write_random_qwen3
    from reference.model.tokenizer import load_tokenizer

    tok_src = default_model_dir() / "tokenizer.json"
    if not tok_src.is_file():
        pytest.skip("shipped tokenizer not built yet (reference/model/assets/default_model)")
    d = write_random_qwen3(
        tmp_path_factory.mktemp("fix_cli_tiny"),
        seed=7,
        vocab_size=load_tokenizer().get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    shutil.copy(tok_src, d / "tokenizer.json")
    return d


@pytest.mark.parametrize("prompt", ["   ", "\t\n", ""])
def test_generate_whitespace_prompt_rejected(capfd, tmp_path, prompt):
    # --model need not exist: the prompt is rejected before anything loads
    rc, out, err = _int8conf(capfd, "generate", "--model", tmp_path / "none", "--prompt", prompt)
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        f"int8conf: error: --prompt {prompt!r} is empty or whitespace only (need at least one non-space character)"
    ]


def test_generate_text_header_names_model_arm(capfd, model_dir):
    base = ("generate", "--model", model_dir, "--prompt", "Shall I compare", "--max-new-tokens", 2)
    rc, out, _ = _int8conf(capfd, *base, "--json")
    assert rc == 0
    rec = json.loads(out)
    assert rec["kernel"] == "cpu" and rec["scale_mode"] == "own"
    rc, out, _ = _int8conf(capfd, *base)
    assert rc == 0
    lines = out.splitlines()
    path = rec["kernel_path"]
    assert lines[0] == "[W8A8 own scales, kernel cpu" + (f" ({path})" if path else "") + "]"
    assert "\n".join(lines[1:]) == "Shall I compare" + rec["text"]

    rc, out, _ = _int8conf(capfd, *base, "--scale-mode", "bf16")
    assert rc == 0
    assert out.splitlines()[0] == "[bf16 model]"


# ------------------------------------------------------------ 4. int8conf check --out ""


@pytest.mark.parametrize("out_arg", ["", "  "])
def test_check_empty_out_rejected(capfd, tmp_path, monkeypatch, out_arg):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _int8conf(capfd, "check", "--kernel", "cpu", "--out", out_arg)
    assert rc == 2
    assert err.strip().splitlines() == [f"int8conf: error: --out {out_arg!r} is empty: give a reports directory"]
    assert list(tmp_path.iterdir()) == []  # nothing written into the cwd


def test_check_refused_for_a_corrupt_model_leaves_no_empty_report_folder(capfd, tmp_path):
    """The model directory is read after the report folders are made (new-user trial 14: an empty
    ``int8conf-reports/check/cpu/`` stayed behind); an existing report folder is kept."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{")
    out = tmp_path / "reports"
    rc, _, err = _int8conf(capfd, "check", "--kernel", "cpu", "--model", tmp_path / "m", "--out", out)
    assert rc == 2 and err.strip().splitlines()[-1].endswith("config.json: not valid JSON (JSONDecodeError)")
    assert not out.exists()
    (out / "cpu").mkdir(parents=True)
    rc, _, _ = _int8conf(capfd, "check", "--kernel", "cpu", "--model", tmp_path / "m", "--out", out)
    assert rc == 2 and (out / "cpu").is_dir()
