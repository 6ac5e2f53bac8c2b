"""Progress of ``int8conf check`` when stderr is not a terminal (CI logs,
pipes): plain periodic lines; ``--quiet``: none; a terminal: rich's live
status (``conformance.runtime.progress``)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console
from waiting import wait_until

from conformance.cli import main
from conformance.runtime.progress import PlainProgress, suite_progress

FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0"]
ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^int8conf check: cpu: (\d+)/(\d+) fixed cases, \d+\.\d s elapsed: ")


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_plain_lines_every_n_cases_and_the_last_case():
    buf, clock = io.StringIO(), FakeClock()
    p = PlainProgress("k", buf, every_cases=4, every_s=60, clock=clock, heartbeat=False)
    p("k: 10 fixed cases; no captures")
    for i in range(1, 11):
        clock.t += 1.0
        p(f"[{i}/10] synthetic/c{i}: pass")
    p("k: C9 batch_invariance")
    lines = buf.getvalue().splitlines()
    assert lines == [
        "int8conf check: k: 0.0 s elapsed: k: 10 fixed cases; no captures",
        "int8conf check: k: 4/10 fixed cases, 4.0 s elapsed: last case synthetic/c4: pass",
        "int8conf check: k: 8/10 fixed cases, 8.0 s elapsed: last case synthetic/c8: pass",
        "int8conf check: k: 10/10 fixed cases, 10.0 s elapsed: last case synthetic/c10: pass",
        "int8conf check: k: 10/10 fixed cases, 10.0 s elapsed: k: C9 batch_invariance",
    ]


def test_plain_line_after_every_s_seconds_even_between_n_cases():
    buf, clock = io.StringIO(), FakeClock()
    p = PlainProgress("k", buf, every_cases=100, every_s=5, clock=clock, heartbeat=False)
    p("[1/50] a: pass")  # nothing due: 1 case, 0 s
    clock.t += 6
    p("[2/50] b: pass")  # 6 s since the start: due
    clock.t += 1
    assert not p.beat()  # 1 s since the last line
    clock.t += 5
    assert p.beat()  # a long case: the heartbeat prints the state
    assert buf.getvalue().splitlines() == [
        "int8conf check: k: 2/50 fixed cases, 6.0 s elapsed: last case b: pass",
        "int8conf check: k: 2/50 fixed cases, 12.0 s elapsed: last case b: pass",
    ]


def test_heartbeat_thread_prints_while_a_step_runs_and_stops_on_exit():
    buf = io.StringIO()
    with PlainProgress("k", buf, every_s=0.05) as p:
        p("[3/9] slow/case: pass")
        wait_until(lambda: p.lines >= 3, "heartbeat lines")  # while "hung" in one case
    assert not [t for t in threading.enumerate() if t.name == "int8conf-progress"]  # stopped with the context
    assert all(ln.startswith("int8conf check: k: 3/9 fixed cases, ") for ln in buf.getvalue().splitlines())


def test_bad_periods_are_refused():
    with pytest.raises(ValueError, match="every_cases"):
        PlainProgress("k", every_cases=0)
    with pytest.raises(ValueError, match="every_s"):
        PlainProgress("k", every_s=0)


def test_display_is_chosen_by_terminal_and_quiet():
    plain = Console(file=io.StringIO(), force_terminal=False)
    term = Console(file=io.StringIO(), force_terminal=True)
    with suite_progress("k", plain, quiet=True) as cb:
        assert cb is None
    with suite_progress("k", term, quiet=True) as cb:
        assert cb is None
    with suite_progress("k", plain, every_s=60) as cb:
        assert isinstance(cb, PlainProgress)
        cb("[1/1] x: pass")
    assert plain.file.getvalue() == "int8conf check: k: 1/1 fixed cases, 0.0 s elapsed: last case x: pass\n"
    with suite_progress("k", term) as cb:
        assert not isinstance(cb, PlainProgress) and callable(cb)  # rich status.update
        cb("[1/1] x: pass")


def test_check_prints_progress_lines_without_a_tty(tmp_path, capsys):
    # capsys: stdout and stderr are not terminals, as in a CI log
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST, "--examples", "1"]) == 0
    out, err = (x.splitlines() for x in capsys.readouterr())
    counts = [tuple(map(int, m.groups())) for m in map(LINE.match, err) if m]
    # 22 fixed cases (test_check_command_and_plugin): lines at 22 only unless 15 s pass
    assert counts and counts[-1] == (22, 22), err
    assert any(ln.endswith("cpu: C9 batch_invariance") for ln in err), err
    assert all(0 < d <= t == 22 for d, t in counts)
    # the table counts the fixed cases the progress lines count, and the property example beside them
    assert any(ln.endswith(" s): 23 cases (22 fixed + 1 property example)") for ln in out), out


def test_check_quiet_prints_no_progress(tmp_path, capsys):
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST, "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "int8conf check:" not in cap.err + cap.out
    assert "conformance.md" in cap.out  # the result itself is still printed


def test_check_subprocess_piped_prints_plain_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "check", "--kernel", "cpu", "--out", str(tmp_path), *FAST],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if LINE.match(ln)]
    assert lines and "22/22 fixed cases" in lines[-2], r.stderr  # last: the C9 step line
    assert "\r" not in r.stderr and "\x1b[" not in r.stderr  # no live-display codes
