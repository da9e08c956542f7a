"""`--param NAME=SPEC`: what a sweep may vary, checked by the trainer's own bounds."""

import pytest

from trainer.config import UserError
from trainer.sweep.space import Param, grid_size, parse_param, parse_params, trial_flags


def test_a_log_range_of_learning_rates():
    assert parse_param("lr=1e-4:1e-2:log") == Param("lr", low=1e-4, high=1e-2, log=True)


def test_listed_values_keep_their_type():
    assert parse_param("batch-size=64,128").values == (64, 128)
    assert parse_param("model=resnet18,resnet34").values == ("resnet18", "resnet34")


def test_an_integer_range_stays_integer():
    param = parse_param("patience=2:8")
    assert (param.low, param.high, param.kind) == (2, 8, int)


def test_the_spec_reads_back_as_written():
    for text in ("lr=0.0001:0.01:log", "dropout=0.0,0.1,0.3", "seed=0,1,2"):
        assert parse_param(parse_param(text).text()) == parse_param(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("dropout=0:1.5", "--dropout 1.5: expected 0 <= p < 1"),
        ("weight-decay=-1,0.1", "--weight-decay -1.0: expected 0 to 1"),
        ("kernel-size=3,4", "--kernel-size 4: expected an odd width"),
        ("kernel-size=3:7", "--kernel-size takes listed values only"),
        ("lr=0:1e-2:log", "a log range needs LOW > 0"),
        ("lr=1e-2:1e-4", "LOW must be below HIGH"),
        ("lr=fast", "'fast' is not a number"),
        ("batch-size=64.5", "'64.5' is not a whole number"),
        ("momentum=0.9", "NAME one of lr, weight-decay"),
        ("dropout=0.1,0.1", "a value is listed twice"),
    ],
)
def test_a_bad_spec_is_refused_naming_it_and_why(text, why):
    with pytest.raises(UserError) as refused:
        parse_param(text)
    assert str(refused.value).startswith(f"--param {text}:") and why in str(refused.value)


def test_a_flag_given_twice_is_refused():
    with pytest.raises(UserError, match="--param lr is given twice"):
        parse_params(["lr=1e-3,1e-2", "lr=1e-4:1e-2"])


def test_a_grid_is_the_product_of_the_listed_values():
    assert grid_size(parse_params(["lr=1e-3,3e-3,1e-2", "dropout=0,0.3"])) == 6


def test_a_grid_refuses_a_range():
    with pytest.raises(UserError, match="a grid needs listed values"):
        grid_size(parse_params(["lr=1e-4:1e-2:log"]))


def test_a_trials_values_become_train_flags():
    assert trial_flags({"lr": 0.001, "model": "resnet18"}) == [
        "--lr", "0.001", "--model", "resnet18"
    ]  # fmt: skip


def test_a_count_flag_takes_counts_as_every_flag_does():
    assert parse_param("batch-size=8k,16k").values == (8_000, 16_000)
    ranged = parse_param("batch-size=1k:1.6e4")
    assert (ranged.low, ranged.high) == (1_000, 16_000)
