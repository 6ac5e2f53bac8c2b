"""``--threads`` of ``int8conf check`` and ``--int8conf-threads`` of the
pytest plugin: torch's CPU threads (issue 31 item 8)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance.cli import main

FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0", "-q"]


def test_torch_threads_resolution():
    """Issue 31 item 8: ``check --threads`` / ``--int8conf-threads`` and the
    default: the cores shared by the workers, never more than the cores."""
    from conformance.runtime.threads import torch_threads
    from reference.errors import Int8confError

    assert torch_threads(None, 16, 1, {}) == 16  # one process: every core it may use
    assert torch_threads(None, 16, 4, {}) == 4  # xdist: its share
    assert torch_threads(None, 16, 15, {}) == 1
    assert torch_threads(None, 2, 3, {}) == 1  # more workers than cores: one each
    assert torch_threads(3, 16, 4, {}) == 3  # asked for
    assert torch_threads(2, 2, 1, {"OMP_NUM_THREADS": "8"}) == 2  # the option wins
    assert torch_threads(None, 16, 4, {"OMP_NUM_THREADS": "8"}) is None  # the user's choice
    assert torch_threads(None, 16, 1, {"INT8CONF_WORKER_THREADS": "3"}) == 3
    with pytest.raises(Int8confError) as e:
        torch_threads(4, 2, 1, {})
    assert str(e.value) == "--threads 4: this process may use 2 cores; give at most 2"
    with pytest.raises(Int8confError) as e:
        torch_threads(4, 2, 1, {}, option="--int8conf-threads")
    assert str(e.value) == "--int8conf-threads 4: this process may use 2 cores; give at most 2"
    for bad in ("0", "abc", "-1"):
        with pytest.raises(Int8confError) as e:
            torch_threads(None, 16, 4, {"INT8CONF_WORKER_THREADS": bad})
        assert str(e.value) == f"INT8CONF_WORKER_THREADS must be an integer >= 1, got {bad!r}"


def test_check_threads_option_sets_torch_threads_and_refuses_too_many(tmp_path, capsys, monkeypatch, request):
    import torch

    from conformance.runtime import threads

    calls = []
    real, before = torch.set_num_threads, torch.get_num_threads()
    request.addfinalizer(lambda: real(before))

    def recording(n: int) -> None:  # still sets: a forked case child relies on its set_num_threads(1) (no OpenMP hang)
        calls.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", recording)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("INT8CONF_WORKER_THREADS", raising=False)
    assert main(["check", "--kernel", "cpu", "--threads", "3", "--out", str(tmp_path), *FAST]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "int8conf: error: --threads 3: this process may use 2 cores; give at most 2"
    ]
    assert calls == [] and not (tmp_path / "cpu").exists()
    assert main(["check", "--kernel", "cpu", "--threads", "1", "--out", str(tmp_path), *FAST]) == 0
    assert calls == [1]
    calls.clear()
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 0
    assert calls == [2]  # default: the cores, not torch's own


def test_plugin_threads_option_is_checked_at_configure(tmp_path):
    from conformance.runtime.threads import available_cores

    n = available_cores()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--kernel=cpu",
            f"--int8conf-threads={n + 1}",
            "--int8conf-no-tile-edges",
            "--int8conf-no-captures",
            "--int8conf-no-model",
            "--int8conf-examples=0",
            f"--int8conf-reports={tmp_path / 'r'}",
        ],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 4 and "Traceback" not in r.stdout + r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        f"ERROR: int8conf: --int8conf-threads {n + 1}: this process may use {n} cores; give at most {n}"
    ]
    assert not (tmp_path / "r").exists()
