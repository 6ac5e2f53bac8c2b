"""One word per concept across check, sweep, gate and pytest (issue 42 item 8): ``--inject`` for a fault,
``--no-model`` for skipping C7 / E1, ``--linears`` for captured linear indices; the old spellings still
parse the same, after a one-line deprecation note; one exit-code table for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import build_parser
from conformance.runtime import exit_codes

ROOT = Path(__file__).resolve().parents[3]


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


def test_gate_injects_like_check(capsys):
    from conformance.commands.gate import injection_args, out_dir

    new = build_parser().parse_args(["gate", "--candidate", "cpu", "--incumbent", "int_mm", "--inject", "F4:1%:7"])
    old = build_parser().parse_args(
        ["gate", "--candidate", "cpu", "--incumbent", "int_mm", "--fault", "F4", "--fault-coverage", "1%"]
        + ["--fault-seed", "7"]
    )
    assert injection_args(new) == injection_args(old) == ("F4", "1%", 7)
    assert out_dir(new) == out_dir(old) == Path("int8conf-reports/gate/cpu_F4_1_s7-vs-int_mm")
    assert capsys.readouterr().err.count("is deprecated, use --inject") == 3


def test_every_command_uses_one_exit_code_table():
    from conformance.commands import check
    from conformance.gate import status

    assert (check.EXIT_CONFORMANT, check.EXIT_NOT_CONFORMANT, check.EXIT_BAD_INPUT, check.EXIT_NOT_RUN) == (0, 1, 2, 3)
    assert (status.EXIT_PASS, status.EXIT_BLOCKED, status.EXIT_NOT_COMPARABLE, status.EXIT_INTERNAL) == (0, 1, 2, 4)
    assert exit_codes.exit_code_table() in (ROOT / "README.md").read_text()
