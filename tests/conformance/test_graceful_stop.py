"""conformance.runtime.graceful_stop: SIGTERM raises KeyboardInterrupt while installed,
someone else's handler is kept, and restore puts the default back."""

import os
import signal

import pytest

from conformance.runtime.graceful_stop import raise_if_requested, restore_sigterm, sigterm_as_interrupt

pytest_plugins = ["pytester"]


def test_sigterm_becomes_keyboard_interrupt_and_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert sigterm_as_interrupt()
        with pytest.raises(KeyboardInterrupt, match="stopped by signal 15"):
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs as os.kill returns
        restore_sigterm()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_handler_someone_else_installed_is_kept():
    before = signal.getsignal(signal.SIGTERM)
    mine = lambda signum, frame: None  # noqa: E731
    signal.signal(signal.SIGTERM, mine)
    try:
        assert not sigterm_as_interrupt()
        restore_sigterm()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_repeated_sigterm_does_not_interrupt_the_orderly_stop():
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert sigterm_as_interrupt()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the second one only leaves the request
        with pytest.raises(KeyboardInterrupt, match="stopped by signal 15"):
            raise_if_requested()
    finally:
        restore_sigterm()
        signal.signal(signal.SIGTERM, before)


class _Config:
    """Stands in for a ``pytest.Config`` (an xdist worker's has ``workerinput``)."""


def test_pytest_install_is_for_the_process_that_writes_the_reports():
    from conformance.runtime.graceful_stop import sigterm_as_interrupt_in_pytest

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    worker = _Config()
    worker.workerinput = {"workerid": "gw0"}
    try:
        assert sigterm_as_interrupt_in_pytest(worker) is False  # an xdist worker
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert sigterm_as_interrupt_in_pytest(_Config()) is True  # serial run / controller
        with pytest.raises(KeyboardInterrupt, match="stopped by signal 15"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        restore_sigterm()
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) is before


def test_both_pytest_plugins_install_it_through_the_one_function(pytester, monkeypatch):
    """The suite plugin and the gate plugin call
    ``graceful_stop.sigterm_as_interrupt_in_pytest`` (one install, not a copy each)."""
    import torch  # noqa: F401 -- loaded before pytester's in-process run (a re-import crashes)

    import conformance.gate.run  # noqa: F401 -- same for the gate's modules
    from conformance.runtime import graceful_stop

    calls = []
    monkeypatch.setattr(
        graceful_stop,
        "sigterm_as_interrupt_in_pytest",
        lambda config: calls.append(config.getoption("gate_candidate")) or False,
    )
    r = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        "--kernel=cpu",
        "--int8conf-no-captures",
        "--int8conf-no-tile-edges",
        "--int8conf-no-model",
        "--gate-candidate=cpu",
        "--gate-incumbent=cpu",
        "--gate-no-captures",
        "--gate-no-tile-edges",
        "--gate-no-model",
        f"--gate-out={pytester.path}/gate",
        f"--int8conf-reports={pytester.path}/rep",
    )
    assert r.ret == 0, r.stdout.str()[-2000:]
    assert calls == ["cpu", "cpu"]  # once from each plugin's pytest_configure
