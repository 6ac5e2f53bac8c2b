"""conformance.graceful_stop: SIGTERM raises KeyboardInterrupt while installed,
someone else's handler is kept, and restore puts the default back."""

import os
import signal

import pytest

from conformance.graceful_stop import raise_if_requested, restore_sigterm, sigterm_as_interrupt


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
        os.kill(os.getpid(), signal.SIGTERM)     # the second one only leaves the request
        with pytest.raises(KeyboardInterrupt, match="stopped by signal 15"):
            raise_if_requested()
    finally:
        restore_sigterm()
        signal.signal(signal.SIGTERM, before)
