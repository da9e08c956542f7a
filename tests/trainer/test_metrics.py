"""trainer.metrics: the numbers every report shows, checked on points worked out by hand."""

import json

import numpy as np
import pytest

from trainer import metrics

# (reference, prediction) pairs well inside each zone, worked out from the published
# boundary lines (see the constants in trainer/metrics.py).
CLARKE_POINTS = {
    "A": [(100, 100), (100, 119), (50, 65), (60, 40), (300, 250)],
    "B": [(100, 130), (200, 150), (300, 200), (80, 150), (250, 320)],
    "C": [(100, 250), (150, 25), (170, 50), (250, 380)],
    "D": [(50, 120), (50, 80), (300, 150), (250, 100)],
    "E": [(50, 200), (60, 300), (200, 50), (300, 30)],
}
PARKES_T1_POINTS = {
    "A": [(100, 100), (200, 230), (40, 20), (500, 480), (600, 600)],
    "B": [(100, 150), (200, 150), (20, 55), (400, 540)],
    "C": [(100, 200), (200, 60), (20, 80)],
    "D": [(20, 120), (300, 30), (60, 250)],
    "E": [(20, 200), (10, 400), (40, 500)],
}


def _zones_of(grid, points):
    ref, pred = zip(*points, strict=True)
    return grid(np.array(ref, dtype=float), np.array(pred, dtype=float)).tolist()


@pytest.mark.parametrize("zone", metrics.ZONES)
def test_clarke_zones_of_hand_picked_points(zone):
    points = CLARKE_POINTS[zone]
    assert _zones_of(metrics.clarke_zones, points) == [zone] * len(points)


@pytest.mark.parametrize("zone", metrics.ZONES)
def test_parkes_type1_zones_of_hand_picked_points(zone):
    points = PARKES_T1_POINTS[zone]
    assert _zones_of(metrics.parkes_zones, points) == [zone] * len(points)


def test_clarke_twenty_percent_line_belongs_to_zone_a():
    assert _zones_of(metrics.clarke_zones, [(100, 120), (100, 80), (100, 121), (100, 79)]) == [
        "A",
        "A",
        "B",
        "B",
    ]


def test_clarke_hypo_hyper_corners_are_zone_e_inclusive():
    assert _zones_of(metrics.clarke_zones, [(180, 70), (70, 180)]) == ["E", "E"]


def test_parkes_follows_the_published_polyline_past_its_bend():
    # Past (280, 380) the upper A/B boundary bends down to (430, 550): (400, 540) is
    # above it (B), although it is below the extension of the previous segment.
    assert _zones_of(metrics.parkes_zones, [(400, 540)]) == ["B"]


def test_parkes_boundary_vertex_belongs_to_the_inner_zone():
    assert _zones_of(metrics.parkes_zones, [(140, 170), (140, 171)]) == ["A", "B"]


def test_zones_come_back_one_letter_per_pair_in_input_order():
    zones = metrics.clarke_zones([100, 50, 200], [100, 200, 50])
    assert zones.shape == (3,)
    assert zones.tolist() == ["A", "E", "E"]


def test_zone_percentages_lists_every_letter_even_when_absent():
    assert metrics.zone_percentages(["A", "A", "B", "E"]) == {
        "A": 50.0,
        "B": 25.0,
        "C": 0.0,
        "D": 0.0,
        "E": 25.0,
    }


def test_zone_percentages_rejects_unknown_letters():
    with pytest.raises(ValueError, match="unknown zone letters"):
        metrics.zone_percentages(["A", "F"])


def test_mae_rmse_mard_on_a_worked_example():
    ref = [100.0, 200.0]
    pred = [110.0, 170.0]
    assert metrics.mae(ref, pred) == pytest.approx(20.0)
    assert metrics.rmse(ref, pred) == pytest.approx(np.sqrt((100 + 900) / 2))
    assert metrics.mard(ref, pred) == pytest.approx((10.0 + 15.0) / 2)


@pytest.mark.parametrize(
    ("ref", "pred", "inside"),
    [
        (99, 114, True),  # below 100: ±15 mg/dL, edge included
        (99, 84, True),
        (99, 114.5, False),
        (50, 35, True),
        (50, 34.9, False),
        (100, 115, True),  # at 100 the 15% rule takes over: 15 mg/dL exactly
        (100, 115.1, False),
        (200, 230, True),  # 15% of 200 = 30 mg/dL, edge included
        (200, 170, True),
        (200, 169.9, False),
    ],
)
def test_iso15197_limits_and_their_edges(ref, pred, inside):
    assert metrics.iso15197_agreement([ref], [pred]) == (100.0 if inside else 0.0)


def test_iso15197_agreement_is_a_percentage_of_pairs():
    assert metrics.iso15197_agreement([80, 80, 200, 200], [90, 120, 220, 300]) == 50.0


def test_mae_by_range_splits_on_the_reference_and_gives_none_for_empty_ranges():
    by_range = metrics.mae_by_range([60, 70, 180, 150], [50, 80, 190, 140])
    assert by_range == {"<70": 10.0, "70-180": 10.0, ">180": None}


def test_regression_report_is_json_and_carries_the_constant_baseline():
    ref = np.array([60.0, 100.0, 150.0, 250.0])
    report = metrics.regression_report(ref, ref + 5.0, baseline_value=125.0)
    json.dumps(report, allow_nan=False)
    assert report["n"] == 4
    assert report["mae"] == pytest.approx(5.0)
    assert report["clarke"]["A"] == 100.0
    base = report["baseline"]
    assert base["value"] == 125.0
    assert base["mae"] == pytest.approx((65 + 25 + 25 + 125) / 4)
    assert base["mae_by_range"] == {"<70": 65.0, "70-180": 25.0, ">180": 125.0}
    assert set(base) >= {"mae", "rmse", "mard", "iso15197_pct", "clarke", "parkes", "n"}


def test_mismatched_lengths_are_refused_with_both_counts():
    with pytest.raises(ValueError, match="3 values but prediction has 2"):
        metrics.mae([1, 2, 3], [1, 2])


def test_non_finite_values_are_refused_and_counted():
    with pytest.raises(ValueError, match="prediction holds 1 NaN/inf"):
        metrics.rmse([100, 120], [100, float("nan")])


def test_non_positive_reference_is_refused():
    with pytest.raises(ValueError, match="values <= 0 mg/dL"):
        metrics.mard([0, 100], [10, 100])


def test_empty_input_is_refused():
    with pytest.raises(ValueError, match="no values to score"):
        metrics.mae([], [])
