import os
import signal

from trainer.preemption import StopSignal


def test_sigterm_sets_the_stop_request_instead_of_killing():
    stop = StopSignal().install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "SIGTERM" and stop.state == "stopped"
    finally:
        stop.uninstall()


def test_uninstall_restores_previous_handlers():
    before = signal.getsignal(signal.SIGTERM)
    StopSignal().install().uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
