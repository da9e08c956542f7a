"""PLETH -> band-pass -> resample -> windows, and why a window is unfit to train on.

The recording is filtered stretch by stretch (a gap of NaN splits it), each stretch
band-passed at its own rate (Butterworth, forwards and backwards, so no phase shift),
then resampled polyphase onto one grid whose sample `j` lies at `j / sample_rate`
seconds from the recording's start. The quality verdicts, each counted by name:

- `missing`: the window touches a gap, or the guard at a stretch's edge where the
  filters have not settled.
- `flat_line`: a loose probe. The window touches a second whose pulse amplitude
  (peak-to-peak of the band-passed signal) is under 5% of the case's typical one
  (its 90th percentile over all seconds), or a second beside one.
- `clipping`: the window touches a run of at least 50 ms where the raw signal sits
  at the case's highest or lowest value (a saturated amplifier); clipped runs less
  than 2.5 s apart make one clipped stretch.
- `pulse_rate`: the window lies within 4 s of a second whose surrounding 8 s, if at
  least half recorded, hold no pulse between 30 and 200 beats/min (autocorrelation
  peak after its first zero crossing under 0.5, or at a rate outside that range).

A window gets the first verdict that applies, in that order; windows without a label
are counted as `unlabelled` before any of them (nothing else is judged for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.fft
from scipy.signal import butter, resample_poly, sosfiltfilt

BANDPASS_HZ = (0.5, 8.0)
BANDPASS_ORDER = 4
EDGE_GUARD_SECONDS = 2.0
FLAT_BLOCK_SECONDS = 1.0
FLAT_AMPLITUDE_FRACTION = 0.05
TYPICAL_AMPLITUDE_QUANTILE = 0.9
CLIP_TOLERANCE_FRACTION = 1e-3  # of the raw signal's range: "at the rail"
CLIP_MIN_SECONDS = 0.05
CLIP_MERGE_SECONDS = 2.5  # a beat apart at 24/min: clipped beats in a row merge
PULSE_CONTEXT_SECONDS = 8.0
PULSE_PLAUSIBLE_BPM = (30.0, 200.0)
PULSE_SEARCH_BPM = (15.0, 600.0)  # wider than plausible, so an implausible rate is seen
PULSE_MIN_PERIODICITY = 0.5
PULSE_PEAK_FRACTION = 0.9  # of the highest autocorrelation peak: the beat's own peak
PULSE_CHUNK_WINDOWS = 1024  # bounds the FFT scratch memory
RATE_DENOMINATOR_LIMIT = 1_000_000

KEPT = 0
REJECT_REASONS = ("unlabelled", "missing", "flat_line", "clipping", "pulse_rate")


def quality_settings() -> dict:
    """Every threshold above, for meta.json."""
    return {
        "bandpass_hz": list(BANDPASS_HZ),
        "bandpass": f"Butterworth order {BANDPASS_ORDER}, zero-phase (sosfiltfilt)",
        "resample": "polyphase (scipy.signal.resample_poly)",
        "edge_guard_s": EDGE_GUARD_SECONDS,
        "flat_block_s": FLAT_BLOCK_SECONDS,
        "flat_amplitude_fraction": FLAT_AMPLITUDE_FRACTION,
        "typical_amplitude_quantile": TYPICAL_AMPLITUDE_QUANTILE,
        "clip_tolerance_fraction": CLIP_TOLERANCE_FRACTION,
        "clip_min_s": CLIP_MIN_SECONDS,
        "pulse_context_s": PULSE_CONTEXT_SECONDS,
        "pulse_plausible_bpm": list(PULSE_PLAUSIBLE_BPM),
        "pulse_min_periodicity": PULSE_MIN_PERIODICITY,
        "pulse_peak_fraction": PULSE_PEAK_FRACTION,
        "reject_reasons": list(REJECT_REASONS),
    }


@dataclass(frozen=True)
class Conditioned:
    """A recording on the output grid: the signal and, per sample, what is wrong there."""

    signal: np.ndarray  # float32, NaN where missing
    flat: np.ndarray  # bool
    clipped: np.ndarray  # bool
    sample_rate: float


def _runs(mask: np.ndarray) -> np.ndarray:
    """[k, 2] start/stop indices of the runs of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return edges.reshape(-1, 2)


def _dilate(mask: np.ndarray, by: int) -> np.ndarray:
    """`mask` with every True spread `by` places to each side."""
    if by <= 0 or not mask.any():
        return mask
    spread = np.convolve(mask.astype(np.int64), np.ones(2 * by + 1, dtype=np.int64), "same")
    return spread > 0


def _ratio(raw_rate: float, sample_rate: float) -> tuple[int, int]:
    ratio = Fraction(sample_rate).limit_denominator(RATE_DENOMINATOR_LIMIT) / Fraction(
        raw_rate
    ).limit_denominator(RATE_DENOMINATOR_LIMIT)
    return ratio.numerator, ratio.denominator


def _filtered(raw: np.ndarray, raw_rate: float, sample_rate: float, n_out: int) -> np.ndarray:
    up, down = _ratio(raw_rate, sample_rate)
    sos = butter(BANDPASS_ORDER, BANDPASS_HZ, btype="bandpass", fs=raw_rate, output="sos")
    guard = round(EDGE_GUARD_SECONDS * sample_rate)
    signal = np.full(n_out, np.nan, dtype=np.float32)
    for start, stop in _runs(np.isfinite(raw)):
        start = -(-start // down) * down  # raw index k*down lies on output sample k*up
        if (stop - start) * up // down <= 2 * guard:
            continue  # nothing would be left between the guards
        stretch = resample_poly(sosfiltfilt(sos, raw[start:stop].astype(np.float64)), up, down)
        first = start // down * up
        keep = stretch[guard : len(stretch) - guard][: max(0, n_out - first - guard)]
        signal[first + guard : first + guard + len(keep)] = keep
    return signal


def _flat(signal: np.ndarray, sample_rate: float) -> np.ndarray:
    block, blocks = _blocks(signal, sample_rate)
    padded = np.full(blocks * block, np.nan, dtype=np.float32)
    padded[: signal.size] = signal
    padded = padded.reshape(blocks, block)
    finite = np.isfinite(padded)
    recorded = finite.any(axis=1)
    high = np.where(finite, padded, -np.inf).max(axis=1)
    low = np.where(finite, padded, np.inf).min(axis=1)
    amplitude = np.where(recorded, high - low, np.nan)
    typical = (
        float(np.quantile(amplitude[recorded], TYPICAL_AMPLITUDE_QUANTILE))
        if recorded.any()
        else 0.0
    )
    flat_blocks = recorded & (amplitude <= FLAT_AMPLITUDE_FRACTION * typical)
    # The filters ring at a flat stretch's edges: the seconds beside it look alive.
    return np.repeat(_dilate(flat_blocks, 1), block)[: signal.size]


def _clipped(raw: np.ndarray, raw_rate: float, sample_rate: float, n_out: int) -> np.ndarray:
    clipped = np.zeros(n_out, dtype=bool)
    finite = raw[np.isfinite(raw)]
    if finite.size == 0:
        return clipped
    high, low = float(finite.max()), float(finite.min())
    tolerance = CLIP_TOLERANCE_FRACTION * (high - low)
    with np.errstate(invalid="ignore"):
        runs = _runs((raw >= high - tolerance) | (raw <= low + tolerance))
    runs = runs[runs[:, 1] - runs[:, 0] >= CLIP_MIN_SECONDS * raw_rate]
    if not len(runs):
        return clipped
    # Beats clipped one after another make one clipped stretch, the time between
    # their peaks included.
    apart = runs[1:, 0] - runs[:-1, 1] >= CLIP_MERGE_SECONDS * raw_rate
    starts = runs[np.concatenate(([True], apart)), 0]
    stops = runs[np.concatenate((apart, [True])), 1]
    scale = sample_rate / raw_rate
    for start, stop in zip(starts, stops, strict=True):
        # One output sample of margin each side: the resampler's filter spreads it.
        clipped[max(0, int(start * scale) - 1) : int(np.ceil(stop * scale)) + 1] = True
    return clipped


def condition(raw: np.ndarray, raw_rate: float, sample_rate: float) -> Conditioned:
    """The raw PLETH samples (NaN in gaps) on the output grid, with their defects."""
    up, down = _ratio(raw_rate, sample_rate)
    n_out = raw.size * up // down
    signal = _filtered(raw, raw_rate, sample_rate, n_out)
    return Conditioned(
        signal=signal,
        flat=_flat(signal, sample_rate),
        clipped=_clipped(raw, raw_rate, sample_rate, n_out),
        sample_rate=sample_rate,
    )


def window_starts(n_samples: int, length: int, stride: int) -> np.ndarray:
    """Start samples of every whole window, `stride` apart from the recording's start."""
    return np.arange(0, max(0, n_samples - length + 1), stride, dtype=np.int64)


def _touches(mask: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    counts = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    return counts[starts + length] - counts[starts] > 0


def _periodicity(
    rows: np.ndarray, recorded: np.ndarray, n_fft: int, shortest: int, longest: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the autocorrelation's peak after its first zero crossing, its lag, and
    whether at least half the context was recorded (else nothing can be said).

    Each lag's sum is divided by the number of recorded sample pairs it holds, so a
    context reaching into a gap or past the recording's end, or a long lag, is not
    penalised for the samples it lacks; lags with under a quarter of a context of pairs are
    not searched. Searching only past the first zero crossing skips the trivially high
    correlation of a smooth signal with itself at short lags; a row that never crosses
    zero (a drift, no beat) scores -inf.
    """
    weights = recorded.astype(np.float64)
    counts = weights.sum(axis=1, keepdims=True)
    sums = (rows * weights).sum(axis=1, keepdims=True)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    rows = (rows - means) * weights

    def lagged_sums(x: np.ndarray) -> np.ndarray:
        spectrum = scipy.fft.rfft(x, n_fft, axis=1)
        return scipy.fft.irfft(spectrum.real**2 + spectrum.imag**2, n_fft, axis=1)[:, : longest + 1]

    # A wholly recorded context (the usual case) holds width - lag pairs at each lag.
    pairs = np.broadcast_to(rows.shape[1] - np.arange(longest + 1.0), (rows.shape[0], longest + 1))
    if (gappy := ~recorded.all(axis=1)).any():
        pairs = pairs.copy()
        pairs[gappy] = np.rint(lagged_sums(weights[gappy]))
    enough = pairs >= rows.shape[1] / 4
    correlation = np.divide(lagged_sums(rows), pairs, out=np.zeros_like(pairs), where=enough)
    energy = correlation[:, :1]
    correlation = np.divide(correlation, energy, out=np.zeros_like(correlation), where=energy > 0)
    negative = (correlation < 0) & enough
    crossing = np.where(negative.any(axis=1), negative.argmax(axis=1), longest + 1)
    lags = np.arange(longest + 1)
    searched = enough & (lags >= shortest) & (lags > crossing[:, None])
    scored = np.where(searched, correlation, -np.inf)
    # The first peak nearly as high as the highest: without a bias towards short lags,
    # the peak at two or three beats can top the one at a single beat by a hair.
    peak = np.zeros_like(searched)
    peak[:, 1:-1] = (scored[:, 1:-1] >= scored[:, :-2]) & (scored[:, 1:-1] >= scored[:, 2:])
    highest = scored.max(axis=1, keepdims=True)
    best = (peak & searched & (scored >= PULSE_PEAK_FRACTION * highest)).argmax(axis=1)
    return scored[np.arange(best.size), best], best, counts[:, 0] >= rows.shape[1] / 2


def _blocks(signal: np.ndarray, sample_rate: float) -> tuple[int, int]:
    """(samples per block, number of blocks) of the one-second grid the verdicts use."""
    block = max(1, round(FLAT_BLOCK_SECONDS * sample_rate))
    return block, -(-signal.size // block)


def pulse_doubtful(signal: np.ndarray, centres: np.ndarray, sample_rate: float) -> np.ndarray:
    """Whether the seconds around each centre sample, recorded for at least half their
    length, hold no pulse at a plausible rate."""
    half = round(PULSE_CONTEXT_SECONDS * sample_rate / 2)
    recorded = np.isfinite(signal)
    padded = np.concatenate((np.zeros(half), np.where(recorded, signal, 0.0), np.zeros(half)))
    padded_recorded = np.concatenate((np.zeros(half, bool), recorded, np.zeros(half, bool)))
    # Row c of either view is the context centred on sample c.
    contexts = np.lib.stride_tricks.sliding_window_view(padded, 2 * half)
    context_recorded = np.lib.stride_tricks.sliding_window_view(padded_recorded, 2 * half)
    n_fft = scipy.fft.next_fast_len(4 * half, real=True)  # no circular wrap-around
    shortest = max(1, int(np.ceil(60.0 / PULSE_SEARCH_BPM[1] * sample_rate)))
    longest = min(2 * half - 1, int(60.0 / PULSE_SEARCH_BPM[0] * sample_rate))
    low, high = PULSE_PLAUSIBLE_BPM
    doubtful = np.zeros(centres.size, dtype=bool)
    for first in range(0, centres.size, PULSE_CHUNK_WINDOWS):
        chunk = centres[first : first + PULSE_CHUNK_WINDOWS]
        periodicity, lag, judged = _periodicity(
            contexts[chunk], context_recorded[chunk], n_fft, shortest, longest
        )
        bpm = 60.0 * sample_rate / np.maximum(lag, 1)
        plausible = (periodicity >= PULSE_MIN_PERIODICITY) & (bpm >= low) & (bpm <= high)
        doubtful[first : first + chunk.size] = judged & ~plausible
    return doubtful


def _pulse_doubtful(
    signal: np.ndarray, sample_rate: float, starts: np.ndarray, length: int
) -> np.ndarray:
    """Per sample: within half a context of a second whose surroundings hold no
    plausible pulse. Only the seconds near `starts`' windows are judged.

    An 8 s context straddling a defect's edge may still find the clean side's pulse,
    so a defect is only seen some seconds inside it: the verdict spreads by as much.
    """
    block, blocks = _blocks(signal, sample_rate)
    reach = round(PULSE_CONTEXT_SECONDS / 2 / FLAT_BLOCK_SECONDS)
    near = np.zeros(blocks + 1, dtype=np.int64)
    np.add.at(near, np.maximum(starts // block - reach, 0), 1)
    np.add.at(near, np.minimum((starts + length - 1) // block + reach + 1, blocks), -1)
    judged = np.flatnonzero(np.cumsum(near[:blocks]) > 0)
    doubtful = np.zeros(blocks, dtype=bool)
    centres = np.minimum(judged * block + block // 2, signal.size - 1)
    doubtful[judged] = pulse_doubtful(signal, centres, sample_rate)
    return np.repeat(_dilate(doubtful, reach), block)[: signal.size]


def _reject(reasons: np.ndarray, code: int, mask, starts: np.ndarray, length: int) -> None:
    """Give `code` to the still-kept windows that touch `mask` (or `mask(pending)`)."""
    pending = np.flatnonzero(reasons == KEPT)
    if pending.size:
        mask = mask(pending) if callable(mask) else mask
        reasons[pending[_touches(mask, starts[pending], length)]] = code


def judge(
    conditioned: Conditioned, starts: np.ndarray, length: int, labelled: np.ndarray
) -> np.ndarray:
    """Per window, KEPT (0) or 1 + the index of its reason in REJECT_REASONS."""
    reasons = np.where(labelled, KEPT, 1).astype(np.int8)
    signal, rate = conditioned.signal, conditioned.sample_rate
    _reject(reasons, 2, np.isnan(signal), starts, length)
    _reject(reasons, 3, conditioned.flat, starts, length)
    _reject(reasons, 4, conditioned.clipped, starts, length)
    # Last and only for windows still kept: the costliest verdict.
    doubtful = lambda pending: _pulse_doubtful(signal, rate, starts[pending], length)  # noqa: E731
    _reject(reasons, 5, doubtful, starts, length)
    return reasons


def windows_at(signal: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """[len(starts), length] float32 copies of the windows starting at `starts`."""
    return np.ascontiguousarray(
        np.lib.stride_tricks.sliding_window_view(signal, length)[starts], dtype=np.float32
    )
