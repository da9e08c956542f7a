"""trainer.data.vitaldb.labels: nearest and linear labels within the limit, with their gaps."""

import numpy as np
import pytest

from trainer.data.vitaldb.lab_table import GlucoseDraws
from trainer.data.vitaldb.labels import label_windows

DRAWS = GlucoseDraws(dt_s=np.array([1000.0, 2000.0]), mg_dl=np.array([100.0, 200.0]))
LIMIT_S = 600.0


def test_nearest_takes_the_nearest_draw_and_records_the_signed_gap():
    labels = label_windows(DRAWS, np.array([900.0, 1400.0, 1700.0]), "nearest", LIMIT_S)
    assert labels.mg_dl.tolist() == [100.0, 100.0, 200.0]
    assert labels.gap_s.tolist() == [100.0, -400.0, 300.0]  # draw time minus window centre


def test_nearest_prefers_the_earlier_draw_on_a_tie():
    assert label_windows(DRAWS, np.array([1500.0]), "nearest", LIMIT_S).mg_dl[0] == 100.0


def test_nearest_drops_windows_beyond_the_limit():
    labels = label_windows(DRAWS, np.array([300.0, 2601.0, 2600.0]), "nearest", LIMIT_S)
    assert labels.labelled.tolist() == [False, False, True]
    assert np.isnan(labels.gap_s[:2]).all()


def test_linear_interpolates_between_the_bracketing_draws():
    labels = label_windows(DRAWS, np.array([1500.0, 1250.0, 2000.0]), "linear", 1000.0)
    assert labels.mg_dl.tolist() == pytest.approx([150.0, 125.0, 200.0])
    assert labels.gap_s.tolist() == [-500.0, -250.0, 0.0]  # to the nearer of the two


def test_linear_needs_both_draws_within_the_limit():
    labels = label_windows(DRAWS, np.array([1500.0, 1100.0, 900.0, 2100.0]), "linear", LIMIT_S)
    # 1500 s is 500 s from both; 1100 s is 900 s from the later draw; the others lie
    # outside the span of the draws.
    assert labels.labelled.tolist() == [True, False, False, False]


def test_a_case_with_one_draw_labels_only_at_it_with_linear():
    one = GlucoseDraws(dt_s=np.array([50.0]), mg_dl=np.array([120.0]))
    assert label_windows(one, np.array([50.0, 60.0]), "linear", LIMIT_S).labelled.tolist() == [
        True,
        False,
    ]
    assert label_windows(one, np.array([0.0, 600.0]), "nearest", LIMIT_S).mg_dl.tolist() == [
        120.0,
        120.0,
    ]
