"""A run's deadline on the clouds: the hard stop moves there, and back.

AWS against moto's EventBridge Scheduler; Azure against the local fake of ARM.
"""

from __future__ import annotations

import datetime

import pytest

from box import contract
from ops.cloud import api
from ops.target.resolve import from_outputs
from tests.fixtures.clouds import DAILY, GROUP, STOP_TARGET, VM, target_outputs

pytestmark = pytest.mark.e2e  # moto
UTC = datetime.timezone.utc
UNTIL = datetime.datetime(2026, 11, 25, 6, 30, tzinfo=UTC)
SCHEDULE = GROUP + "/providers/Microsoft.DevTestLab/schedules/shutdown-computevm-glucose-{}-vm"


def _aws():
    outputs = target_outputs("aws", ["i-0123456789abcdef0"], dailyStopSchedules=[DAILY])
    return from_outputs(outputs, "stack test")


def test_aws_deadline_is_a_one_time_stop_of_the_same_boxes_that_deletes_itself(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=True)
    once = scheduler.get_schedule(Name=f"{DAILY}-deadline")
    assert once["ScheduleExpression"] == "at(2026-11-25T06:30:00)"
    assert once["ScheduleExpressionTimezone"] == "UTC"
    assert once["Target"]["Input"] == STOP_TARGET["Input"]
    assert once["Target"]["RoleArn"] == STOP_TARGET["RoleArn"]
    assert once["ActionAfterCompletion"] == "DELETE"


def test_aws_daily_stop_starts_only_at_the_deadline_and_is_otherwise_unchanged(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=True)
    daily = scheduler.get_schedule(Name=DAILY)
    assert daily["StartDate"] == UNTIL
    assert daily["ScheduleExpression"] == "cron(0 20 * * ? *)"
    assert daily["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert daily["Target"]["Input"] == STOP_TARGET["Input"]
    assert daily["State"] == "ENABLED"


def test_aws_deadline_reads_back_as_set(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=True)
    assert api.deadline(_aws()) == UNTIL


def test_aws_a_later_run_moves_the_deadline_again(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=True)
    later = UNTIL + datetime.timedelta(hours=5)
    api.set_deadline(_aws(), later, past_daily_stop=True)
    assert api.deadline(_aws()) == later
    assert scheduler.get_schedule(Name=DAILY)["StartDate"] == later


def test_aws_clearing_the_deadline_brings_back_tonights_stop(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=True)
    api.clear_deadline(_aws())
    assert api.deadline(_aws()) is None
    assert "StartDate" not in scheduler.get_schedule(Name=DAILY)


def test_aws_a_deadline_before_the_daily_stop_moves_nothing(scheduler):
    api.set_deadline(_aws(), UNTIL, past_daily_stop=False)
    assert api.deadline(_aws()) is None
    assert "StartDate" not in scheduler.get_schedule(Name=DAILY)


def _azure(azure):
    azure.state.schedules = {SCHEDULE.format(n): "Enabled" for n in range(2)}
    outputs = target_outputs(
        "azure",
        [VM.format(0), VM.format(1)],
        dailyStopSchedules=[SCHEDULE.format(0), SCHEDULE.format(1)],
    )
    return from_outputs(outputs, "stack test")


def test_azure_deadline_tags_every_vm_for_the_keeper(azure):
    api.set_deadline(_azure(azure), UNTIL, past_daily_stop=False)
    for n in range(2):
        assert azure.state.tags[VM.format(n)] == {contract.DEADLINE_TAG: "2026-11-25T06:30:00Z"}


def test_azure_deadline_past_the_daily_stop_disables_each_vms_schedule(azure):
    api.set_deadline(_azure(azure), UNTIL, past_daily_stop=True)
    assert set(azure.state.schedules.values()) == {"Disabled"}
    assert api.deadline(_azure(azure)) == UNTIL


def test_azure_deadline_within_the_day_keeps_the_schedules_on(azure):
    api.set_deadline(_azure(azure), UNTIL, past_daily_stop=False)
    assert set(azure.state.schedules.values()) == {"Enabled"}


def test_azure_clearing_the_deadline_untags_the_vms_and_enables_the_schedules(azure):
    target = _azure(azure)
    azure.state.tags[VM.format(0)] = {"cost-scope": "glucose"}
    api.set_deadline(target, UNTIL, past_daily_stop=True)
    api.clear_deadline(target)
    assert azure.state.tags[VM.format(0)] == {"cost-scope": "glucose"}
    assert azure.state.tags[VM.format(1)] == {}
    assert set(azure.state.schedules.values()) == {"Enabled"}
    assert api.deadline(target) is None


def _spot_box(ec2, valid_until: datetime.datetime, kind: str = "persistent") -> str:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (request,) = ec2.request_spot_instances(
        Type=kind,
        InstanceInterruptionBehavior="stop",
        ValidUntil=valid_until,
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"]
    return ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"][0]["InstanceId"]


def _spot_target(box_id: str):
    return from_outputs(target_outputs("aws", [box_id], spot=True), "stack test")


def test_aws_a_persistent_request_valid_past_the_deadline_brings_the_box_back(ec2):
    box_id = _spot_box(ec2, UNTIL + datetime.timedelta(days=300))
    assert api.recovery_gaps(_spot_target(box_id), UNTIL) == []


def test_aws_a_request_that_lapses_before_the_deadline_is_named_with_the_fix(ec2):
    # A box from before the stack set ValidUntil: EC2's default, a week after launch.
    box_id = _spot_box(ec2, UNTIL - datetime.timedelta(hours=3))
    (gap,) = api.recovery_gaps(_spot_target(box_id), UNTIL)
    assert gap.startswith(f"box 0 ({box_id})'s spot request lapses 2026-11-25 03:30 UTC")
    assert "`pulumi up --replace`" in gap


def test_aws_a_one_time_request_brings_nothing_back(ec2):
    box_id = _spot_box(ec2, UNTIL + datetime.timedelta(days=300), kind="one-time")
    (gap,) = api.recovery_gaps(_spot_target(box_id), UNTIL)
    assert "has no live persistent spot request" in gap


def test_azure_a_spot_stack_without_recovery_says_an_eviction_waits(azure):
    outputs = target_outputs("azure", [VM.format(0)], spot=True, autoRecover=False)
    (gap,) = api.recovery_gaps(from_outputs(outputs, "stack test"), UNTIL)
    assert "an evicted box waits for `fab start`" in gap
