"""Child processes die with a parent killed by SIGKILL
(``conformance.runtime.graceful_stop.exit_with_parent``): the sweep's pool workers and
any child that arms it, checked on real processes through /proc (Linux). Every wait is for
an event (a line on a pipe, a stored cell, a pid dying; ``waiting``), never a fixed time."""

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import read_line, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _pool_workers(pid: int) -> list:
    """The spawned pool workers among ``pid``'s children."""
    out = []
    for c in _children(pid):
        with contextlib.suppress(OSError):  # a child gone meanwhile
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes():
                out.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _storing_workers(db: Path) -> set:
    """The pids of the workers that stored a cell in the sweep store ``db`` so far (``cells.worker``
    is ``host:pid``); empty while the file is missing or the writer holds it."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            return {int(w.rsplit(":", 1)[1]) for (w,) in con.execute("SELECT DISTINCT worker FROM cells")}
    except sqlite3.Error:
        return set()


def _kill_all(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


PARENT = textwrap.dedent("""
    import multiprocessing as mp, signal, sys
    def child(arm):
        if arm:
            from conformance.runtime.graceful_stop import exit_with_parent
            assert exit_with_parent()
        signal.signal(signal.SIGUSR1, lambda *a: print("alive", flush=True))
        print("armed", flush=True)
        while True:
            signal.pause()
    if __name__ == "__main__":
        p = mp.get_context("spawn").Process(target=child, args=(sys.argv[1] == "arm",))
        p.start()
        print(p.pid, flush=True)
        signal.pause()
""")


@pytest.mark.parametrize("arm", [True, False])
def test_an_armed_child_dies_with_its_parent_an_unarmed_one_does_not(tmp_path, arm):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, str(script), "arm" if arm else "no"], stdout=subprocess.PIPE, bufsize=0, env=env
    )
    child = int(read_line(p.stdout, "the child's pid"))
    try:
        assert read_line(p.stdout, "the child's start") == "armed"  # the child printed after arming
        p.kill()
        p.wait()  # reaped: the kernel has sent any death signal of the parent's exit
        if arm:
            wait_until(lambda: not _alive(child), "the armed child to die")
        else:  # it still answers (a SIGKILL would have ended it before any handler ran)
            os.kill(child, signal.SIGUSR1)
            assert read_line(p.stdout, "the unarmed child's answer") == "alive"
    finally:
        p.kill()
        _kill_all([child])


def test_sweep_pool_workers_die_with_a_sigkilled_sweep(tmp_path):
    """``int8conf sweep --workers 2`` killed with SIGKILL while its workers compute
    cells: no worker survives it (before exit_with_parent both ran on, for ever)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = tmp_path / "s.sqlite"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "sweep",
            "--kernel",
            "cpu",
            "--workers",
            "2",
            "--no-model",
            "--no-score",
            "--quiet",
            "--db",
            str(db),
            "--out",
            str(tmp_path / "o"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    workers: list = []
    try:
        workers = wait_until(lambda: len(w := _pool_workers(p.pid)) == 2 and w, "two pool workers")
        # a cell stored by each: both are past their initializer (armed) and compute more cells
        wait_until(lambda: _storing_workers(db) >= set(workers), "a stored cell from each worker")
        assert p.poll() is None and all(_alive(w) for w in workers), "the sweep ended before the kill"
        p.kill()
        p.wait()
        wait_until(lambda: not any(_alive(w) for w in workers), f"pool workers {workers} to die with the sweep")
    finally:
        p.kill()
        _kill_all(workers)


def test_a_dead_pool_worker_ends_the_sweep_with_one_line_and_it_resumes(tmp_path):
    """New-user pass 2026-12-01e: ``kill -9`` of one pool worker ended the sweep
    with a raw BrokenProcessPool traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = tmp_path / "s.sqlite"
    # 12 layers (648 cells): the kill after the first stored cell lands while units remain
    cmd = [
        sys.executable,
        "-m",
        "conformance.cli",
        "sweep",
        "--kernel",
        "cpu",
        "--linears",
        ",".join(str(i) for i in range(12)),
        "--workers",
        "2",
        "--no-model",
        "--no-score",
        "--quiet",
        "--db",
        str(db),
        "--out",
        str(tmp_path / "o"),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    workers: list = []
    try:
        workers = wait_until(lambda: _pool_workers(p.pid), "the sweep's pool workers")
        wait_until(lambda: _storing_workers(db), "a stored cell")
        assert p.poll() is None, "the sweep ended before the kill"
        os.kill(workers[0], signal.SIGKILL)
        out, err = p.communicate(timeout=300)
    finally:
        p.kill()
        _kill_all(workers)
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert p.returncode == 2, err
    assert len(lines) == 1 and lines[0].startswith("int8conf: error: a sweep worker process died"), err
    # the same command resumes and finishes
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
