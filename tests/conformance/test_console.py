"""Tables printed to a pipe or a CI log (not a terminal) are at most 120 columns wide (issue 42 item 9: they were
800-1,400), their cells wrapped by rich at word boundaries, every word whole (``reference.command_line``)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from conformance.cli import main

LONG = "a long cell " + " ".join(f"word{i}" for i in range(60))  # 63 words: > 300 columns


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """The width off a terminal is ``$COLUMNS`` when set (a CI shell may export one): these tests check the default."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _whole_on_one_line(text: str, out: str) -> bool:
    """Every word of ``text`` whole in ``out``, in order, and no table line of ``out`` over 120 columns (text lines,
    a headline or a report path, are not wrapped: ``reference.command_line.make_console``)."""
    table = [line for line in out.splitlines() if line[:1] and "\u2500" <= line[0] <= "\u257f"]
    assert table, out
    assert max(map(len, table)) <= 120, max(table, key=len)
    words = [w for line in out.splitlines() for w in line.replace("│", " ").split()]
    it = iter(words)
    return all(any(w == x for x in it) for w in text.split())


def test_console_is_wide_and_unwrapped_off_a_terminal_and_terminal_width_on_one(monkeypatch):
    from reference.command_line import WIDE, make_console

    monkeypatch.delenv("COLUMNS", raising=False)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    pipe = make_console(file=io.StringIO())
    assert (pipe.is_terminal, pipe.width, pipe.soft_wrap) == (False, WIDE, True) and WIDE == 120
    monkeypatch.setenv("COLUMNS", "90")  # a CI's own width wins
    assert make_console(file=io.StringIO()).width == 90
    tty = make_console(file=Tty())
    assert tty.is_terminal and tty.width < WIDE and tty.soft_wrap is False


def test_check_table_rows_stay_whole_in_a_pipe(tmp_path, capsys):
    assert (
        main(
            [
                "check",
                "--kernel",
                "cpu",
                "--out",
                str(tmp_path),
                "--no-tile-edges",
                "--no-captures",
                "--no-model",
                "--examples",
                "0",
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "cpu" / "conformance.json").read_text())
    c9 = [c["summary"] for c in doc["checks"] if c["check_id"] == "C9"][0]
    assert len(c9) > 100  # longer than an 80-column table's summary cell
    for c in doc["checks"]:
        assert _whole_on_one_line(c["summary"], out), (c["check_id"], out)
    assert _whole_on_one_line(doc["overall"]["summary"], out)


def test_faults_table_rows_stay_whole_in_a_pipe(capsys):
    from conformance.kernels.registry import get_kernel
    from faults.describe import fault_rows

    assert main(["faults", "--kernel", "cpu"]) == 0
    out = capsys.readouterr().out
    rows = fault_rows(get_kernel("cpu").contract)
    assert len(rows) == 9 and max(len(r["with_bias"]) for r in rows) > 40
    for r in rows:
        assert _whole_on_one_line(f"{r['no_bias']}", out), (r["id"], out)


def test_bench_table_rows_stay_whole_in_a_pipe(capsys):
    from conformance.bench.gemm import render

    render(
        pd.DataFrame(
            [
                {
                    "kernel": "cpu",
                    "device": "cpu",
                    "M": 512,
                    "K": 2048,
                    "N": 6144,
                    "layer": "q_proj",
                    "ms": 1.0,
                    "GMAC/s": 2.0,
                    "best GMAC/s": 3.0,
                    "x reference": 1.5,
                    "note": LONG,
                }
            ]
        )
    )
    assert _whole_on_one_line(LONG, capsys.readouterr().out)


def test_detllm_tables_rows_stay_whole_in_a_pipe(capsys):
    from detllm.cli import _print_table

    _print_table("t", ["a", "b"], [["x", LONG]])
    assert _whole_on_one_line(LONG, capsys.readouterr().out)
