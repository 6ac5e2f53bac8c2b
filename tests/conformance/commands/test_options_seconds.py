"""Timeouts and time budgets: finite seconds > 0, one error line otherwise."""

import pytest

from conformance.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["gate", "--candidate", "cpu", "--incumbent", "cpu", "--timeout", "inf"],
        ["gate", "--candidate", "cpu", "--incumbent", "cpu", "--timeout", "nan"],
        ["study", "pow2", "--time-budget", "-5", "--report-only"],
        ["study", "pow2", "--time-budget", "0", "--report-only"],
        # a kernel call's limit: under a second would fail a correct kernel as hung
        ["check", "--kernel", "cpu", "--timeout", "0.001"],
        ["gate", "--candidate", "cpu", "--incumbent", "cpu", "--timeout", "1e-9"],
        # more than the OS's waits take (OverflowError deep in the run before)
        ["check", "--kernel", "cpu", "--timeout", "2200000"],
        ["replay", ".", "--timeout", "1e9"],
        ["study", "pow2", "--time-budget", "1e300", "--report-only"],
    ],
)
def test_non_finite_or_non_positive_seconds_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("expected seconds > 0" in err or "expected seconds >= 1" in err) and "Traceback" not in err


def test_finite_positive_seconds_are_accepted():
    from reference.command_line import positive_seconds

    assert positive_seconds("0.5") == 0.5 and positive_seconds("300") == 300.0
