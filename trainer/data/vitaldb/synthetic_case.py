"""Synthetic `.vital` cases, written with the `vitaldb` package's own writer.

A PPG-like PLETH at a known pulse rate (a systolic and a diastolic wave per beat, a
slow breathing wander, a little noise) with defects placed on request, beside a
numeric heart-rate track as real cases have. The benchmark prepares these, and the
tests check that each defect is rejected for its reason and only there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.data.vitaldb.lab_table import PLETH_TRACK

RAW_RATE_HZ = 500.0
# 2100-01-01 UTC, where vitaldb's anonymize() moves a recording's start.
RECORDING_START_UNIX_S = 4102444800.0
BASELINE = 50.0
AMPLITUDE = 20.0
NOISE = 0.2
FAST_PULSE_BPM = 300.0  # beyond PULSE_PLAUSIBLE_BPM
DEFECTS = ("gap", "flat", "clip", "fast_pulse", "noise")
HEART_RATE_TRACK = "Solar8000/HR"
# The other waveforms a real case records around PLETH (name, Hz), in the order the
# open dataset's files hold them: a reader has to get past them, as in real files.
WAVES_BEFORE_PLETH = (("SNUADC/ECG_II", 500.0), ("SNUADC/ART", 500.0), ("SNUADC/CVP", 500.0))
WAVES_AFTER_PLETH = (("BIS/EEG1_WAV", 128.0), ("Primus/AWP", 62.5))


@dataclass(frozen=True)
class Defect:
    kind: str  # one of DEFECTS
    start_s: float
    stop_s: float

    def __post_init__(self) -> None:
        assert self.kind in DEFECTS and 0 <= self.start_s < self.stop_s, self


def _pulse(phase: np.ndarray) -> np.ndarray:
    systolic = np.exp(-0.5 * ((phase - 0.22) / 0.07) ** 2)
    diastolic = 0.45 * np.exp(-0.5 * ((phase - 0.55) / 0.09) ** 2)
    return systolic + diastolic


def pleth(
    seconds: float, pulse_bpm: float, seed: int = 0, defects: Sequence[Defect] = ()
) -> np.ndarray:
    """float32 PLETH samples at RAW_RATE_HZ; NaN in gaps."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * RAW_RATE_HZ)) / RAW_RATE_HZ
    beat_hz = pulse_bpm / 60.0 * (1 + 0.02 * np.sin(2 * np.pi * 0.01 * t))  # a little HRV
    phase = np.cumsum(beat_hz) / RAW_RATE_HZ + rng.random()
    breathing = 2.0 * np.sin(2 * np.pi * 0.25 * t + rng.random() * 6.3)
    signal = BASELINE + breathing + AMPLITUDE * _pulse(phase % 1.0)
    signal += rng.normal(0.0, NOISE, t.size)
    rail = BASELINE + 2.0 * AMPLITUDE  # above every clean beat: the amplifier's limit
    for defect in defects:
        part = slice(round(defect.start_s * RAW_RATE_HZ), round(defect.stop_s * RAW_RATE_HZ))
        if defect.kind == "gap":
            signal[part] = np.nan
        elif defect.kind == "flat":
            signal[part] = BASELINE
        elif defect.kind == "clip":
            signal[part] = np.minimum(BASELINE + 4.0 * AMPLITUDE * _pulse(phase[part] % 1.0), rail)
        elif defect.kind == "fast_pulse":
            fast = FAST_PULSE_BPM / 60.0 * t[part]
            signal[part] = BASELINE + AMPLITUDE * _pulse(fast % 1.0)
        else:
            signal[part] = BASELINE + AMPLITUDE * rng.normal(0.0, 0.5, t[part].size)
    return signal.astype(np.float32)


def _records(samples: np.ndarray) -> list[dict]:
    """One record per recorded stretch: a gap is where no record is, as in real files."""
    finite = np.isfinite(samples)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.astype(np.int8), [0]))))
    return [
        {"dt": RECORDING_START_UNIX_S + start / RAW_RATE_HZ, "val": samples[start:stop]}
        for start, stop in edges.reshape(-1, 2)
    ]


def _other_wave(rng: np.random.Generator, seconds: float, rate: float) -> list[dict]:
    t = np.arange(round(seconds * rate)) / rate
    wave = np.sin(2 * np.pi * rng.uniform(0.5, 3.0) * t) + rng.normal(0.0, 0.1, t.size)
    return [{"dt": RECORDING_START_UNIX_S, "val": wave.astype(np.float32)}]


def write_case(
    path: Path,
    seconds: float,
    pulse_bpm: float = 72.0,
    seed: int = 0,
    defects: Sequence[Defect] = (),
    with_pleth: bool = True,
    other_waves: bool = False,
) -> Path:
    """A `.vital` file of `seconds` of recording (PLETH unless `with_pleth` is False;
    the other waveforms of a real case around it with `other_waves`)."""
    import vitaldb

    rng = np.random.default_rng(seed + 1)
    vital = vitaldb.VitalFile()
    vital.dtstart, vital.dtend, vital.dgmt = (
        RECORDING_START_UNIX_S,
        RECORDING_START_UNIX_S + seconds,
        0,
    )
    for name, rate in WAVES_BEFORE_PLETH if other_waves else ():
        vital.add_track(name, _other_wave(rng, seconds, rate), srate=rate)
    if with_pleth:
        vital.add_track(
            PLETH_TRACK, _records(pleth(seconds, pulse_bpm, seed, defects)), srate=RAW_RATE_HZ
        )
    for name, rate in WAVES_AFTER_PLETH if other_waves else ():
        vital.add_track(name, _other_wave(rng, seconds, rate), srate=rate)
    heart_rate = [
        {"dt": RECORDING_START_UNIX_S + second, "val": float(pulse_bpm)}
        for second in range(0, int(seconds), 2)
    ]
    vital.add_track(HEART_RATE_TRACK, heart_rate, unit="/min")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    vital.to_vital(str(path), compresslevel=1)
    return path
