"""Every call the box makes to a cloud is bounded as a whole: the real watchdog, stop
recorder and boot recorder against a front on 127.0.0.1 (tests/fakes/cloud_front.py)
that drips ARM's or the metadata service's answer one byte every 2 s, each byte well
within the box's 3 s per request, as a peer that trickles does. A stop whose answer
did not come is STILL BILLED and asked again; so is one the cloud accepted while the
box still runs."""

from __future__ import annotations

import time

import pytest

from box import contract
from tests.fakes.cloud_front import CloudFront
from tests.fakes.fake_box import FakeBox
from tests.fixtures.metadata import AZURE_RESOURCE_ID

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 2
STOP_DUE = T0 + IDLE_LIMIT_MINUTES * MINUTE
REQUEST_SECONDS = 3
"""The box's http_timeout_seconds here: one request's whole time."""
DRIP_SECONDS = 2
AZURE_STOP_REQUESTS = 5
# One look with every request of the stop left to its deadline, and the program's own
# start and its fake tools; far below what a drip of 100 bytes takes (200 s).
LOOK_AT_MOST_SECONDS = AZURE_STOP_REQUESTS * REQUEST_SECONDS + 12


@pytest.fixture
def arm(fake_metadata):
    front = CloudFront(fake_metadata.url)
    yield front
    front.close()


def _box(tmp_path, cloud: str, metadata_url: str = "", **config) -> FakeBox:
    """A box idle for IDLE_LIMIT_MINUTES stops, each request given REQUEST_SECONDS."""
    settings = {"http_timeout_seconds": REQUEST_SECONDS, **config}
    return FakeBox(
        tmp_path,
        cloud=cloud,
        metadata_url=metadata_url,
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
        **settings,
    )


@pytest.fixture
def azure_box(tmp_path, fake_metadata, arm):
    return _box(tmp_path, "azure", fake_metadata.url, arm_url=arm.endpoint)


def _look(box: FakeBox, now: float, program: str = "watchdog.py"):
    """One run of `program`, which must end within LOOK_AT_MOST_SECONDS."""
    began = time.monotonic()
    done = box.run(program, now=now, timeout_seconds=LOOK_AT_MOST_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - began < LOOK_AT_MOST_SECONDS
    return done


def _asked_to_deallocate(fake_metadata) -> int:
    return sum("/deallocate?" in seen.path for seen in fake_metadata.requests)


def test_a_dripping_arm_cannot_hold_the_idle_stop_past_its_bound(azure_box, arm):
    arm.drip("/deallocate", every_seconds=DRIP_SECONDS)
    _look(azure_box, T0)
    done = _look(azure_box, STOP_DUE)
    assert arm.dripped, "the deallocate never reached the dripping ARM"
    assert "STILL BILLED" in done.stdout
    state = azure_box.watchdog_state()
    assert (state["stop_failures"], state["stop_accepted"]) == (1, False)
    assert "no answer" in state["stop_error"]


def test_an_arm_answer_whose_body_drips_is_no_accepted_deallocate(azure_box, arm):
    # The head (202 Accepted) comes whole; the body it announces never does in time.
    arm.drip("/deallocate", every_seconds=DRIP_SECONDS, head_whole=True)
    _look(azure_box, T0)
    done = _look(azure_box, STOP_DUE)
    assert "STILL BILLED" in done.stdout
    assert azure_box.watchdog_state()["stop_failures"] == 1


def test_a_deallocate_a_dripping_arm_held_is_asked_again_a_minute_later(
    azure_box, arm, fake_metadata
):
    arm.drip("/deallocate", every_seconds=DRIP_SECONDS)
    _look(azure_box, T0)
    _look(azure_box, STOP_DUE)
    arm.stop_misbehaving()
    _look(azure_box, STOP_DUE + MINUTE)
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    state = azure_box.watchdog_state()
    assert (state["stop_failures"], state["stop_error"]) == (0, None)


def test_a_watchdog_ended_before_arms_answer_counts_its_stop_as_failed(
    tmp_path, fake_metadata, arm
):
    # systemd ends a run at its unit's limit; the attempt it cut short is no accepted stop.
    # Each request may take longer than the test waits for the watchdog.
    box = _box(tmp_path, "azure", fake_metadata.url, arm_url=arm.endpoint, http_timeout_seconds=10)
    arm.drip("/deallocate", every_seconds=DRIP_SECONDS)
    _look(box, T0)
    watchdog = box.start("watchdog.py", now=STOP_DUE)
    try:
        give_up = time.monotonic() + LOOK_AT_MOST_SECONDS
        while not arm.dripped and time.monotonic() < give_up:
            time.sleep(0.1)
        assert arm.dripped, "the deallocate never reached the dripping ARM"
    finally:
        watchdog.kill()
        watchdog.communicate()
    state = box.watchdog_state()
    assert (state["stop_failures"], state["stop_accepted"]) == (1, False)
    assert "no answer" in state["stop_error"]
    arm.stop_misbehaving()
    _look(box, STOP_DUE + MINUTE)  # a failure's backoff: 1 min, not an accepted stop's 5
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]


def test_a_box_still_running_after_arm_accepted_its_stop_is_still_billed(azure_box, fake_metadata):
    _look(azure_box, T0)
    _look(azure_box, STOP_DUE)
    assert azure_box.watchdog_state()["stop_accepted"] is True
    # Five minutes on the watchdog still runs: the deallocate ARM accepted did not take.
    done = _look(azure_box, STOP_DUE + 5 * MINUTE)
    assert "STILL BILLED: a stop accepted 5 min ago has not stopped the box" in done.stdout
    assert _asked_to_deallocate(fake_metadata) == 2
    state = azure_box.watchdog_state()
    assert state["stop_failures"] == 1
    assert "has not stopped the box" in state["stop_error"]


def test_a_stop_accepted_in_a_row_that_never_takes_stays_still_billed(azure_box, fake_metadata):
    _look(azure_box, T0)
    for minutes in (0, 5, 10):
        _look(azure_box, STOP_DUE + minutes * MINUTE)
    assert _asked_to_deallocate(fake_metadata) == 3
    assert azure_box.watchdog_state()["stop_failures"] == 2


def test_an_aws_box_still_running_after_its_os_shutdown_is_still_billed(tmp_path):
    box = _box(tmp_path, "aws")
    _look(box, T0)
    _look(box, STOP_DUE)
    done = _look(box, STOP_DUE + 5 * MINUTE)
    assert "STILL BILLED" in done.stdout
    assert len(box.calls("shutdown")) == 2


@pytest.fixture
def dripping_imds():
    front = CloudFront()
    front.drip("/", every_seconds=DRIP_SECONDS)
    yield front
    front.close()


def test_a_dripping_metadata_service_cannot_hold_the_aws_idle_stop(tmp_path, dripping_imds):
    # The verdict for the idle alarm asks IMDS first, every look.
    box = _box(tmp_path, "aws", dripping_imds.endpoint)
    _look(box, T0)
    done = _look(box, STOP_DUE)
    assert "WARNING: verdict not published" in done.stdout
    assert box.calls("shutdown") == [["-h", "now"]]


def test_a_dripping_metadata_service_cannot_hold_the_shutdowns_stop_record(tmp_path, dripping_imds):
    # The stop recorder asks IMDS for a spot notice within its unit's 30 s TimeoutStopSec.
    box = _box(tmp_path, "aws", dripping_imds.endpoint)
    _look(box, T0, "stop_records.py")
    assert dripping_imds.dripped
    (record,) = box.stops()
    assert record[contract.STOP_BY] == "outside"


def test_a_dripping_metadata_service_cannot_hold_the_boot_record(tmp_path, dripping_imds):
    box = _box(tmp_path, "azure", dripping_imds.endpoint)
    done = _look(box, T0, "boot_record.py")
    assert "no size recorded for this boot" in done.stdout
    assert (box.box_root / "watchdog" / "boots.jsonl").exists()
