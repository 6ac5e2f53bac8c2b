"""A kernel the test stops at a point it chooses, for tests that interrupt a run part-way.

``spec`` is the built-in ``cpu`` kernel, named ``stopper``, that holds exactly one call (across
every process of the run) until the test releases it: the first call whose operand shapes differ
from the first call's, made in a process allowed by ``INT8CONF_HOLD_IN`` (``any``; ``xdist``: an
xdist worker or a process it forked). Holding means: write the hold directory's ``held`` file (the
holder's pid), then wait for its ``release`` file. So the case of the held call is provably
reached and not finished while the test signals, and the first shape's cases are not held.
The directory comes in ``INT8CONF_HOLD_DIR``; without it the kernel never holds. The test side is
:class:`Hold`; a subprocess needs ``tests/helpers`` on its ``PYTHONPATH`` (``--kernel=holding:spec``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

from waiting import wait_until

from conformance.kernels.registry import get_kernel

_cpu = get_kernel("cpu")


def _claim(path: Path, text: str) -> bool:
    """Create ``path`` holding ``text`` if no process did before (O_EXCL: exactly one wins)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


def _hold_here(a, b) -> bool:
    where = os.environ.get("INT8CONF_HOLD_DIR")
    if not where or (os.environ.get("INT8CONF_HOLD_IN") == "xdist" and not os.environ.get("PYTEST_XDIST_WORKER")):
        return False
    d = Path(where)
    shape = f"{tuple(a.shape)} {tuple(b.shape)}"
    _claim(d / "first", shape)  # the run's first shape, whichever process saw it first
    first = wait_until(lambda: (d / "first").read_text(), "the first shape written")
    return shape != first and _claim(d / "held", str(os.getpid()))


def _scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):
    if _hold_here(a, b):
        release = Path(os.environ["INT8CONF_HOLD_DIR"]) / "release"
        wait_until(release.exists, "the test's release file")
    return _cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)


spec = dataclasses.replace(_cpu, name="stopper", scaled_mm=_scaled_mm, origin="test")


class Hold:
    """The test's side: ``env(**more)`` for the subprocess, ``wait_held()`` until a call is held
    (returns the holder's pid), ``release()`` lets it go (idempotent)."""

    def __init__(self, directory: Path, where: str = "any"):
        self.dir, self.where = Path(directory), where
        self.dir.mkdir(parents=True, exist_ok=True)

    def env(self, root: Path) -> dict:
        path = os.pathsep.join([str(root), str(root / "tests" / "helpers")])
        return dict(os.environ, PYTHONPATH=path, INT8CONF_HOLD_DIR=str(self.dir), INT8CONF_HOLD_IN=self.where)

    def wait_held(self) -> int:
        held = self.dir / "held"
        return int(wait_until(lambda: held.exists() and held.read_text(), "a held kernel call"))

    def release(self) -> None:
        (self.dir / "release").touch()


def interrupt_when_held(cmd, root: Path, hold: Hold, sig, decided: str, cwd) -> tuple:
    """Run ``cmd`` (stdout and stderr together), and once a kernel call is held and a line matching the
    regex ``decided`` was printed (a finished case), send ``sig`` to the run's main process, then
    release the call. Returns (returncode, output); fails if the run ended before either happened."""
    # SIGINT's default action in the child: a shell starts background commands with SIGINT ignored, and a run
    # started from one (a CI script, `cmd &`) would pass that on to the run this test interrupts
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=hold.env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: (hold.dir / "held").exists() or p.poll() is not None, "a held kernel call")
        wait_until(lambda: any(re.search(decided, x) for x in list(lines)) or p.poll() is not None, decided)
        assert p.poll() is None, "the run ended before the signal:\n" + "".join(lines)[-3000:]
        p.send_signal(sig)
    finally:
        hold.release()
        p.wait(timeout=300)
        reader.join(timeout=60)
    return p.returncode, "".join(lines)
