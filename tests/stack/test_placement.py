"""The candidates in the stack's order, the refusals sorted, and the one placement line."""

from __future__ import annotations

import pytest

from stack import placement
from stack.placement import (
    CAPACITY,
    NOT_TRIED,
    ON_DEMAND,
    OTHER,
    QUOTA,
    RESTRICTION,
    SPOT,
    Candidate,
)

EXCEEDING = (
    "Operation could not be completed as it results in exceeding approved "
    "standardNCADSA100v4Family Cores quota"
)
SELLING = {"g6.xlarge": {"us-east-1a", "us-east-1b"}, "g5.xlarge": {"us-east-1b", "us-east-1c"}}


def test_candidates_go_market_then_size_then_zone_and_unsold_pairs_say_so():
    every = placement.candidates(["g6.xlarge", "g5.xlarge"], [], (SPOT, ON_DEMAND), SELLING)
    assert [(t.candidate.market, t.candidate.size, t.candidate.zone) for t in every][:3] == [
        (SPOT, "g6.xlarge", "us-east-1a"),
        (SPOT, "g6.xlarge", "us-east-1b"),
        (SPOT, "g6.xlarge", "us-east-1c"),
    ]
    assert len(every) == 2 * 2 * 3  # every zone selling a candidate, by name
    assert {
        t.refusal
        for t in every
        if t.candidate.zone == "us-east-1c" and t.candidate.size == "g6.xlarge"
    } == {"not sold in us-east-1c"}


def test_the_stacks_zones_are_taken_in_its_order_and_no_other():
    every = placement.candidates(["g5.xlarge"], ["us-east-1c", "us-east-1b"], (ON_DEMAND,), SELLING)
    assert [t.candidate.zone for t in every] == ["us-east-1c", "us-east-1b"]


def test_a_family_without_quota_is_refused_with_the_quotas_line():
    every = placement.candidates(["g6.xlarge"], ["us-east-1a"], (SPOT, ON_DEMAND), SELLING)
    refused = placement.with_quota(every, {("g6.xlarge", SPOT): "quota 'All G and VT Spot' is 0"})
    assert [t.refusal for t in refused] == ["quota 'All G and VT Spot' is 0", ""]


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        ("InsufficientInstanceCapacity", "", CAPACITY),
        ("AllocationFailed", "", CAPACITY),
        ("ZonalAllocationFailed", "", CAPACITY),
        ("SkuNotAvailable", "NotAvailableForSubscription in eastus", RESTRICTION),
        ("Unsupported", "not supported in your requested Availability Zone", RESTRICTION),
        ("NotAvailableForSubscription", "", RESTRICTION),
        ("VcpuLimitExceeded", "", QUOTA),
        ("OperationNotAllowed", EXCEEDING, QUOTA),
        ("OperationNotAllowed", "the VM is being deleted", OTHER),
        ("UnauthorizedOperation", "", OTHER),
    ],
)  # fmt: skip
def test_refusals_are_sorted_into_capacity_restriction_quota_and_other(code, message, kind):
    assert placement.refusal_kind(code, message) == kind


def _tried(*entries):
    return [{"size": s, "zone": z, "market": ON_DEMAND, "refusal": r} for s, z, r in entries]


def test_the_placement_line_names_the_fallback_and_why_not_the_first_choice():
    tried = _tried(
        ("g6.xlarge", "us-east-1a", "InsufficientInstanceCapacity: no room"),
        ("g5.xlarge", "us-east-1b", ""),
        ("g5.xlarge", "us-east-1a", NOT_TRIED),
        ("g5.2xlarge", "us-east-1a", NOT_TRIED),
    )
    taken = {"size": "g5.xlarge", "zone": "us-east-1b", "market": ON_DEMAND}
    assert placement.placement_line(taken, tried, 1.006) == (
        "g5.xlarge us-east-1b on-demand $1.01/h (fallback 2 of 4; g6.xlarge: "
        "InsufficientInstanceCapacity)"
    )


def test_the_first_choice_says_so():
    tried = _tried(("g6.xlarge", "us-east-1a", ""))
    taken = {"size": "g6.xlarge", "zone": "us-east-1a", "market": ON_DEMAND}
    assert placement.placement_line(taken, tried, 0.8048).endswith("$0.80/h (first choice)")


def test_nothing_left_lists_each_candidate_and_what_to_do():
    every = placement.candidates(["g6.xlarge"], ["us-east-1c"], (ON_DEMAND,), SELLING)
    message = placement.nothing_left(every, 2)
    assert message.splitlines()[:2] == [
        "no candidate could take 2 box(es); each was refused:",
        "  - g6.xlarge us-east-1c on-demand: not sold in us-east-1c",
    ]
    assert "fallbackVmSizes or zones" in message


NO_ROOM = (
    "InsufficientInstanceCapacity: We currently do not have sufficient g6.xlarge capacity "
    "in the Availability Zone you requested (us-east-1a). Our system will be working on "
    "provisioning additional capacity."
)


def test_nothing_left_says_each_refusal_in_one_short_line_and_the_clouds_text_once():
    refused = [
        placement.Tried(Candidate("g6.xlarge", zone, ON_DEMAND), NO_ROOM)
        for zone in ("us-east-1a", "us-east-1b", "us-east-1d")
    ]
    skipped = placement.Tried(
        Candidate("g6.xlarge", "us-east-1c", ON_DEMAND), "not sold in us-east-1c"
    )
    lines = placement.nothing_left([*refused, skipped]).splitlines()
    assert lines[1:5] == [
        "  - g6.xlarge us-east-1a on-demand: InsufficientInstanceCapacity",
        "  - g6.xlarge us-east-1b on-demand: InsufficientInstanceCapacity",
        "  - g6.xlarge us-east-1d on-demand: InsufficientInstanceCapacity",
        "  - g6.xlarge us-east-1c on-demand: not sold in us-east-1c",
    ]
    assert lines.count(f"  {NO_ROOM}") == 1
    assert sum(NO_ROOM in line for line in lines) == 1


def test_the_clouds_words_are_each_text_several_candidates_gave_once_in_order():
    other = "VcpuLimitExceeded: You have requested more vCPU capacity than your current limit"
    once = "Unsupported: The requested configuration is currently not supported"
    refusals = [other, NO_ROOM, "not sold in us-east-1c", other, NO_ROOM, NOT_TRIED, "", once]
    assert placement.cloud_words(refusals) == [other, NO_ROOM]


def test_a_text_only_one_candidate_gave_stays_on_its_line():
    once = "Unsupported: The requested configuration is currently not supported"
    tried = [placement.Tried(Candidate("g6.xlarge", "us-east-1e", ON_DEMAND), once)]
    assert placement.nothing_left(tried).splitlines()[1:3] == [
        f"  - g6.xlarge us-east-1e on-demand: {once}",
        "Wait and run `pulumi up` again, or add fallbackVmSizes or zones "
        "(docs/capacity.md, 'When the cloud has no GPU')",
    ]


def test_a_size_skipped_because_a_zone_does_not_sell_it_says_so_not_not_tried():
    every = placement.candidates(["g5.xlarge"], ["us-east-1a"], (ON_DEMAND,), SELLING)
    assert [t.refusal for t in every] == [placement.not_sold_in("us-east-1a")]
    tried = [
        {**every[0].to_json()},
        {"size": "g5.2xlarge", "zone": "us-east-1a", "market": ON_DEMAND, "refusal": ""},
    ]
    taken = tried[1]
    line = placement.placement_line(taken, tried, None)
    assert line.endswith("(fallback 2 of 2; g5.xlarge: not sold in us-east-1a)")
    assert NOT_TRIED not in line


def test_the_price_table_holds_both_markets_of_every_size():
    table = placement.price_table("aws", ["g6.xlarge", "g6.xlarge", "nonsense"])
    assert set(table) == {"g6.xlarge on-demand", "g6.xlarge spot"}
    assert placement.price_table("local", ["g6.xlarge"]) == {}


def test_a_candidate_reads_back_what_it_wrote():
    candidate = Candidate("g5.xlarge", "us-east-1b", SPOT)
    assert Candidate.from_json(candidate.to_json()) == candidate
