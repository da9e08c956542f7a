"""A log line's windows/s is the training steps' speed: the time of a validation between
two log lines is not the steps' time, and the ETA still counts it."""

from __future__ import annotations

import pytest
import torch

from trainer.reports import progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress.time, "monotonic", fake)
    return fake


def _interval_with_a_validation(clock: Clock) -> dict[str, float | None]:
    meter = progress.IntervalMeter(torch.device("cpu"), step=0, total_steps=20, every=10)
    for _ in range(10):
        meter.add(torch.tensor(1.0), 100)
        clock.now += 0.1  # a step of 100 windows: 1,000 windows/s
    with meter.excluded():
        clock.now += 9.0  # the validation and its checkpoints
    return meter.flush(10).values()


def test_a_validation_between_log_lines_leaves_windows_per_s_at_the_steps_speed(clock):
    assert _interval_with_a_validation(clock)["windows_per_s"] == pytest.approx(1000.0)


def test_the_eta_counts_the_validations_time(clock):
    # 10 steps took 10 s of wall time, validation included: 10 more take as long.
    assert _interval_with_a_validation(clock)["eta_s"] == pytest.approx(10.0)


def test_the_next_interval_starts_with_nothing_left_out(clock):
    meter = progress.IntervalMeter(torch.device("cpu"), step=0, total_steps=20, every=10)
    with meter.excluded():
        clock.now += 5.0
    meter.flush(0)
    meter.add(torch.tensor(1.0), 100)
    clock.now += 1.0
    assert meter.flush(1).values()["windows_per_s"] == pytest.approx(100.0)


def test_a_log_line_gives_the_mean_gradient_norm_of_its_finite_steps(clock):
    meter = progress.IntervalMeter(torch.device("cpu"), step=0, total_steps=20, every=3)
    for norm in (1.0, float("inf"), 3.0):  # fp16: a step GradScaler skipped is not a norm
        meter.add(torch.tensor(0.5), 10, torch.tensor(norm))
    meter.add(torch.tensor(0.5), 10)  # a micro-batch that only accumulated
    values = meter.flush(3).values()
    assert values["grad_norm"] == pytest.approx(2.0)
    assert values["loss"] == pytest.approx(2.0 / 3)  # per optimizer step
