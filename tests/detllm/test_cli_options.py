"""bad ``detllm`` options found by a new-user pass: one line naming the
option and the problem, exit code 2, never a traceback, and checked before
any model is loaded.

1. ``bench --batches 0|-1|abc|1,,2|''`` (tracebacks / silently the default);
2. ``bench --prompt-len 0|-3``, ``--new-tokens 0|-1``, ``--kernels ''``;
3. ``bench --device cuda`` without CUDA (printed "skipped", exit 0);
4. ``prepare --calib-windows 0``, ``--calib-len 0``, ``--out`` not creatable
   or a file, ``--alpha`` outside [0, 1], ``--max-position 0``;
5. ``generate --device cpu:1`` (accepted; now ``validate_device`` as in
   ``int8conf check``);
6. ``demo --context-tokens -5``;
7. ``perplexity --windows 0`` (named an internal function);
8. an artifact without ``tensors_sha256`` ("does not match ... None").
"""

from __future__ import annotations

import json
import shutil
import sys
from types import SimpleNamespace

import pytest
import torch

from detllm import artifact as A
from detllm import bench
from detllm import cli as dcli
from reference.errors import CheckpointError, Int8confError, OperandError


def _argparse_exit(capfd, *argv) -> str:
    """argparse rejects ``argv``: SystemExit(2), no traceback; the last stderr line."""
    with pytest.raises(SystemExit) as ei:
        dcli.main([str(a) for a in argv])
    assert ei.value.code == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def _one_line_error(capfd, *argv) -> str:
    """A command refuses ``argv``: rc 2 and exactly one stderr line."""
    rc = dcli.main([str(a) for a in argv])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from detllm.prepare import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("cli_options") / "model", seed=3)


# ------------------------------------------------------------ 1. bench --batches


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1,,2", "", "1,0", "2.5"])
def test_bench_batches_must_be_integers_at_least_one(capfd, bad):
    line = _argparse_exit(capfd, "bench", f"--batches={bad}")
    assert line == (f"detllm bench: error: argument --batches: expected comma-separated integers >= 1, got {bad!r}")


def test_bench_batches_parse_to_a_list():
    args = dcli.build_parser().parse_args(["bench", "--batches", "1, 8,32"])
    assert args.batches == [1, 8, 32]
    assert dcli.build_parser().parse_args(["bench"]).batches is None  # default chosen by the bench


# ------------------------------------------------------------ 2. bench counts, --kernels


@pytest.mark.parametrize(
    "opt,bad", [("--prompt-len", 0), ("--prompt-len", -3), ("--new-tokens", 0), ("--new-tokens", -1)]
)
def test_bench_token_counts_must_be_positive(capfd, opt, bad):
    line = _argparse_exit(capfd, "bench", f"{opt}={bad}")
    assert line == f"detllm bench: error: argument {opt}: expected an integer >= 1, got {bad}"


@pytest.mark.parametrize("bad", ["", "int_mm,,triton", ","])
def test_bench_kernels_must_name_kernels(capfd, bad):
    line = _argparse_exit(capfd, "bench", f"--kernels={bad}")
    assert line == f"detllm bench: error: argument --kernels: expected a comma-separated list of names, got {bad!r}"


def test_bench_context_overflow_names_the_options():
    art = SimpleNamespace(config={"model": {"max_position": 64}})
    bench.check_context(SimpleNamespace(prompt_len=32, new_tokens=31), art)  # 32 + 31 + 1 = 64: fits
    with pytest.raises(
        OperandError,
        match=r"^--prompt-len 32 \+ --new-tokens 32 \(\+1 warm-up\) = 65 tokens "
        r"exceed the model's context of 64 tokens$",
    ):
        bench.check_context(SimpleNamespace(prompt_len=32, new_tokens=32), art)


# ------------------------------------------------------------ 3. bench --device


def _no_model_loads(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the device must be refused before any model is loaded")

    monkeypatch.setattr(bench, "bench_cpu", boom)
    monkeypatch.setattr(bench, "bench_shapes", boom)
    from detllm import bench_fast

    monkeypatch.setattr(bench_fast, "run", boom)


@pytest.mark.parametrize("extra", [[], ["--fast"], ["--shapes", "tiny"], ["--hash-check"]])
def test_bench_cuda_without_cuda_is_the_generate_error(capfd, monkeypatch, tmp_path, extra):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gen = _one_line_error(capfd, "generate", "--device", "cuda", "--artifact", tmp_path / "none", "--ids", "1")
    assert gen == "detllm: error: --device 'cuda': CUDA requested but torch.cuda.is_available() is False"
    _no_model_loads(monkeypatch)
    assert _one_line_error(capfd, "bench", "--device", "cuda", *extra) == gen


def test_bench_fast_run_refuses_cuda_without_cuda(monkeypatch):
    from detllm import bench_fast

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Int8confError, match="CUDA requested"):
        bench_fast.run(SimpleNamespace(device="cuda"))


def test_bench_bad_device_types(capfd, monkeypatch):
    _no_model_loads(monkeypatch)
    assert (
        _one_line_error(capfd, "bench", "--device", "cpu:1")
        == "detllm: error: --device 'cpu:1': there is one CPU device; use 'cpu'"
    )
    assert _one_line_error(capfd, "bench", "--device", "tpu").startswith("detllm: error: --device 'tpu':")


# ------------------------------------------------------------ 4. prepare


@pytest.mark.parametrize(
    "opt,bad",
    [
        ("--calib-windows", 0),
        ("--calib-windows", -2),
        ("--calib-len", 0),
        ("--max-position", 0),
        ("--max-position", -1),
    ],
)
def test_prepare_counts_must_be_positive(capfd, tmp_path, opt, bad):
    line = _argparse_exit(capfd, "prepare", "--out", tmp_path / "art", f"{opt}={bad}")
    assert line == f"detllm prepare: error: argument {opt}: expected an integer >= 1, got {bad}"
    assert not (tmp_path / "art").exists()


@pytest.mark.parametrize("bad", ["-1", "1.5", "nan", "x"])
def test_prepare_alpha_must_be_in_unit_interval(capfd, tmp_path, bad):
    line = _argparse_exit(capfd, "prepare", "--out", tmp_path / "art", f"--alpha={bad}")
    assert line == f"detllm prepare: error: argument --alpha: expected a number in [0, 1], got {bad!r}"


def test_prepare_alpha_bounds_and_help_are_documented():
    p = dcli.build_parser()
    for ok in ("0", "1", "0.5"):
        assert p.parse_args(["prepare", "--out", "x", "--alpha", ok]).alpha == float(ok)
    sp = dict(p._subparsers._group_actions[0].choices)["prepare"]
    helps = {a.dest: a.help for a in sp._actions}
    assert "[0, 1]" in helps["alpha"]
    assert ">= 1" in helps["max_position"] and ">= 1" in helps["calib_len"] and ">= 1" in helps["calib_windows"]


def test_prepare_out_is_a_file(capfd, tmp_path, tiny_model):
    f = tmp_path / "a_file"
    f.write_text("x")
    line = _one_line_error(capfd, "prepare", "--model", tiny_model, "--out", f)
    assert line == f"detllm: error: --out {f}: exists and is not a directory"
    assert f.read_text() == "x"


def test_prepare_out_cannot_be_created(capfd, tmp_path, tiny_model):
    f = tmp_path / "a_file"
    f.write_text("x")
    line = _one_line_error(capfd, "prepare", "--model", tiny_model, "--out", f / "sub")
    assert line.startswith(f"detllm: error: --out {f / 'sub'}: cannot create artifact directory (")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_prepare_out_under_proc(capfd, tiny_model):
    line = _one_line_error(capfd, "prepare", "--model", tiny_model, "--out", "/proc/nope")
    assert line.startswith("detllm: error: --out /proc/nope: cannot create artifact directory (")


# ------------------------------------------------------------ 5. generate / perplexity --device


@pytest.mark.parametrize("cmd", ["generate", "perplexity"])
def test_cpu_index_refused_like_int8conf_check(capfd, tmp_path, cmd):
    from conformance.kernels.runner import validate_device

    with pytest.raises(Int8confError) as ei:
        validate_device("cpu:1")
    # the artifact does not exist: the device is refused first
    line = _one_line_error(capfd, cmd, "--device", "cpu:1", "--artifact", tmp_path / "none")
    assert line == f"detllm: error: {ei.value}"
    assert line == "detllm: error: --device 'cpu:1': there is one CPU device; use 'cpu'"


# ------------------------------------------------------------ 6. demo --context-tokens


@pytest.mark.parametrize("bad", [-5, -2])
def test_demo_context_tokens_only_minus_one_is_negative(capfd, bad):
    line = _argparse_exit(capfd, "demo", f"--context-tokens={bad}")
    assert line == f"detllm demo: error: argument --context-tokens: expected an integer >= -1, got {bad}"


def test_demo_context_tokens_documented_values_parse():
    p = dcli.build_parser()
    for ok in (-1, 0, 64):
        assert p.parse_args(["demo", "--context-tokens", str(ok)]).context_tokens == ok


# ------------------------------------------------------------ 7. perplexity --windows


@pytest.mark.parametrize("bad", [0, -1])
def test_perplexity_windows_named(capfd, bad):
    line = _argparse_exit(capfd, "perplexity", f"--windows={bad}")
    assert line == f"detllm perplexity: error: argument --windows: expected an integer >= 1, got {bad}"


# ------------------------------------------------------------ 8. artifact fields


@pytest.fixture(scope="module")
def tiny_art(tmp_path_factory, tiny_model):
    from detllm.prepare import PrepareOptions, prepare

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return prepare(
            tiny_model,
            tmp_path_factory.mktemp("cli_options_art") / "art",
            PrepareOptions(calib_windows=2, calib_len=16, calib_source="random"),
        )
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("field", ["tensors_sha256", "digest"])
def test_artifact_missing_integrity_field_is_named(capfd, tiny_art, tmp_path, field):
    d = tmp_path / "art"
    shutil.copytree(tiny_art.path, d)
    cfg = json.loads((d / A.CONFIG_FILE).read_text())
    del cfg[field]
    (d / A.CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as ei:
        A.load_artifact(d)
    assert str(ei.value) == f"{d / A.CONFIG_FILE}: field {field!r} is missing (re-run `detllm prepare`)"
    line = _one_line_error(capfd, "generate", "--artifact", d, "--ids", "1,2", "-n", "1", "--no-guard")
    assert line == f"detllm: error: {ei.value}"


def test_perplexity_more_windows_than_held_out_text_names_the_options(capfd, tiny_art, tiny_model, tmp_path):
    from reference.model.assets import default_model_dir

    md = tmp_path / "model"
    shutil.copytree(tiny_model, md)
    shutil.copy(default_model_dir() / "tokenizer.json", md / "tokenizer.json")
    line = _one_line_error(
        capfd, "perplexity", "--windows", 10**9, "--length", 2, "--artifact", tiny_art.path, "--model", md
    )
    assert line.startswith(f"detllm: error: --windows {10**9} x --length 2: n={10**9} exceeds the ")
    assert "eval_windows" not in line


@pytest.mark.parametrize("bad", [1, 3])
def test_demo_context_tokens_too_short_for_the_table(capfd, tmp_path, bad):
    # the artifact does not exist: the length is refused first
    line = _one_line_error(capfd, "demo", "--context-tokens", bad, "--artifact", tmp_path / "none")
    assert line == (
        f"detllm: error: --context-tokens {bad}: the whole-context table needs at least 4 tokens "
        f"(-1: the model's maximum, 0: skip)"
    )


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"calib_windows": 0}, "calib_windows"),
        ({"calib_len": 0}, "calib_len"),
        ({"max_position": 0}, "max_position"),
    ],
)
def test_prepare_api_refuses_bad_options_before_loading(tmp_path, kw, field):
    from detllm.prepare import PrepareOptions, prepare

    # the model does not exist: the options are refused first (no KeyError / ZeroDivisionError later)
    with pytest.raises(OperandError, match=rf"^PrepareOptions\.{field}="):
        prepare(tmp_path / "no_model", tmp_path / "art", PrepareOptions(**kw))
    assert not (tmp_path / "art").exists()


def test_name_lists_lose_the_blanks_around_names():
    from reference.command_line import name_list

    assert name_list("int_mm, triton") == "int_mm,triton"
    assert name_list(" cpu ") == "cpu"


@pytest.mark.parametrize("cmd", ["generate", "demo"])
def test_max_new_tokens_negative_names_the_option(capfd, cmd):
    line = _argparse_exit(capfd, cmd, "-n", "-1")
    assert line == (f"detllm {cmd}: error: argument -n/--max-new-tokens: expected an integer >= 0, got -1")


# ------------------------------------------- 9. a kernel whose int_mm raises
def test_generate_with_a_raising_int_mm_is_one_line_exit_2(capfd, tmp_path, monkeypatch):
    """New-user pass 2026-12-01c: a wrong dtype/shape from ``int_mm`` was one
    line, but an exception from it reached the user as a traceback."""
    (tmp_path / "raising_kern.py").write_text(
        "import torch\n"
        "from conformance.kernels.loader import declare\n"
        "def _im(a, b):\n"
        "    raise RuntimeError('int_mm boom')\n"
        "@declare(contract='cutlass', int_mm=_im)\n"
        "def k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):\n"
        "    raise RuntimeError('unused')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = dcli.main(["generate", "--kernel", "raising_kern:k", "-n", "2"])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0] == (
        "detllm: error: kernel 'raising_kern:k' int_mm raised RuntimeError: int_mm boom (M=11, K=384, N=640)"
    ), err[0]


def test_generate_takes_an_undeclared_int_mm(tmp_path, monkeypatch, capsys):
    """detllm uses only a kernel's int_mm: a plain ``(a, b) -> int32`` function needs no epilogue declaration
    (issue 42 item 9); a declared kernel still resolves through the registry."""
    from detllm.engine import resolve_int_mm

    (tmp_path / "plain_acc.py").write_text(
        "import torch\n\ndef my_int_mm(a, b):\n    return (a.to(torch.int64) @ b.to(torch.int64).t()).to(torch.int32)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn, label = resolve_int_mm("plain_acc:my_int_mm")
    assert label == "plain_acc:my_int_mm" and fn.__name__ == "my_int_mm"
    assert resolve_int_mm("cpu")[1] == "cpu"
    rc = dcli.main(["generate", "--kernel", "plain_acc:my_int_mm", "--max-new-tokens", "2", "--prompt", "Shall I"])
    out = capsys.readouterr().out
    assert rc == 0 and "kernel plain_acc:my_int_mm" in out


def test_detllm_prints_no_third_party_notice(capfd, monkeypatch):
    """detllm's output carries no third-party notice (issue 42 item 9): its CLI quiets torchao's and torch pytree's
    import-time loggers as int8conf's does, and the float model loads without transformers' progress bar."""
    import logging

    from conformance.runtime.import_noise import QUIET_LOGGERS
    from detllm.generate import load_float_model
    from reference.model.assets import default_model_dir

    for name in QUIET_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    with pytest.raises(SystemExit):
        dcli.main(["--help"])
    assert all(logging.getLogger(n).level == lvl for n, lvl in QUIET_LOGGERS.items())
    capfd.readouterr()
    load_float_model(default_model_dir(), torch.float32)
    err = capfd.readouterr().err
    assert "Loading weights" not in err and err == ""
