import os
import signal
import time

from trainer.loop.preemption import AZURE_PREEMPT_BUDGET_SECONDS, STOP_BUDGET_SECONDS, StopSignal


def test_sigterm_sets_the_stop_request_instead_of_killing():
    stop = StopSignal(watch_notices=False).install()
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


def test_azure_notice_requests_a_preempted_stop_with_its_short_budget(fake_metadata, monkeypatch):
    monkeypatch.setenv("GLUCOSE_IMDS_URL", fake_metadata.url)
    monkeypatch.setattr("trainer.loop.spot_notice.AzurePreemptPoller.interval_s", 0.1)
    stop = StopSignal().install()
    try:
        fake_metadata.azure_preempt(time.time() + 30)
        assert stop.event.wait(15)
        assert stop.state == "preempted" and stop.reason.startswith("azure Preempt")
        assert stop.upload_seconds_left() <= AZURE_PREEMPT_BUDGET_SECONDS
        stop.acknowledge()
        assert len(fake_metadata.acknowledged) == 1
    finally:
        stop.uninstall()


def test_sigterm_leaves_the_container_stop_budget():
    stop = StopSignal(watch_notices=False)
    stop.request("SIGTERM")
    assert AZURE_PREEMPT_BUDGET_SECONDS < stop.upload_seconds_left() <= STOP_BUDGET_SECONDS
