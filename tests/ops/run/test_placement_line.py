"""`fab status` says what the boxes run on, at what price, and why not the first choice:
from the stack's outputs, and from box 0's own boot record once it answers (which knows a
resize by `fab start`)."""

from __future__ import annotations

import json

from box.contract import LaunchRecord, RunRecord
from ops.run.look import StatusView
from ops.run.status import BoxSnapshot, RunSnapshot
from ops.target.resolve import from_outputs
from stack import catalog
from tests.fixtures.clouds import target_outputs
from trainer.reports import cost

TRIED = [
    {
        "size": "g6.xlarge",
        "zone": "us-east-1a",
        "market": "on-demand",
        "refusal": "InsufficientInstanceCapacity: no room",
    },
    {
        "size": "g6.xlarge",
        "zone": "us-east-1b",
        "market": "on-demand",
        "refusal": "InsufficientInstanceCapacity: no room",
    },
    {"size": "g5.xlarge", "zone": "us-east-1b", "market": "on-demand", "refusal": ""},
    {
        "size": "g5.xlarge",
        "zone": "us-east-1a",
        "market": "on-demand",
        "refusal": "not tried: an earlier candidate was taken",
    },
]
TAKEN = {"size": "g5.xlarge", "zone": "us-east-1b", "market": "on-demand"}


def _view(snapshot=None) -> StatusView:
    outputs = target_outputs("aws", ["i-0123456789abcdef0"], placement=TAKEN, placementTried=TRIED)
    return StatusView(from_outputs(outputs, "stack test"), snapshot=snapshot)


def test_status_names_the_fallback_taken_its_price_and_what_was_refused():
    price = catalog.lookup("g5.xlarge", "aws").on_demand_usd_per_hour
    assert _view().placement() == (
        f"g5.xlarge us-east-1b on-demand ${price:.2f}/h (fallback 3 of 4; "
        "g6.xlarge: InsufficientInstanceCapacity)"
    )
    assert (
        "placement:  g5.xlarge us-east-1b on-demand $1.01/h (fallback 3 of 4;" in _view().render()
    )


def test_a_box_resized_by_fab_start_is_priced_at_the_size_it_booted_on():
    boot = cost.Uptime(0.0, None, "g6.xlarge on-demand")
    snap = RunSnapshot(
        "r1", "running", RunRecord(), {}, [], LaunchRecord(), BoxSnapshot({}, {}, (boot,)), 10.0
    )
    line = _view(snap).placement()
    assert line.startswith("g6.xlarge us-east-1b on-demand $0.80/h")
    assert line.endswith("(not what `pulumi up` took: resized by `fab start`)")


def test_a_target_without_placement_says_nothing():
    plain = StatusView(from_outputs(target_outputs("aws", ["i-0123456789abcdef0"]), "stack test"))
    assert plain.placement() == ""


def test_status_json_carries_the_launch_record_as_fab_train_wrote_it():
    launch = LaunchRecord(run_id="r1", started_at=0.0, hourly_price_usd=0.8, boxes=1)
    snap = RunSnapshot("r1", "running", RunRecord(), {}, [], launch, BoxSnapshot({}, {}, ()), 10.0)
    found = json.loads(json.dumps(_view(snap).to_json()))
    assert found["run"]["launch"] == {
        "run_id": "r1",
        "started_at": 0.0,
        "hourly_price_usd": 0.8,
        "boxes": 1,
    }
