"""A glucose label for each window from the case's draws, or none.

`nearest`: the value of the draw nearest in time (the earlier one on a tie), if it
lies within the limit. `linear`: interpolated between the last draw at or before the
window and the first at or after it, if both lie within the limit (a window outside
the span of the draws gets none). Times are window centres; the gap recorded is the
signed seconds from the centre to the draw that labels it (for `linear`, the nearer
of the two): positive when the blood was drawn after the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.data.vitaldb.lab_table import GlucoseDraws


@dataclass(frozen=True)
class Labels:
    mg_dl: np.ndarray  # float64 [n], NaN where unlabelled
    gap_s: np.ndarray  # float64 [n], NaN where unlabelled

    @property
    def labelled(self) -> np.ndarray:
        return np.isfinite(self.mg_dl)


def _nearest(draws: GlucoseDraws, centres_s: np.ndarray, limit_s: float) -> Labels:
    first_at_or_after = np.searchsorted(draws.dt_s, centres_s, side="left")
    after = first_at_or_after.clip(0, len(draws) - 1)
    before = (first_at_or_after - 1).clip(0, len(draws) - 1)
    gap_before = draws.dt_s[before] - centres_s
    gap_after = draws.dt_s[after] - centres_s
    pick_after = np.abs(gap_after) < np.abs(gap_before)
    index = np.where(pick_after, after, before)
    gap = np.where(pick_after, gap_after, gap_before)
    ok = np.abs(gap) <= limit_s
    return Labels(mg_dl=np.where(ok, draws.mg_dl[index], np.nan), gap_s=np.where(ok, gap, np.nan))


def _linear(draws: GlucoseDraws, centres_s: np.ndarray, limit_s: float) -> Labels:
    # The last draw at or before the centre, and the first at or after it.
    before = np.searchsorted(draws.dt_s, centres_s, side="right") - 1
    after = np.searchsorted(draws.dt_s, centres_s, side="left")
    inside = (before >= 0) & (after < len(draws))
    before, after = before.clip(0, len(draws) - 1), after.clip(0, len(draws) - 1)
    t0, t1 = draws.dt_s[before], draws.dt_s[after]
    ok = inside & (centres_s - t0 <= limit_s) & (t1 - centres_s <= limit_s)
    span = t1 - t0
    weight = np.divide(centres_s - t0, span, out=np.zeros_like(span), where=span > 0)
    value = draws.mg_dl[before] + weight * (draws.mg_dl[after] - draws.mg_dl[before])
    gap = np.where(centres_s - t0 <= t1 - centres_s, t0 - centres_s, t1 - centres_s)
    return Labels(mg_dl=np.where(ok, value, np.nan), gap_s=np.where(ok, gap, np.nan))


def label_windows(
    draws: GlucoseDraws, centres_s: np.ndarray, method: str, limit_s: float
) -> Labels:
    """Labels for windows centred at `centres_s` (seconds from the recording's start)."""
    centres_s = np.asarray(centres_s, dtype=np.float64)
    if len(draws) == 0:
        empty = np.full(centres_s.shape, np.nan)
        return Labels(mg_dl=empty, gap_s=empty.copy())
    label = {"nearest": _nearest, "linear": _linear}[method]
    return label(draws, centres_s, limit_s)
