"""`fab train`'s deadline: decided from the flags and the plan, held by the cloud (moto)."""

from __future__ import annotations

import datetime
import json

import pytest
from invoke.exceptions import Exit

from ops.cloud import api
from ops.run import deadline
from ops.target.resolve import from_outputs
from tests.fixtures.clouds import DAILY, set_deadline_as_fab_train_does, target_outputs

pytestmark = pytest.mark.e2e  # moto
UTC = datetime.timezone.utc
# The seeds' M3: 12M windows of 100 samples. 100 epochs are hours on any size; the
# trainer's default 20 on a g5.xlarge are about the hour to the stop the tests set,
# which made the warning depend on the second a test ran in.
M3 = {"windows": 12_000_000, "window_length": 100}
EPOCHS = 100


@pytest.fixture
def data_uri(empty_aws_account):
    storage = empty_aws_account.create_bucket(prefix="")
    uri = f"{storage}/datasets/m3"
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    empty_aws_account.client().put_object(
        Bucket=bucket, Key="datasets/m3/meta.json", Body=json.dumps(M3).encode()
    )
    return uri


def _target(stop_in_hours: float = 1.0, **more):
    """A g5.xlarge stack whose daily stop is `stop_in_hours` from now (UTC)."""
    stop = datetime.datetime.now(UTC) + datetime.timedelta(hours=stop_in_hours)
    outputs = target_outputs(
        "aws",
        ["i-0123456789abcdef0"],
        vmSize="g5.xlarge",
        dailyStopSchedules=[DAILY],
        autoShutdownTime=f"{stop:%H:%M}",
        autoShutdownTimeZone="UTC",
        maxRunHours=72,
        **more,
    )
    return from_outputs(outputs, "stack test")


def test_a_run_that_outlasts_tonights_stop_is_warned_and_the_stop_stays(scheduler, data_uri):
    said = []
    found = set_deadline_as_fab_train_does(_target(), data_uri, EPOCHS, "", said.append)
    assert "needs about" in said[0] and "--hours" in said[0]
    assert not found.past_daily_stop
    assert api.deadline(_target()) is None


def test_hours_move_the_clouds_stop_to_the_deadline(scheduler, data_uri):
    found = set_deadline_as_fab_train_does(_target(), data_uri, 0, "30", print)
    assert found.past_daily_stop
    assert api.deadline(_target()) == found.until.replace(microsecond=0)


def test_hours_auto_take_the_plans_estimate_capped_by_max_run_hours(scheduler, data_uri):
    found = set_deadline_as_fab_train_does(_target(), data_uri, EPOCHS, "auto", print)
    hours = (found.until - datetime.datetime.now(UTC)).total_seconds() / 3600
    planned = deadline.planned_hours(_target(), data_uri, EPOCHS)
    assert hours == pytest.approx(min(deadline.auto_hours(planned), 72), abs=0.01)


def test_hours_auto_without_a_known_dataset_size_say_to_pass_hours(scheduler, data_uri):
    with pytest.raises(Exit, match="--hours auto: `fab plan` cannot estimate this run"):
        set_deadline_as_fab_train_does(_target(), data_uri + "-missing", 0, "auto", print)


def test_a_box_no_cloud_knows_of_has_no_deadline_and_refuses_hours():
    box = from_outputs({**target_outputs("aws", []), "boxIds": None}, "target file box.json")
    assert set_deadline_as_fab_train_does(box, "s3://b/datasets/d", 0, "", print) is None
    with pytest.raises(Exit, match="names no cloud boxes: no cloud stop to move"):
        set_deadline_as_fab_train_does(box, "s3://b/datasets/d", 0, "5", print)
