"""How the watchdog stops billing on each cloud, and the verdict it publishes on AWS."""

import json

import pytest

from box.contract import DEADLINE_TAG
from box.watchdog_config import ARM_API_VERSION
from tests.fakes.fake_box import BOOT_TIME, FakeBox
from tests.fixtures.metadata import AZURE_RESOURCE_ID, TAGS_PATH

T0 = 1_800_000_000.0
IDLE_LIMIT_MINUTES = 2
LIMIT_SECONDS = IDLE_LIMIT_MINUTES * 60


def _box(tmp_path, fake_metadata, cloud):
    return FakeBox(
        tmp_path,
        cloud=cloud,
        metadata_url=fake_metadata.url,
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
    )


def _idle_past_the_limit(box):
    box.tick(T0)
    return box.tick(T0 + LIMIT_SECONDS)


@pytest.fixture
def azure_box(tmp_path, fake_metadata):
    return _box(tmp_path, fake_metadata, "azure")


def test_azure_deallocates_the_vm_through_arm(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    assert azure_box.calls("shutdown") == []
    assert azure_box.watchdog_state()["stop_method"] == "azure-deallocate"


def test_azure_deallocate_names_the_api_version(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    (call,) = [seen for seen in fake_metadata.requests if "/deallocate" in seen.path]
    assert call.method == "POST"
    assert call.path == f"{AZURE_RESOURCE_ID}/deallocate?api-version={ARM_API_VERSION}"


DEADLINE = "2026-11-23T06:00:00Z"


def _arm_calls(fake_metadata) -> list[tuple[str, str]]:
    return [
        (seen.method, seen.path.split("?")[0].removeprefix(AZURE_RESOURCE_ID))
        for seen in fake_metadata.requests
        if seen.path.startswith(AZURE_RESOURCE_ID)
    ]


def test_azure_deletes_the_runs_deadline_tag_before_deallocating(azure_box, fake_metadata):
    # Until the deadline the stack's keeper starts a deallocated VM again.
    fake_metadata.azure_tags = {DEADLINE_TAG: DEADLINE}
    _idle_past_the_limit(azure_box)
    assert _arm_calls(fake_metadata) == [
        ("GET", f"/{TAGS_PATH}"),
        ("PATCH", f"/{TAGS_PATH}"),
        ("POST", "/deallocate"),
    ]
    assert fake_metadata.azure_tags == {}


def test_azure_tag_delete_names_the_deadline_with_its_value(azure_box, fake_metadata):
    fake_metadata.azure_tags = {DEADLINE_TAG: DEADLINE, "owner": "ana"}
    _idle_past_the_limit(azure_box)
    (patch,) = [seen for seen in fake_metadata.requests if seen.method == "PATCH"]
    assert json.loads(patch.body) == {
        "operation": "Delete",
        "properties": {"tags": {DEADLINE_TAG: DEADLINE}},
    }
    assert patch.path.endswith("?api-version=2021-04-01")
    assert fake_metadata.azure_tags == {"owner": "ana"}


def test_azure_without_a_deadline_deletes_no_tag(azure_box, fake_metadata):
    fake_metadata.azure_tags = {"owner": "ana"}
    _idle_past_the_limit(azure_box)
    assert [method for method, _ in _arm_calls(fake_metadata)] == ["GET", "POST"]


def test_a_refused_tag_delete_still_deallocates(azure_box, fake_metadata):
    # Stopping the bill comes first; the keeper's start, if any, is the lesser harm.
    fake_metadata.azure_tags = {DEADLINE_TAG: DEADLINE}
    fake_metadata.tags_status = 403
    done = _idle_past_the_limit(azure_box)
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    assert f"WARNING: could not delete the deadline tag {DEADLINE_TAG}" in done.stdout
    state = azure_box.watchdog_state()
    assert (state["stop_failures"], state["stop_error"]) == (0, None)


def test_azure_token_is_asked_for_arm_with_the_metadata_header(azure_box, fake_metadata):
    _idle_past_the_limit(azure_box)
    (call,) = [seen for seen in fake_metadata.requests if "/identity/" in seen.path]
    assert "resource=https%3A%2F%2Fmanagement.azure.com%2F" in call.path
    assert call.headers["metadata"] == "true"


def test_arm_refusal_keeps_the_vm_up_and_says_still_billed(azure_box, fake_metadata):
    # An OS shutdown would leave it "stopped" (billed) and unreachable, with no retry.
    fake_metadata.arm_status = 403
    done = _idle_past_the_limit(azure_box)
    assert azure_box.calls("shutdown") == []
    assert "STILL BILLED" in done.stdout
    assert "HTTP 403" in done.stdout
    state = azure_box.watchdog_state()
    assert (state["stop_failures"], state["stop_method"]) == (1, "azure-deallocate")
    assert "HTTP 403" in state["stop_error"]


def _deallocate_requests(fake_metadata) -> int:
    return sum("/deallocate?" in seen.path for seen in fake_metadata.requests)


def test_a_refused_deallocate_is_retried_with_backoff(azure_box, fake_metadata):
    fake_metadata.arm_status = 403
    _idle_past_the_limit(azure_box)
    asked = []
    for minute in range(1, 16):
        before = _deallocate_requests(fake_metadata)
        azure_box.tick(T0 + LIMIT_SECONDS + minute * 60)
        if _deallocate_requests(fake_metadata) > before:
            asked.append(minute)
    # 1, 2, 4, 8 minutes after each failure: backoff, but never given up.
    assert asked == [1, 3, 7, 15]
    assert azure_box.watchdog_state()["stop_failures"] == 5


def test_deallocate_succeeds_once_arm_accepts_again(azure_box, fake_metadata):
    fake_metadata.arm_status = 403
    _idle_past_the_limit(azure_box)
    fake_metadata.arm_status = 202
    azure_box.tick(T0 + LIMIT_SECONDS + 60)
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    state = azure_box.watchdog_state()
    assert (state["stop_failures"], state["stop_error"]) == (0, None)


def test_missing_identity_keeps_the_vm_up(azure_box, fake_metadata):
    fake_metadata.identity_status = 400
    done = _idle_past_the_limit(azure_box)
    assert azure_box.calls("shutdown") == []
    assert "ERROR: Azure deallocate failed" in done.stdout


def test_unreachable_metadata_keeps_the_vm_up(tmp_path):
    box = FakeBox(tmp_path, cloud="azure", idle_shutdown_minutes=IDLE_LIMIT_MINUTES)
    _idle_past_the_limit(box)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["stop_failures"] == 1


def test_a_failing_os_shutdown_is_retried_and_says_still_billed(tmp_path):
    box = FakeBox(tmp_path, cloud="aws", idle_shutdown_minutes=IDLE_LIMIT_MINUTES)
    box.set_shutdown_status(1)
    done = _idle_past_the_limit(box)
    assert "STILL BILLED" in done.stdout
    box.tick(T0 + LIMIT_SECONDS + 60)
    assert len(box.calls("shutdown")) == 2


def test_aws_stops_with_an_os_shutdown(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    _idle_past_the_limit(box)
    assert box.calls("shutdown") == [["-h", "now"]]
    assert fake_metadata.deallocated == []


def _published(box):
    (call,) = box.calls("aws")
    return call


def test_aws_publishes_the_verdict_to_cloudwatch(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.set_gpu(12, 88)
    box.tick(T0)
    assert _published(box) == [
        "cloudwatch",
        "put-metric-data",
        "--region",
        "eu-west-1",
        "--namespace",
        "GlucoseTraining",
        "--metric-name",
        "Busy",
        "--dimensions",
        "InstanceId=i-0123456789abcdef0",
        "--unit",
        "None",
        "--value",
        "1",
    ]


def test_an_ssh_session_is_busy_to_the_alarm_too(tmp_path, fake_metadata):
    # The alarm reads the watchdog's verdict, so a person at the box keeps it up there too.
    box = _box(tmp_path, fake_metadata, "aws")
    box.add_session("alice")
    box.tick(T0)
    assert _published(box)[-1] == "1"


def test_an_idle_box_publishes_zero(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.tick(T0)
    assert _published(box)[-1] == "0"


def test_a_box_that_just_booted_publishes_busy_for_the_boot_grace(tmp_path, fake_metadata):
    # The alarm sat in ALARM while the box was stopped: a 1 returns it to OK.
    box = _box(tmp_path, fake_metadata, "aws")
    box.reboot("boot-2", at=T0 - 60)
    box.tick(T0)
    assert _published(box)[-1] == "1"


def test_aws_metric_uses_an_imdsv2_token(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.tick(T0)
    token_put, *reads = fake_metadata.requests
    assert (token_put.method, token_put.path) == ("PUT", "/latest/api/token")
    assert [seen.headers.get("x-aws-ec2-metadata-token") for seen in reads] == [
        "fake-imds-token",
        "fake-imds-token",
    ]


def test_azure_publishes_no_cloudwatch_metric(azure_box):
    azure_box.set_gpu(50)
    azure_box.tick(T0)
    assert azure_box.calls("aws") == []


def test_the_verdict_is_published_without_nvidia_smi_too(tmp_path, fake_metadata):
    box = _box(tmp_path, fake_metadata, "aws")
    box.set_gpu(None)
    box.tick(T0)
    assert _published(box)[-1] == "0"


HOUR = 3600.0


def _billed_hours_of_a_run(box, span: tuple[float, float], booted_at=BOOT_TIME) -> float:
    """What `fab status` and the trainer count for a run that trained during `span` on
    this box: its boot and stop records, and the boot it is in (since `booted_at`)."""
    from trainer.reports import cost

    records = box.box_root / "watchdog"
    current = (box.boot_id_file.read_text().strip(), booted_at)
    up = cost.uptimes(
        cost.records_of(records / "boots.jsonl"), cost.records_of(records / "stops.jsonl"), current
    )
    return cost.run_cost([up], [span], 1.0).box_seconds[0] / HOUR


def test_a_stop_arm_refused_does_not_end_the_bill_of_the_run_after_it(azure_box, fake_metadata):
    # ARM refuses three times; the box stays up and the next run trains 0.29 h on it.
    assert azure_box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    fake_metadata.arm_status = 403
    _idle_past_the_limit(azure_box)
    for minute in (1, 3):
        azure_box.tick(T0 + LIMIT_SECONDS + minute * 60)
    assert azure_box.watchdog_state()["stop_failures"] == 3 and azure_box.stops()
    trained = (T0 + LIMIT_SECONDS + 300, T0 + LIMIT_SECONDS + 300 + 0.29 * HOUR)
    assert _billed_hours_of_a_run(azure_box, trained) == pytest.approx(0.29)


def test_a_boot_whose_stop_arm_took_late_bills_until_the_box_went_down(azure_box, fake_metadata):
    assert azure_box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    fake_metadata.arm_status = 403
    _idle_past_the_limit(azure_box)
    fake_metadata.arm_status = 202
    azure_box.tick(T0 + LIMIT_SECONDS + 60)
    down = T0 + LIMIT_SECONDS + 90
    assert azure_box.run("stop_records.py", now=down).returncode == 0  # the OS shutdown
    azure_box.reboot("boot-2", at=T0 + 10 * HOUR)
    # A run that trained from the first stop request on: billed until the box went down.
    span = (T0 + LIMIT_SECONDS, T0 + 2 * HOUR)
    billed = _billed_hours_of_a_run(azure_box, span, booted_at=T0 + 10 * HOUR)
    assert billed * HOUR == pytest.approx(90.0)
