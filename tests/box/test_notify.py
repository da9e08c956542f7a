"""Told when it ends: the real resume unit and watchdog send one message per run end to a
real HTTP server on 127.0.0.1 (the stack's webhook) and to moto's SNS (its topic)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from box import notify
from tests.fakes.cloud_front import CloudFront
from tests.fakes.fake_box import FakeBox
from tests.fixtures.metadata import AWS_CREDENTIALS, AWS_ROLE

T0 = 1_800_000_000.0
MINUTE = 60.0
DAY = 24 * 3600.0
PREEMPTED, CRASHED = 75, 1


@pytest.fixture
def box(tmp_path, webhook):
    return FakeBox(tmp_path, docker_wait_seconds=1, notify_webhook=webhook.server.endpoint)


def _resume(box, now=T0):
    done = box.run("resume.py", now=now)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _summary(box, run_id, **fields):
    path = box.box_root / "runs" / run_id / "summary.json"
    path.write_text(json.dumps(fields))


def test_a_finished_run_sends_its_state_best_mae_and_cost_to_the_webhook(box, webhook):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("run-1", state="finished", val_mae=16.9)
    _summary(box, "run-1", val={"mae": 16.230854971820694}, cost_usd=3.456)
    _resume(box)
    assert webhook.texts == ["run run-1 finished: best val MAE 16.23, cost $3.46"]


def test_a_run_end_is_told_once_however_often_the_resume_unit_looks(box, webhook):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("run-1", state="finished", val_mae=16.2)
    for minute in range(4):
        _resume(box, now=T0 + minute * MINUTE)
    assert len(webhook.posts) == 1


def test_a_run_that_is_only_resumed_sends_nothing(box, webhook):
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0 - 30
    )
    box.write_status("run-1", state="preempted", val_mae=17.0)
    _resume(box)
    assert [call[1] for call in box.calls("docker") if call[0] == "start"] == [container]
    assert webhook.posts == []


def test_a_resumed_run_that_then_fails_is_told_once_with_its_exit(box, webhook):
    container = box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0 - 30
    )
    box.write_status("run-1", state="preempted", val_mae=17.0)
    _resume(box)
    box.exit_container(container, exit_code=CRASHED, at=T0 + 5 * MINUTE)
    box.write_status("run-1", state="failed", val_mae=17.0, exit_code=CRASHED)
    _resume(box, now=T0 + 6 * MINUTE)
    _resume(box, now=T0 + 7 * MINUTE)
    assert webhook.texts == ["run run-1 failed (exit 1): best val MAE 17.00"]


def test_a_run_past_its_deadline_is_told_it_missed_it_with_its_estimated_cost(box, webhook):
    box.add_trainer(
        "run-1", running=False, created_at=T0 - 7200, exit_code=PREEMPTED, finished_at=T0 - 60
    )
    box.write_status("run-1", state="preempted", val_mae=18.5)
    launch = {"deadline": T0 - 120, "started_at": T0 - 7200, "hourly_price_usd": 1.5, "boxes": 2}
    (box.box_root / "runs" / "run-1" / "launch.json").write_text(json.dumps(launch))
    _resume(box)
    assert webhook.texts == ["run run-1 missed its deadline: best val MAE 18.50, cost about $6.00"]


def test_a_run_end_first_seen_more_than_a_day_after_it_is_not_told(box, webhook):
    # What the first look of these programs finds on a box where older runs ended.
    box.add_trainer(
        "old", running=False, created_at=T0 - 9 * DAY, exit_code=0, finished_at=T0 - 2 * DAY
    )
    box.add_trainer("new", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("old", state="finished", val_mae=20.0)
    box.write_status("new", state="finished", val_mae=16.2)
    _resume(box)
    assert webhook.texts == ["run new finished: best val MAE 16.20"]


def test_a_run_the_user_stopped_sends_nothing(box, webhook):
    box.add_trainer(
        "run-1", running=False, created_at=T0 - 600, exit_code=PREEMPTED, finished_at=T0 - 30
    )
    (box.box_root / "runs" / "run-1" / "STOPPED_BY_USER").write_text("")
    _resume(box)
    assert webhook.posts == []


def test_a_box_of_workers_leaves_the_telling_to_rank_zeros_box(box, webhook):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    heartbeat = box.box_root / "runs" / "run-1" / "heartbeat.json"
    heartbeat.write_text('{"step": 40, "state": "finished", "updated_at": 1}')
    _resume(box)
    assert webhook.posts == []


def test_a_webhook_that_fails_is_tried_again_at_the_next_look_and_then_told_once(box, webhook):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("run-1", state="finished", val_mae=16.2)
    webhook.status = 500
    failed = _resume(box)
    assert "webhook notice" in failed.stdout
    webhook.status = 200
    _resume(box, now=T0 + MINUTE)
    _resume(box, now=T0 + 2 * MINUTE)
    assert len(webhook.posts) == 1


def test_a_webhook_that_keeps_failing_is_given_up_after_max_tries_across_looks(box, webhook):
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("run-1", state="finished", val_mae=16.2)
    webhook.status = 500
    for minute in range(notify.MAX_TRIES + 2):
        _resume(box, now=T0 + minute * MINUTE)
    assert webhook.attempts == notify.MAX_TRIES
    webhook.status = 200
    _resume(box, now=T0 + (notify.MAX_TRIES + 2) * MINUTE)
    assert webhook.posts == []


def test_the_watchdog_tells_the_hung_run_it_stops_once(box, webhook):
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.write_status("run-1", step=10, updated_at=T0 - 3600, val_mae=20.0)
    assert box.ticks_until_stop(T0, minutes=20) is not None
    box.tick(T0 + 21 * MINUTE)  # a stop that failed is asked for again
    assert webhook.texts == [
        "run run-1 stopped by the idle watchdog (no progress for 10 min): best val MAE 20.00"
    ]


def _sns_box(tmp_path, moto_server, metadata_url: str) -> tuple[FakeBox, Callable[[], list]]:
    """An AWS box whose run just finished, its stack's topic on moto with a queue for
    the mail; and what reads the queue (the messages the topic sent)."""
    sns, sqs = moto_server.client("sns"), moto_server.client("sqs")
    topic = sns.create_topic(Name=f"glucose-notify-{tmp_path.name[-8:]}")["TopicArn"]
    queue = sqs.create_queue(QueueName=f"mail-{tmp_path.name[-8:]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
    box = FakeBox(
        tmp_path,
        metadata_url=metadata_url,
        docker_wait_seconds=1,
        notify_topic_arn=topic,
        sns_url=moto_server.endpoint_url,
    )
    box.add_trainer("run-1", running=False, created_at=T0 - 600, exit_code=0, finished_at=T0 - 30)
    box.write_status("run-1", state="finished", val_mae=16.2)

    def mail() -> list:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        return [json.loads(message["Body"]) for message in got.get("Messages", [])]

    return box, mail


@pytest.mark.e2e  # moto
def test_an_aws_box_publishes_the_end_to_the_stacks_sns_topic_with_its_role(
    tmp_path, moto_server, fake_metadata
):
    box, mail = _sns_box(tmp_path, moto_server, fake_metadata.url)
    _resume(box)
    _resume(box, now=T0 + MINUTE)
    messages = mail()
    assert [message["Message"] for message in messages] == [
        "run run-1 finished: best val MAE 16.20"
    ]
    assert messages[0]["Subject"] == "glucose-training: run run-1 finished"
    seen = [request.path for request in fake_metadata.requests]
    assert "/latest/meta-data/iam/security-credentials/glucose-box-role" in seen


@pytest.mark.e2e  # moto
def test_role_credentials_past_a_pipes_64_kib_sign_the_sns_publish_whole(
    tmp_path, moto_server, fake_metadata
):
    # A session token grows with its session's policies and tags (8 KiB here: SNS, as
    # moto, takes no header past 64 KiB); the document, as IMDS serves it, passes 64 KiB
    # (a pipe's buffer). The box's pipe once carried its first 4096 bytes alone, and
    # every publish signed with them failed.
    keys = {**AWS_CREDENTIALS, "Token": "large-session-token/" + "Q" * (8 * 1024)}
    document = json.dumps(keys, indent=2).ljust(70 * 1024).encode()
    imds = CloudFront(fake_metadata.url)
    imds.serve(f"/iam/security-credentials/{AWS_ROLE}", document)
    try:
        box, mail = _sns_box(tmp_path, moto_server, imds.endpoint)
        done = _resume(box)
    finally:
        imds.close()
    assert [message["Message"] for message in mail()] == ["run run-1 finished: best val MAE 16.20"]
    assert keys["Token"] not in done.stdout + done.stderr


def test_a_notice_that_cannot_be_recorded_never_holds_up_the_watchdogs_stop(box, webhook):
    (box.box_root / "watchdog" / "notices.json.lock").mkdir(parents=True)
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    box.write_status("run-1", step=10, updated_at=T0 - 3600)
    assert box.ticks_until_stop(T0, minutes=20) is not None
    assert box.calls("shutdown")
