"""Seeds out of range (negative, >= 2**63, 2**64, not an integer) are refused
with one line naming the seed, by every command that takes one and by the
pytest plugin's ``--inject``, before any work starts (reference.seeds)."""

from __future__ import annotations

import pytest
import torch  # noqa: F401 -- imported before pytester's in-process run (see test_inject_cli_and_plugin)

from conformance.cli import main as int8conf_main
from reference.errors import SeedError
from reference.seeds import MAX_SEED, check_seed

pytest_plugins = ["pytester"]

TOO_BIG = str(2**64)  # 18446744073709551616


def test_check_seed_accepts_exactly_the_int64_range():
    assert MAX_SEED == 9223372036854775807
    assert check_seed(0) == 0 and check_seed(" 7 ") == 7
    assert check_seed(str(MAX_SEED)) == MAX_SEED
    for bad, shown in (
        (MAX_SEED + 1, "9223372036854775808 is out of range"),
        (2**64, "18446744073709551616 is out of range"),
        ("-1", "seed -1 is out of range"),
        ("x", "seed 'x' is not an integer"),
        (True, "True is not an integer"),
        (1.0, "1.0 is not an integer"),
    ):
        with pytest.raises(SeedError) as e:
            check_seed(bad)
        assert shown in str(e.value) and "\n" not in str(e.value)


def _one_line_exit(capsys, argv) -> str:
    """Exit 2 with one error line (argparse: its usage lines, then the error line)."""
    parsed = True
    try:
        rc = int8conf_main(argv)
    except SystemExit as e:  # argparse type errors
        rc, parsed = e.code, False
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not any("Traceback" in x for x in err)
    assert len(err) == 1 or (not parsed and err[0].startswith("usage:")), err
    return err[-1]


@pytest.mark.parametrize("seed", [TOO_BIG, "-1"])
def test_commands_refuse_a_seed_out_of_range(capsys, tmp_path, seed):
    line = _one_line_exit(
        capsys, ["check", "--kernel", "cpu", "--inject", f"F4:all:{seed}", "--no-model", "--out", str(tmp_path)]
    )
    assert line == (
        f"int8conf: error: --inject 'F4:all:{seed}': seed {seed} is out of range: seeds are integers in [0, 2**63 - 1]"
    )
    assert not any(tmp_path.iterdir())  # refused before any report was written
    # the injected-name form of --kernel
    line = _one_line_exit(capsys, ["check", "--kernel", f"cpu+F4@all#s{TOO_BIG}", "--no-model", "--out", str(tmp_path)])
    assert f"seed {TOO_BIG} is out of range" in line
    line = _one_line_exit(capsys, ["gate", "--candidate", "cpu", "--fault-seed", seed])
    assert line.endswith(f"argument --fault-seed: seed {seed} is out of range: seeds are integers in [0, 2**63 - 1]")
    line = _one_line_exit(capsys, ["study", "--seed", seed])
    assert line.endswith(f"argument --seed: seed {seed} is out of range: seeds are integers in [0, 2**63 - 1]")
    line = _one_line_exit(capsys, ["sweep", "--kernel", "cpu", "--seeds", f"0,{seed}", "--out", str(tmp_path / "sw")])
    assert line == (f"int8conf: error: --seeds: seed {seed} is out of range: seeds are integers in [0, 2**63 - 1]")
    assert not (tmp_path / "sw").exists()


def test_detllm_demo_refuses_a_seed_out_of_range(capsys):
    from detllm import cli as dcli

    with pytest.raises(SystemExit) as e:
        dcli.main(["demo", "--seed", TOO_BIG])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"argument --seed: seed {TOO_BIG} is out of range: seeds are integers in [0, 2**63 - 1]")


def test_pytest_inject_refuses_a_seed_out_of_range(pytester):
    r = pytester.runpytest_inprocess("--kernel=cpu", f"--inject=F4:all:{TOO_BIG}")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    text = "\n".join(r.outlines + r.errlines)
    assert (
        f"int8conf: --inject 'F4:all:{TOO_BIG}': seed {TOO_BIG} is out of range" in text
    ) and "Traceback" not in text
