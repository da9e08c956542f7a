"""trainer.data.vitaldb.waveform: band-pass, resampling, windows and quality verdicts on
synthetic PLETH with each defect placed at a known time."""

import numpy as np
import pytest

from trainer.data.vitaldb import waveform
from trainer.data.vitaldb.synthetic_case import RAW_RATE_HZ, Defect, pleth

RATE = 100.0
LENGTH = 100  # one-second windows


def _verdicts(samples: np.ndarray, length: int = LENGTH, stride: int = LENGTH):
    conditioned = waveform.condition(samples, RAW_RATE_HZ, RATE)
    starts = waveform.window_starts(conditioned.signal.size, length, stride)
    labelled = np.ones(starts.size, dtype=bool)
    return starts, waveform.judge(conditioned, starts, length, labelled)


def _seconds_rejected_for(reasons: np.ndarray, reason: str) -> set[int]:
    code = 1 + waveform.REJECT_REASONS.index(reason)
    return set(np.flatnonzero(reasons == code).tolist())


def _edges(seconds: int) -> set[int]:
    guard = int(waveform.EDGE_GUARD_SECONDS)
    return {*range(guard), *range(seconds - guard, seconds)}


@pytest.mark.parametrize("bpm", [40.0, 72.0, 180.0])
def test_clean_pulse_keeps_every_window_but_the_filter_guards_at_the_edges(bpm):
    _, reasons = _verdicts(pleth(120, bpm, seed=1))
    assert _seconds_rejected_for(reasons, "missing") == _edges(120)
    assert set(np.flatnonzero(reasons != waveform.KEPT)) == _edges(120)


def test_resampled_signal_keeps_the_pulse_rate_and_the_time_grid():
    conditioned = waveform.condition(pleth(60, 90.0, seed=2), RAW_RATE_HZ, RATE)
    signal = conditioned.signal[200:-200]
    spectrum = np.abs(np.fft.rfft(signal - signal.mean()))
    peak_hz = np.fft.rfftfreq(signal.size, 1 / RATE)[spectrum.argmax()]
    assert conditioned.signal.size == 60 * RATE
    assert peak_hz == pytest.approx(90.0 / 60, abs=0.05)


def test_band_pass_removes_the_baseline_and_breathing():
    conditioned = waveform.condition(pleth(60, 72.0, seed=3), RAW_RATE_HZ, RATE)
    assert abs(np.nanmean(conditioned.signal)) < 0.5  # the raw baseline sits at 50


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("gap", "missing"),
        ("flat", "flat_line"),
        ("clip", "clipping"),
        ("fast_pulse", "pulse_rate"),
        ("noise", "pulse_rate"),
    ],
)
def test_each_defect_is_rejected_for_its_reason_where_it_is(kind, reason):
    _, reasons = _verdicts(pleth(180, 75.0, seed=4, defects=[Defect(kind, 60, 100)]))
    rejected = _seconds_rejected_for(reasons, reason) - _edges(180)
    assert set(range(61, 99)) <= rejected  # the defect's inside, whatever its edges
    near = set(range(55, 106))
    assert rejected <= near  # ... and nothing far from it, for any reason
    assert set(np.flatnonzero(reasons != waveform.KEPT)) - _edges(180) <= near


def test_a_window_touching_a_gap_is_dropped_with_the_guard_around_it():
    _, reasons = _verdicts(pleth(120, 72.0, seed=5, defects=[Defect("gap", 50.5, 60)]))
    guard = int(waveform.EDGE_GUARD_SECONDS)
    expected = set(range(50 - guard, 60 + guard)) | _edges(120)
    assert _seconds_rejected_for(reasons, "missing") == expected


def test_overlapping_windows_start_every_stride_samples():
    starts, reasons = _verdicts(pleth(30, 72.0, seed=6), length=200, stride=50)
    assert starts[:3].tolist() == [0, 50, 100]
    assert starts[-1] + 200 <= 30 * RATE < starts[-1] + 200 + 50
    assert reasons.size == starts.size


def test_unlabelled_windows_are_counted_as_such_and_not_judged():
    conditioned = waveform.condition(pleth(30, 72.0, seed=7), RAW_RATE_HZ, RATE)
    starts = waveform.window_starts(conditioned.signal.size, LENGTH, LENGTH)
    reasons = waveform.judge(conditioned, starts, LENGTH, np.zeros(starts.size, dtype=bool))
    assert set(reasons.tolist()) == {1 + waveform.REJECT_REASONS.index("unlabelled")}


def test_windows_are_the_signal_at_their_start():
    signal = np.arange(1000, dtype=np.float32)
    windows = waveform.windows_at(signal, np.array([0, 300]), LENGTH)
    assert windows.dtype == np.float32 and windows.shape == (2, LENGTH)
    assert windows[1, 0] == 300 and windows[1, -1] == 399
