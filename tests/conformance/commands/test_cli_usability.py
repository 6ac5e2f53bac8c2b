"""Usability defects of issue 8 (deliverable 5): unknown options, kernels from
the current folder, ``--device cpu:1``, ``--out`` doubling, help text."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import build_parser, main, strip_markup

#: The cheapest check run (synthetic cases only; not the default suite).
FAST = ["--no-tile-edges", "--no-captures", "--examples", "0", "--no-model", "-q"]


def test_misspelled_option_is_named_not_a_missing_kernel(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--kernal", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "int8conf check: error: unknown option --kernal (did you mean --kernel?)"
    with pytest.raises(SystemExit):
        main(["check", "--kernel", "cpu", "--no-modle"])
    assert "unknown option --no-modle (did you mean --no-model" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # still: a missing --kernel is reported as such
        main(["check"])
    assert "--kernel" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the list names what --help shows: no deprecated spelling (--no-sweep)
        main(["check", "--kernel", "cpu", "--bogus-flag"])
    takes = capsys.readouterr().err.strip().splitlines()[-1].split("check takes: ")[1].split(", ")
    assert "--no-tile-edges" in takes and "--no-sweep" not in takes


def test_misspelled_command_is_named_not_its_options(capsys):
    """New-user pass 2026-12-01c: ``int8conf chek --kernel=cpu`` said
    "unknown option --kernel; chek takes: --help, -h"."""
    with pytest.raises(SystemExit) as e:
        main(["chek", "--kernel=cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("int8conf: error: argument COMMAND: invalid choice: 'chek' (choose from ")
    assert "'check'" in err


def test_cpu_device_index_is_an_error(capsys):
    assert main(["check", "--kernel", "cpu", "--device", "cpu:1", *FAST]) == 2
    assert capsys.readouterr().err.strip() == ("int8conf: error: --device 'cpu:1': there is one CPU device; use 'cpu'")


def test_capture_device_is_checked_before_any_work(capsys, tmp_path):
    assert main(["capture", "--device", "cpu:1", "--out", str(tmp_path / "cap")]) == 2
    assert capsys.readouterr().err.strip() == ("int8conf: error: --device 'cpu:1': there is one CPU device; use 'cpu'")
    assert not (tmp_path / "cap").exists()


def test_out_ending_in_the_kernel_name_is_not_doubled(tmp_path):
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path / "cpu"), *FAST]) == 0
    assert (tmp_path / "cpu" / "conformance.json").is_file()
    assert not (tmp_path / "cpu" / "cpu").exists()
    from conformance.suite.setup import report_root

    assert report_root(tmp_path / "run1", "cpu") == tmp_path / "run1"  # -> run1/cpu/


def test_import_path_kernel_found_from_its_own_folder(tmp_path, monkeypatch):
    (tmp_path / "my_local_kernel.py").write_text(
        "import torch\n"
        "from reference.contract import CUTLASS_STYLE\n"
        "from reference.epilogue import reference_scaled_mm\n"
        "def fn(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):\n"
        "    return reference_scaled_mm(a, b, scale_a, scale_b, CUTLASS_STYLE, bias, out_dtype)\n"
        "fn.int8conf_contract = 'cutlass'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_local_kernel", raising=False)
    assert main(["check", "--kernel", "my_local_kernel:fn", "--out", "r", *FAST]) == 0
    doc = json.loads((tmp_path / "r" / "my_local_kernel_fn" / "conformance.json").read_text())
    assert doc["overall"]["verdict"] == "pass"


def _all_parsers(parser):
    yield "int8conf", parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield name, sp


def test_help_has_no_docstring_markup_and_every_option_has_help():
    assert strip_markup("``--out`` and :func:`x.y`") == "--out and x.y"
    for name, p in _all_parsers(build_parser()):
        text = p.format_help()
        assert "``" not in text and ":func:" not in text, name
        missing = [a.option_strings for a in p._actions if a.option_strings and not a.help]
        assert not missing, (name, missing)


#: what a command loads when it runs, never while the CLI registers its subcommands (the ``faults`` package is
#: not one: ``--inject``'s help names the catalogue's fault ids, 30 ms of import once torch is loaded)
COMMAND_BODIES = (
    "pandas",
    "hypothesis",
    "yaml",
    "predictions",
    "detllm",
    "conformance.bench",
    "conformance.cases",
    "conformance.checks",
    "conformance.gate.run",
    "conformance.scoreboard",
    "conformance.study",
    "conformance.suite",
    "conformance.sweep",
)


def _modules_after(code: str) -> list:
    """The modules a fresh interpreter holds after running ``code``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    r = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    return r.stdout.split()


def test_registering_the_commands_loads_no_command_body():
    """``int8conf --help`` and every CLI process start by registering every subcommand: none may
    import its work (the suite, the sweep, faults, pandas...) before it runs."""
    loaded = _modules_after("from conformance.cli import build_parser; build_parser()")
    assert "conformance.commands.check" in loaded and "conformance.commands.sweep" in loaded
    assert [m for m in loaded if m.startswith(tuple(f"{b}." for b in COMMAND_BODIES)) or m in COMMAND_BODIES] == []


def test_the_suite_loads_hypothesis_and_pandas_only_to_use_them():
    """The suite and its environment record, imported and taken as every check / plugin process
    does: hypothesis waits for the property test, pandas for a markdown report."""
    loaded = _modules_after(
        "import conformance.suite.run, conformance.suite.report; "
        "from conformance.runtime.environment import environment; environment()"
    )
    assert "conformance.suite.plan" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("hypothesis", "pandas")] == []


def test_detllm_kernel_help_says_only_int_mm_is_used(capsys):
    from detllm.cli import build_parser as detllm_parser

    for name, p in _all_parsers(detllm_parser()):
        missing = [a.option_strings for a in p._actions if a.option_strings and not a.help]
        assert not missing, (name, missing)
        for a in p._actions:
            if "--kernel" in a.option_strings:
                assert "int_mm" in a.help and "NOT used" in a.help, name
