"""Numbers on `fab status` as a person reads them."""

from __future__ import annotations

import pytest

from ops.runs.readable import duration, log_sentence, money


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0, "0 s"), (45.4, "45 s"), (60, "1 min"), (12 * 60 + 20, "12 min"), (3900, "1 h 05 min"),
     (2700, "45 min"), (10 * 3600 - 10, "10 h 00 min"), (2 * 86400 + 3 * 3600, "2 d 03 h")],
)  # fmt: skip
def test_a_duration_reads_in_its_two_largest_units(seconds, said):
    assert duration(seconds) == said


def test_money_has_cents():
    assert (money(1.5), money(0.526), money(1234.5)) == ("$1.50", "$0.53", "$1,234.50")


def test_an_epochs_record_is_a_sentence_with_the_mae_to_two_decimals():
    record = {"kind": "epoch", "step": 80, "epoch": 4, "val_mae": 16.230854971820694,
              "val_baseline_mae": 33.92155, "best_val_mae": 15.1049, "time": 1.0}  # fmt: skip
    assert log_sentence(record) == (
        "epoch 4 done at step 80: validation MAE 16.23 mg/dL, best 15.10, "
        "constant-median baseline 33.92"
    )


def test_a_training_record_is_a_sentence_with_loss_rate_and_speed():
    record = {"kind": "train", "step": 90, "epoch": 5, "loss": 0.991511058807373,
              "lr": 0.0010757450182688276, "windows_per_s": 16769.58}  # fmt: skip
    assert log_sentence(record) == (
        "step 90 of epoch 5: train loss 0.9915, learning rate 1.08e-03, 16,770 windows/s"
    )
