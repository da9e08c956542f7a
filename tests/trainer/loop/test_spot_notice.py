"""trainer.loop.spot_notice against the fake AWS/Azure metadata service on 127.0.0.1."""

from __future__ import annotations

import threading
import time

import pytest

from tests.local_server import free_port
from trainer.loop import spot_notice
from trainer.loop.spot_notice import Notice, NoticeWatcher

WAIT_SECONDS = 15


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Poll every 0.1 s so the tests take a second, not the clouds' 1-5 s cadence."""
    monkeypatch.setattr(spot_notice.AwsSpotPoller, "interval_s", 0.1)
    monkeypatch.setattr(spot_notice.AzurePreemptPoller, "interval_s", 0.1)


def _watch(url: str) -> tuple[NoticeWatcher, threading.Event, list[Notice]]:
    seen: list[Notice] = []
    fired = threading.Event()

    def on_notice(notice: Notice) -> None:
        seen.append(notice)
        fired.set()

    return NoticeWatcher(on_notice, base_url=url).start(), fired, seen


def test_aws_spot_notice_is_reported_with_an_imdsv2_token(fake_metadata, fast_polls) -> None:
    watcher, fired, seen = _watch(fake_metadata.url)
    time.sleep(0.5)
    assert not fired.is_set()
    fake_metadata.spot_interruption("terminate", "2026-11-22T04:00:00Z")
    assert fired.wait(WAIT_SECONDS)
    watcher.stop()
    assert seen == [Notice("aws", "spot terminate at 2026-11-22T04:00:00Z")]
    polls = [r for r in fake_metadata.requests if r.path.endswith("spot/instance-action")]
    assert polls and all(r.headers.get("x-aws-ec2-metadata-token") for r in polls)


def test_azure_preempt_is_reported_and_acknowledged(fake_metadata, fast_polls) -> None:
    watcher, fired, seen = _watch(fake_metadata.url)
    event_id = fake_metadata.azure_preempt(time.time() + 30)
    assert fired.wait(WAIT_SECONDS)
    assert seen[0].cloud == "azure" and seen[0].event_id == event_id
    assert fake_metadata.acknowledged == []
    watcher.acknowledge()
    watcher.stop()
    assert fake_metadata.acknowledged == [event_id]


def test_notice_fires_once_when_both_clouds_answer(fake_metadata, fast_polls) -> None:
    watcher, fired, seen = _watch(fake_metadata.url)
    fake_metadata.spot_interruption()
    fake_metadata.azure_preempt(time.time() + 30)
    assert fired.wait(WAIT_SECONDS)
    time.sleep(0.5)
    watcher.stop()
    assert len(seen) == 1


def test_watching_stops_when_no_metadata_service_answers(fast_polls) -> None:
    watcher, fired, _ = _watch(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    for thread in watcher._threads:
        thread.join(WAIT_SECONDS)
    assert time.monotonic() - started < 3, "the probe must give up quickly"
    assert not any(thread.is_alive() for thread in watcher._threads)
    assert not fired.is_set()


def test_off_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spot_notice.IMDS_URL_ENV, "off")
    watcher = NoticeWatcher(lambda notice: None).start()
    assert watcher._threads == []
