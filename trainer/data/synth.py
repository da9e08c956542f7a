"""Synthetic PPG-like dataset whose glucose label the waveform really carries.

Each window holds a few beats of a two-Gaussian pulse (systolic peak, dicrotic
notch, diastolic peak). The window's glucose sets the pulse's shape: a higher
glucose widens the systolic peak, raises the diastolic-to-systolic ratio and
deepens the notch. Each case (subject) has its own heart rate, amplitude, noise
level, baseline wander and a small personal offset in pulse shape, so a model must
learn the shape-glucose relation across subjects, while a constant predictor
cannot. Everything is a pure function of the seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trainer.config import SynthConfig, UserError
from trainer.data.dataset import DATASET_FILES

SAMPLE_RATE_HZ = 50.0
GLUCOSE_MIN_MG_DL = 40.0
GLUCOSE_MAX_MG_DL = 400.0
GLUCOSE_PIVOT_MG_DL = 140.0
GLUCOSE_SCALE_MG_DL = 60.0


def _case_glucose(rng: np.random.Generator, windows: int) -> np.ndarray:
    """A subject's glucose over a day: personal mean, slow swings, meal peaks."""
    mean = rng.uniform(90.0, 200.0)
    t = np.linspace(0.0, 1.0, windows)
    swing = rng.uniform(20.0, 60.0) * np.sin(2 * np.pi * (rng.uniform(0.5, 2.0) * t + rng.random()))
    meals = np.zeros(windows)
    for center in rng.uniform(0.0, 1.0, size=3):
        meals += rng.uniform(20.0, 90.0) * np.exp(-(((t - center) / 0.05) ** 2))
    jitter = rng.normal(0.0, 5.0, windows)
    return np.clip(mean + swing + meals + jitter, GLUCOSE_MIN_MG_DL, GLUCOSE_MAX_MG_DL)


def _case_windows(rng: np.random.Generator, glucose: np.ndarray, window_length: int) -> np.ndarray:
    """Waveforms (windows, length) for one subject; glucose drives the pulse shape."""
    n = glucose.shape[0]
    z = (glucose - GLUCOSE_PIVOT_MG_DL) / GLUCOSE_SCALE_MG_DL
    heart_rate_hz = rng.uniform(55.0, 100.0) / 60.0 + rng.normal(0.0, 0.03, n)
    amplitude = rng.uniform(0.6, 1.6)
    noise_std = rng.uniform(0.01, 0.06)
    shape_offset = rng.normal(0.0, 0.08)  # personal, glucose-independent pulse difference

    t = np.arange(window_length) / SAMPLE_RATE_HZ
    phase = (heart_rate_hz[:, None] * t[None, :] + rng.random(n)[:, None]) % 1.0
    systolic_width = (0.07 * (1.0 + 0.22 * z + 0.5 * shape_offset))[:, None]
    diastolic_ratio = (0.45 + 0.16 * z + shape_offset)[:, None]
    notch_depth = (0.12 + 0.06 * z)[:, None]
    pulse = (
        np.exp(-0.5 * ((phase - 0.22) / systolic_width) ** 2)
        + diastolic_ratio * np.exp(-0.5 * ((phase - 0.55) / 0.09) ** 2)
        - notch_depth * np.exp(-0.5 * ((phase - 0.42) / 0.025) ** 2)
    )
    wander_hz = rng.uniform(0.1, 0.4)
    wander = rng.uniform(0.05, 0.3) * np.sin(
        2 * np.pi * (wander_hz * t[None, :] + rng.random(n)[:, None])
    )
    noise = rng.normal(0.0, noise_std, (n, window_length))
    return amplitude * pulse + wander + noise


def synthesize(config: SynthConfig) -> Path:
    """Write windows.npy, glucose.npy, case_id.npy and meta.json to `config.out`."""
    out = Path(config.out)
    if not config.force and (found := [name for name in DATASET_FILES if (out / name).exists()]):
        raise UserError(
            f"--out {out} already holds a dataset ({', '.join(found)}); pass --force to "
            "replace it, or another --out"
        )
    rng = np.random.default_rng(config.seed)
    windows, glucose, case_ids = [], [], []
    for case in range(config.cases):
        case_rng = np.random.default_rng(rng.integers(2**63))
        case_glucose = _case_glucose(case_rng, config.windows_per_case)
        windows.append(_case_windows(case_rng, case_glucose, config.window_length))
        glucose.append(case_glucose)
        case_ids.append(np.full(config.windows_per_case, case, dtype=np.int32))

    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "windows.npy", np.concatenate(windows).astype(np.float32))
    np.save(out / "glucose.npy", np.concatenate(glucose).astype(np.float32))
    np.save(out / "case_id.npy", np.concatenate(case_ids))
    meta = {
        "source": "synth",
        "windows": config.cases * config.windows_per_case,
        "cases": config.cases,
        "windows_per_case": config.windows_per_case,
        "window_length": config.window_length,
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "seed": config.seed,
        "glucose_unit": "mg/dL",
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out
