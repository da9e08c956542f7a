"""Glucose regression metrics in mg/dL: errors, clinical error grids, ISO 15197 agreement.

Everything here is plain numpy so the trainer, `evaluate` and the report share one
definition of each number. Every report carries the same metrics for a constant
predictor (the train median): a model that does not beat it has learnt nothing.

Error grids take the reference on x and the prediction on y, as the papers draw them.
Clarke's zones use the inequalities of the common reading of Clarke's figure (the 20%
line and the 70/180 mg/dL lines inclusive); on a Parkes boundary a point belongs to the
zone nearer the diagonal. With real-valued predictions either choice rarely matters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

ZONES = ("A", "B", "C", "D", "E")

HYPO_MGDL = 70.0  # Clarke's hypoglycaemia line, also the bottom of the target range
HYPER_MGDL = 180.0  # Clarke's hyperglycaemia line, also the top of the target range

# ISO 15197:2013 section 6.3.3: within ±15 mg/dL below 100 mg/dL, within ±15% at or above.
ISO_SPLIT_MGDL = 100.0
ISO_ABS_TOLERANCE_MGDL = 15.0
ISO_REL_TOLERANCE_PCT = 15.0

# Parkes (consensus) error grid for type 1 diabetes, boundary vertices in mg/dL as
# (reference, prediction), from Pfützner et al., "Technical Aspects of the Parkes
# Error Grid", J Diabetes Sci Technol 2013;7(5):1275-1281, Table 1
# (https://www.ncbi.nlm.nih.gov/pmc/articles/PMC3876371/). The paper's grid stops at
# 550 mg/dL; beyond it each boundary continues along its last segment.
# Upper boundaries: a prediction at or above them lies outside the zone before the key.
_PARKES_T1_UPPER = {
    "B": ((0, 50), (30, 50), (140, 170), (280, 380), (430, 550)),
    "C": ((0, 60), (30, 60), (50, 80), (70, 110), (260, 550)),
    "D": ((0, 100), (25, 100), (50, 125), (80, 215), (125, 550)),
    "E": ((0, 150), (35, 155), (50, 550)),
}
# Lower boundaries start with a vertical segment at their first x (down to 0 mg/dL):
# only references right of it can fall into the zone.
_PARKES_T1_LOWER = {
    "B": ((50, 30), (170, 145), (385, 300), (550, 450)),
    "C": ((120, 30), (260, 130), (550, 250)),
    "D": ((250, 40), (550, 150)),
}


def _as_pairs(ref: Iterable[float], pred: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as float64 vectors, or a ValueError that says what is wrong."""
    r = np.asarray(ref, dtype=np.float64).reshape(-1)
    p = np.asarray(pred, dtype=np.float64).reshape(-1)
    if r.shape != p.shape:
        raise ValueError(
            f"reference has {r.size} values but prediction has {p.size}; "
            "pass one prediction per reference value"
        )
    if r.size == 0:
        raise ValueError("no values to score; pass at least one (reference, prediction) pair")
    for name, arr in (("reference", r), ("prediction", p)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        if bad:
            raise ValueError(f"{name} holds {bad} NaN/inf values; all values must be finite")
    nonpositive = int(np.count_nonzero(r <= 0))
    if nonpositive:
        raise ValueError(
            f"reference holds {nonpositive} values <= 0 mg/dL; glucose references must be positive"
        )
    return r, p


def mae(ref: Iterable[float], pred: Iterable[float]) -> float:
    """Mean absolute error, mg/dL."""
    r, p = _as_pairs(ref, pred)
    return float(np.mean(np.abs(p - r)))


def rmse(ref: Iterable[float], pred: Iterable[float]) -> float:
    """Root mean squared error, mg/dL."""
    r, p = _as_pairs(ref, pred)
    return float(np.sqrt(np.mean((p - r) ** 2)))


def mard(ref: Iterable[float], pred: Iterable[float]) -> float:
    """Mean absolute relative difference, percent of the reference."""
    r, p = _as_pairs(ref, pred)
    return float(100.0 * np.mean(np.abs(p - r) / r))


def clarke_zones(ref: Iterable[float], pred: Iterable[float]) -> np.ndarray:
    """Clarke error grid zone ('A'..'E') of each pair.

    Clarke, Cox, Gonder-Frederick, Carter, Pohl: "Evaluating clinical accuracy of
    systems for self-monitoring of blood glucose", Diabetes Care 1987;10(5):622-628.
    """
    r, p = _as_pairs(ref, pred)
    # Multiplied out (5|p-r| <= r instead of |p-r| <= 0.2 r) so that integer inputs
    # exactly on the 20% line are classified exactly, free of float rounding.
    zone_a = ((r < HYPO_MGDL) & (p < HYPO_MGDL)) | (5.0 * np.abs(p - r) <= r)
    zone_e = ((r <= HYPO_MGDL) & (p >= HYPER_MGDL)) | ((r >= HYPER_MGDL) & (p <= HYPO_MGDL))
    zone_c = ((r >= HYPO_MGDL) & (r <= 290.0) & (p >= r + 110.0)) | (
        (r >= 130.0) & (r <= HYPER_MGDL) & (5.0 * p <= 7.0 * r - 910.0)  # p <= 7/5 r - 182
    )
    in_target_band = (p >= HYPO_MGDL) & (p <= HYPER_MGDL)
    zone_d = ((r >= 240.0) & in_target_band) | ((r <= HYPO_MGDL) & in_target_band)
    # np.select takes the first true condition: the order encodes Clarke's precedence.
    return np.select([zone_a, zone_e, zone_c, zone_d], ["A", "E", "C", "D"], default="B")


def _polyline(x: np.ndarray, vertices: Sequence[tuple[float, float]]) -> np.ndarray:
    """The boundary's y at each x; beyond the last vertex it continues along the last segment."""
    xs = np.array([v[0] for v in vertices], dtype=np.float64)
    ys = np.array([v[1] for v in vertices], dtype=np.float64)
    y = np.interp(x, xs, ys)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), y)


def parkes_zones(ref: Iterable[float], pred: Iterable[float]) -> np.ndarray:
    """Parkes (consensus) error grid zone ('A'..'E') of each pair, type 1 diabetes grid.

    Parkes, Slatin, Pardo, Ginsberg: "A new consensus error grid to evaluate the
    clinical significance of inaccuracies in the measurement of blood glucose",
    Diabetes Care 2000;23(8):1143-1148; coordinates as published by Pfützner et al. 2013.
    """
    r, p = _as_pairs(ref, pred)
    zones = np.full(r.shape, "A", dtype="<U1")
    # Zones nest outwards from the diagonal: each outer boundary overrides the inner one.
    for letter in ZONES[1:]:
        above = p > _polyline(r, _PARKES_T1_UPPER[letter])
        outside = above
        if letter in _PARKES_T1_LOWER:
            vertices = _PARKES_T1_LOWER[letter]
            below = (r > vertices[0][0]) & (p < _polyline(r, vertices))
            outside = above | below
        zones[outside] = letter
    return zones


def zone_percentages(zones: Iterable[str]) -> dict[str, float]:
    """Percent of pairs in each zone, every letter 'A'..'E' present (zeros included)."""
    z = np.asarray(list(zones) if not isinstance(zones, np.ndarray) else zones).reshape(-1)
    if z.size == 0:
        raise ValueError("no zones to count; pass at least one zone letter")
    unknown = sorted(set(z.tolist()) - set(ZONES))
    if unknown:
        raise ValueError(f"unknown zone letters {unknown}; expected only {list(ZONES)}")
    return {letter: float(100.0 * np.count_nonzero(z == letter) / z.size) for letter in ZONES}


def iso15197_agreement(ref: Iterable[float], pred: Iterable[float]) -> float:
    """Percent of pairs within ISO 15197:2013's limits (±15 mg/dL below 100, ±15% at or above).

    The standard asks for at least 95% of a meter's results within these limits.
    """
    r, p = _as_pairs(ref, pred)
    err = np.abs(p - r)
    # Percent limit multiplied out (100|p-r| <= 15 r) so the 15% edge is exact for integers.
    within = np.where(
        r < ISO_SPLIT_MGDL,
        err <= ISO_ABS_TOLERANCE_MGDL,
        100.0 * err <= ISO_REL_TOLERANCE_PCT * r,
    )
    return float(100.0 * np.mean(within))


def mae_by_range(ref: Iterable[float], pred: Iterable[float]) -> dict[str, float | None]:
    """MAE (mg/dL) by the reference's range: hypo <70, target 70-180, hyper >180.

    A range without samples gives None rather than NaN, so the dict stays valid JSON.
    """
    r, p = _as_pairs(ref, pred)
    masks = {
        "<70": r < HYPO_MGDL,
        "70-180": (r >= HYPO_MGDL) & (r <= HYPER_MGDL),
        ">180": r > HYPER_MGDL,
    }
    return {
        name: (float(np.mean(np.abs(p[m] - r[m]))) if m.any() else None)
        for name, m in masks.items()
    }


def _metric_block(r: np.ndarray, p: np.ndarray) -> dict:
    return {
        "n": int(r.size),
        "mae": mae(r, p),
        "rmse": rmse(r, p),
        "mard": mard(r, p),
        "iso15197_pct": iso15197_agreement(r, p),
        "clarke": zone_percentages(clarke_zones(r, p)),
        "parkes": zone_percentages(parkes_zones(r, p)),
        "mae_by_range": mae_by_range(r, p),
    }


def regression_report(ref: Iterable[float], pred: Iterable[float], baseline_value: float) -> dict:
    """Every metric for the predictions, and under "baseline" the same for a constant.

    baseline_value is the constant predictor, normally the train split's median glucose.
    The result holds only str/int/float/None/dict, so json.dumps takes it as it is.
    """
    r, p = _as_pairs(ref, pred)
    if not np.isfinite(baseline_value):
        raise ValueError(f"baseline_value is {baseline_value}; expected a finite mg/dL value")
    report = _metric_block(r, p)
    baseline = _metric_block(r, np.full_like(r, float(baseline_value)))
    baseline["value"] = float(baseline_value)
    report["baseline"] = baseline
    return report
