"""Third-party import notices (torchao's "Failed to load ...so", torch's
_pytree Enum deprecation) are dropped by the CLI, the sweep and the scoreboard workers;
their errors still show."""

import logging

from conformance.runtime.import_noise import QUIET_LOGGERS, silence_import_noise


def test_the_cli_drops_warnings_of_the_noisy_loggers_and_keeps_their_errors(caplog):
    from conformance.cli import main

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        main(["study", "--help"])
    except SystemExit:
        pass
    for name in QUIET_LOGGERS:
        log = logging.getLogger(name)
        assert not log.isEnabledFor(logging.WARNING) and log.isEnabledFor(logging.ERROR), name
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("torchao").warning("Failed to load x.so")
        logging.getLogger("torchao").error("a real error")
    assert [r.getMessage() for r in caplog.records if r.name == "torchao"] == ["a real error"]


def test_the_sweep_worker_setup_silences_them_too():
    from conformance.sweep.runner import _worker_env

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _worker_env()
    assert all(logging.getLogger(n).level == logging.ERROR for n in QUIET_LOGGERS)
    silence_import_noise()  # idempotent
    assert all(logging.getLogger(n).level == logging.ERROR for n in QUIET_LOGGERS)


def test_the_scoreboard_worker_silences_them_before_loading_its_kernel():
    """Issue 31 item 11: ``int8conf scoreboard``'s row workers (fresh processes)
    printed torchao's "Failed to load ...so" lines."""
    from conformance.runtime.pool import KernelRef, Request, _serve

    class Conn:
        sent = []
        requests = [Request("ping")]

        def send(self, msg):
            self.sent.append(msg)

        def recv(self):
            if not self.requests:
                raise EOFError
            return self.requests.pop()

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _serve(Conn(), KernelRef("no_such_pkg_xyz:fn"), [], "cpu", method="forkserver")
    assert not Conn.sent[0].ok and "could not be resolved" in Conn.sent[0].value
    assert all(logging.getLogger(n).level == logging.ERROR for n in QUIET_LOGGERS)
