"""What a leftover costs and how `fab leaks` says it: escaped, totalled, never a made-up
price."""

from __future__ import annotations

import pytest

from ops.leaks import aws
from ops.leaks.found import Cost, Leak, box_cost, report


def test_a_box_is_priced_at_the_catalogs_figure_and_market():
    assert box_cost("aws", "g5.xlarge", spot=False).usd_per_hour == 1.006
    assert box_cost("aws", "G5.XLARGE", spot=True).basis == "g5.xlarge spot, catalog 2025-07-01"
    retired = box_cost("azure", "Standard_NC6s_v3", spot=False)  # still billing if left
    assert retired.usd_per_hour == 3.06


@pytest.mark.parametrize(
    ("cloud", "size", "why"),
    [
        ("aws", "x9.huge", "x9.huge is not in the catalog"),
        ("aws", "p5e.48xlarge", "p5e.48xlarge: no on-demand price (2026-11-29: the AWS Price"),
    ],
)
def test_a_box_the_catalog_does_not_price_has_an_unknown_cost_that_says_why(cloud, size, why):
    cost = box_cost(cloud, size, spot=False)
    assert not cost.known and cost.said().startswith(f"cost unknown: {why}")


def test_an_open_spot_request_bills_nothing_yet_and_says_what_it_will_launch():
    leak = aws._spot_request(  # as EC2 describes a persistent request whose box is gone
        {
            "SpotInstanceRequestId": "sir-1",
            "State": "open",
            "Type": "persistent",
            "LaunchSpecification": {"InstanceType": "g5.xlarge"},
        }
    )
    assert leak.cost.usd_per_hour == 0.0
    assert leak.cost.basis == (
        "nothing until it launches a g5.xlarge: then $0.400/h (g5.xlarge spot, catalog 2025-07-01)"
    )


def test_the_report_totals_the_known_costs_and_names_the_unknown_kinds():
    lines = report(
        "stack s",
        [
            Leak("instance", "i-1", "running", Cost(1.5, basis="b")),
            Leak("volume", "vol-1", "100 GiB", Cost(usd_per_month=8.0, basis="b")),
            Leak("snapshot", "snap-1", "", Cost(basis="not priced")),
            Leak("snapshot", "snap-2", "", Cost(basis="not priced")),
        ],
    )
    assert lines[0] == "stack s: 4 things left:"
    assert lines[-1] == (
        "Billing known: $1.500/h ($1,095.00/month) + $8.00/month; cost unknown for 2 (snapshot)."
    )


def test_a_clean_report_is_one_line():
    assert report("stack s", []) == ["stack s: nothing left that bills."]
