"""A message can never cost a box, a secret or a run: the real resume unit, watchdog and
end watch against webhooks on 127.0.0.1 that drip, refuse, answer late or redirect, and
against a disk that cannot take the told-once record."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from box import notify
from tests.fakes.fake_box import FakeBox
from tests.fakes.webhook import Webhook

T0 = 1_800_000_000.0
MINUTE = 60.0
PREEMPTED = 75
SECRET = "T0/B0/secret-XYZ"
# The path of a Teams incoming webhook (its secret: whoever has it may post to the channel).
TEAMS_PATH = (
    "/webhookb2/6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5@0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"
    "/IncomingWebhook/5d41402abc4b2a76b9719d911017c592/7e8f9a0b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"
    "/V2mZ0rT7qLxW3nKp9sYb4HcJ1dFgA6eUoI8vNlRtQwE5"
)
# A "no such hook" page quoting the path: its first 200 bytes end inside the path.
NOT_FOUND_PAGE = b"<html><body><h1>404</h1><p>No webhook is registered at {path}.</p></body></html>"
# What one look may take at most with a webhook that misbehaves: its budget, the
# final record, and the programs' own start.
LOOK_AT_MOST_SECONDS = notify.WORST_CASE_SECONDS + 15


@pytest.fixture
def box(tmp_path, webhook):
    hook = f"{webhook.server.endpoint}/services/{SECRET}?token=also-secret"
    return FakeBox(tmp_path, docker_wait_seconds=1, notify_webhook=hook)


def _finished(box, run_id="run-1", at=T0 - 30) -> str:
    container = box.add_trainer(
        run_id, running=False, created_at=at - 600, exit_code=0, finished_at=at
    )
    box.write_status(run_id, state="finished", val_mae=16.2)
    return container


def _resume(box, now=T0):
    started = time.monotonic()
    done = box.run("resume.py", now=now, timeout_seconds=LOOK_AT_MOST_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < LOOK_AT_MOST_SECONDS
    return done


def _hung(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.write_status("run-1", step=10, updated_at=T0 - 3600, val_mae=20.0)


def _full(tmpfs):
    """A tmpfs with no byte left."""
    disk = tmpfs("64k")
    filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(filler, b"\0" * 4096):
            pass
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(filler)
    return disk


def test_a_dripping_webhook_never_holds_up_the_start_of_a_run_listed_after_an_end(box, webhook):
    webhook.drip_seconds = 4  # each byte within the 5 s timeout of one read
    _finished(box, "ended-first")
    interrupted = box.add_trainer(
        "interrupted", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0 - 30
    )
    box.write_status("interrupted", state="preempted")
    _resume(box)
    assert ["start", interrupted] in box.calls("docker")


def test_a_dripping_webhook_never_holds_up_the_watchdogs_stop(box, webhook):
    webhook.drip_seconds = 4
    _hung(box)
    started = time.monotonic()
    assert box.ticks_until_stop(T0, minutes=20) is not None
    assert box.calls("shutdown")
    # Twenty-one looks, one of them with the message: the message cost one budget.
    assert time.monotonic() - started < 21 * 3 + LOOK_AT_MOST_SECONDS


def test_the_webhooks_secret_path_is_in_no_log_when_a_send_fails(box, webhook):
    webhook.status = 500
    _finished(box)
    done = _resume(box)
    assert f"not taken by {webhook.server.endpoint} " in done.stdout
    assert "secret-XYZ" not in done.stdout + done.stderr
    assert "also-secret" not in done.stdout + done.stderr


def test_an_error_page_quoting_a_teams_webhooks_path_leaves_none_of_it_in_the_log(
    tmp_path, webhook
):
    box = FakeBox(
        tmp_path, docker_wait_seconds=1, notify_webhook=webhook.server.endpoint + TEAMS_PATH
    )
    webhook.status, webhook.error_page = 404, NOT_FOUND_PAGE
    _finished(box)
    done = _resume(box)
    assert "HTTP 404 from " in done.stdout and "No webhook is registered at" in done.stdout
    logged = done.stdout + done.stderr
    pieces = {TEAMS_PATH[at : at + 12] for at in range(len(TEAMS_PATH) - 11)}
    assert not [piece for piece in pieces if piece in logged], logged


def test_an_error_quoting_a_long_webhook_path_leaves_none_of_it_in_the_log(tmp_path, webhook):
    # http.client refuses a path with a space, quoting all of it: past the 500 characters
    # of an error a child reports.
    path = (TEAMS_PATH * 3) + " x"
    box = FakeBox(tmp_path, docker_wait_seconds=1, notify_webhook=webhook.server.endpoint + path)
    _finished(box)
    done = _resume(box)
    assert "URL can't contain control characters" in done.stdout
    logged = done.stdout + done.stderr
    pieces = {path[at : at + 12] for at in range(len(path) - 11)}
    assert not [piece for piece in pieces if piece in logged], logged


def test_the_told_once_record_is_readable_by_root_alone(box, webhook):
    _finished(box)
    _resume(box)
    record = box.box_root / "watchdog" / notify.NOTICES_FILE
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_the_end_watch_tells_an_end_a_webhook_refused_once_with_a_503(tmp_path, webhook):
    hook = f"{webhook.server.endpoint}/services/{SECRET}"
    box = FakeBox(tmp_path, cloud="local", notify_webhook=hook)
    container = _finished(box)
    webhook.answers = [503]
    done = box.run("end_watch.py", container, now=T0, timeout_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert webhook.texts == ["run run-1 finished: best val MAE 16.20"]
    assert "secret-XYZ" not in done.stdout


def test_the_watchdog_tries_a_hung_runs_message_again_after_a_503(box, webhook):
    webhook.answers = [503]
    _hung(box)
    assert box.ticks_until_stop(T0, minutes=20) is not None
    assert webhook.texts == [
        "run run-1 stopped by the idle watchdog (no progress for 10 min): best val MAE 20.00"
    ]


def test_a_webhook_that_answers_late_gets_the_end_once(box, webhook):
    webhook.answer_after_seconds = 8  # past the 5 s a send may take
    _finished(box)
    for minute in range(3):
        _resume(box, now=T0 + minute * MINUTE)
    assert webhook.attempts == 1


def test_a_full_disk_keeps_the_record_on_run_and_the_end_is_told_once(box, webhook, tmpfs):
    full = _full(tmpfs)
    os.symlink(full, box.box_root / "watchdog")
    _finished(box)
    for minute in range(4):
        _resume(box, now=T0 + minute * MINUTE)
    assert webhook.attempts == 1
    kept = json.loads((box.root / "run" / notify.NOTICES_FILE).read_text())
    assert [notice["sent"] for notice in kept.values()] == [["webhook"]]


def test_where_no_record_can_be_written_no_end_is_sent_at_every_look(tmp_path, webhook, tmpfs):
    full = _full(tmpfs)
    box = FakeBox(
        tmp_path,
        docker_wait_seconds=1,
        notify_webhook=webhook.server.endpoint,
        resume_state_path=str(full / "resume-state.json"),
    )
    os.symlink(full, box.box_root / "watchdog")
    _finished(box)
    for minute in range(4):
        done = _resume(box, now=T0 + minute * MINUTE)
    assert webhook.attempts <= notify.MAX_TRIES
    assert webhook.attempts == 0, "a try made without its record could repeat for a day"
    assert "no try can be recorded" in done.stdout


def test_a_redirect_is_not_followed_nor_taken_for_the_end_told(box, webhook):
    metadata = Webhook()  # where the redirect points: a stand-in for 169.254.169.254
    try:
        webhook.status, webhook.location = 302, f"{metadata.server.endpoint}/latest/meta-data/"
        _finished(box)
        done = _resume(box)
        assert "a redirect, not followed" in done.stdout
        assert metadata.attempts == 0
        webhook.status, webhook.location = 200, ""
        _resume(box, now=T0 + MINUTE)
        assert webhook.texts == ["run run-1 finished: best val MAE 16.20"]
    finally:
        metadata.close()
