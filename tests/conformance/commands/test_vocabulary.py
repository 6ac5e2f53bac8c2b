"""One word per concept across check, sweep, gate and pytest (issue 42 item 8): ``--inject`` for a fault,
``--no-model`` for skipping C7 / E1, ``--linears`` for captured linear indices; the old spellings still
parse the same, after a one-line deprecation note; one exit-code table for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import build_parser
from conformance.runtime import exit_codes

ROOT = Path(__file__).resolve().parents[3]

pytest_plugins = ["pytester"]


def _ns(argv):
    return vars(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "new, old, note",
    [
        (["--inject", "F4,F8"], ["--faults", "F4,F8"], "--faults is deprecated, use --inject"),
        (["--no-model"], ["--no-model-checks"], "--no-model-checks is deprecated, use --no-model"),
        (["--linears", "0,3"], ["--layers", "0,3"], "--layers is deprecated, use --linears"),
    ],
)
def test_sweep_old_spellings_parse_as_the_new_ones(capsys, new, old, note):
    base = ["sweep", "--kernel", "cpu"]
    want = _ns(base + new)
    assert capsys.readouterr().err == ""
    assert _ns(base + old) == want
    assert capsys.readouterr().err == f"int8conf sweep: note: {note}\n"


@pytest.mark.parametrize(
    "command", [["check", "--kernel", "cpu"], ["gate", "--candidate", "cpu", "--incumbent", "cpu"]]
)
def test_the_old_no_sweep_parses_as_no_tile_edges_after_a_note(capsys, command):
    """ "sweep" names the fault-injection sweep alone: the tile-edge shapes are skipped by ``--no-tile-edges``;
    ``--no-sweep`` still works, after the deprecation note."""
    want = _ns(command + ["--no-tile-edges"])
    assert want["no_tile_edges"] is True and "no_sweep" not in want and capsys.readouterr().err == ""
    assert _ns(command)["no_tile_edges"] is False
    assert _ns(command + ["--no-sweep"]) == want
    note = "--no-sweep is deprecated, use --no-tile-edges"
    assert capsys.readouterr().err == f"int8conf {command[0]}: note: {note}\n"
    assert "--no-sweep" not in _help(command[0], "--no-tile-edges")  # hidden from --help


def test_gate_injects_like_check(capsys):
    from conformance.commands.gate import injection_args, out_dir
    from faults.spec import make_injection

    new = build_parser().parse_args(["gate", "--candidate", "cpu", "--incumbent", "int_mm", "--inject", "F4:1%:7"])
    old = build_parser().parse_args(
        ["gate", "--candidate", "cpu", "--incumbent", "int_mm", "--fault", "F4", "--fault-coverage", "1%"]
        + ["--fault-seed", "7"]
    )
    assert injection_args(new) == injection_args(old) == make_injection("F4", "1%", 7)
    assert out_dir(new) == out_dir(old) == Path("int8conf-reports/gate/cpu_F4_1_s7-vs-int_mm")
    assert capsys.readouterr().err.count("is deprecated, use --inject") == 3


def test_every_command_uses_one_exit_code_table():
    from conformance.commands import check
    from conformance.gate import status

    assert (check.EXIT_CONFORMANT, check.EXIT_NOT_CONFORMANT, check.EXIT_BAD_INPUT, check.EXIT_NOT_RUN) == (0, 1, 2, 3)
    assert (status.EXIT_PASS, status.EXIT_BLOCKED, status.EXIT_NOT_COMPARABLE, status.EXIT_INTERNAL) == (0, 1, 2, 4)
    assert exit_codes.exit_code_table() in (ROOT / "README.md").read_text()


def _help(command: str, option: str) -> str:
    """The help text of ``int8conf <command> <option>`` as given to argparse (unwrapped)."""
    sub = next(a for a in build_parser()._actions if a.choices and command in a.choices).choices[command]
    return next(a.help for a in sub._actions if option in a.option_strings)


def test_default_output_folders_in_help_are_the_ones_the_code_uses():
    """before, gate --help said reports/gate/..., bench --help reports/bench/<device>/."""
    from conformance.commands.bench import DEFAULT_GPU_OUT
    from conformance.runtime.output_dirs import REPORTS

    assert f"{REPORTS}/gate/<candidate>-vs-<incumbent>" in _help("gate", "--out")
    for option in ("--gpu", "--main-job", "--json"):
        assert f"default {DEFAULT_GPU_OUT}>/<device>/" in _help("bench", option), option
        assert " reports/bench" not in _help("bench", option)


def test_fault_ids_in_help_come_from_the_catalogue(pytester):
    """before, --int8conf-inject said F1..F9 while check --inject said F1..F10."""
    from faults.catalogue import FAULTS
    from faults.spec import fault_choices

    ids = f"FAULT is {FAULTS[0].id}..{FAULTS[-1].id} or its name"
    assert ids in _help("check", "--inject") and fault_choices() in _help("gate", "--inject")
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--help")
    assert f"{FAULTS[0].id}..{FAULTS[-1].id}" in " ".join(x.strip() for x in r.outlines)


@pytest.mark.parametrize(
    "command", [["check", "--kernel", "cpu"], ["gate", "--candidate", "cpu", "--incumbent", "cpu"]]
)
def test_captures_and_no_captures_together_are_a_usage_error(tmp_path, capsys, command):
    """before, --captures X --no-captures ran silently without captures."""
    from conformance.cli import main

    rc = main([*command, "--captures", str(tmp_path), "--no-captures", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert (
        rc == 2 and err == "int8conf: error: --captures DIR and --no-captures contradict each other: give one of them\n"
    )
    assert not (tmp_path / "o").exists()


def test_readme_says_what_exit_3_the_model_check_timeout_and_a_kernels_prints_are():
    """exit 3 is a kernel not callable here at all (one that crashes / raises on every case exits 1);
    P6: the C7 / E1 floor beside --timeout, in the README and the plugin's help; P11: where a kernel's prints go."""
    readme = (ROOT / "README.md").read_text()
    assert exit_codes.EXIT_CODES[exit_codes.NOT_RUN].startswith("not run: the kernel could not be called here at all")
    assert "| 3 | not run: the kernel could not be called here at all, every case not runnable" in readme
    text = " ".join(readme.split())
    assert (
        "`--int8conf-timeout=S`, default 600 s; C7 and E1 at least 1800 s; after a first hung case each later" in text
    )
    assert "A kernel's own prints (stdout, stderr) go to that child's log in a temporary folder" in text


def test_plugin_timeout_help_names_the_model_check_floor(pytester):
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--help")
    text = " ".join(" ".join(x.split()) for x in r.outlines)
    assert "C7 and E1, whole-model replays, get at least 1800 s" in text
