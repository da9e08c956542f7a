"""One case's PLETH samples from its `.vital` file, or why there are none."""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.data.vitaldb.lab_table import PLETH_TRACK

GZIP_CHECK_CHUNK_BYTES = 8 << 20
WAVE_TRACK_TYPE = 1  # vitaldb's Track.type for waveforms


class CaseSkipped(Exception):
    """The whole case is left out; the message is the reason the summary records."""


@dataclass(frozen=True)
class Recording:
    samples: np.ndarray  # float32; NaN where nothing was recorded
    rate_hz: float

    @property
    def seconds(self) -> float:
        return self.samples.size / self.rate_hz


def _check_whole(path: Path) -> None:
    """Read the gzip stream to its end: `vitaldb` takes a truncated file silently (it
    catches the EOFError and keeps what it read), which would shorten the case."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(GZIP_CHECK_CHUNK_BYTES):
                pass
    except (OSError, EOFError, zlib.error) as error:
        raise CaseSkipped(f"corrupt file ({error})") from None


def read_pleth(path: Path) -> Recording:
    """The SNUADC/PLETH samples, sample 0 at the recording's start (the file's dtstart)."""
    import vitaldb

    if not Path(path).is_file():
        raise CaseSkipped(f"no file {Path(path).name}")
    _check_whole(path)
    # vitaldb prints its parse errors and returns what it has: catch the print.
    with contextlib.redirect_stdout(io.StringIO()) as said:
        try:
            vital = vitaldb.VitalFile(str(path), [PLETH_TRACK])
        except Exception as error:  # the package raises whatever its parser hits
            raise CaseSkipped(f"corrupt file ({type(error).__name__}: {error})") from None
    if said.getvalue().strip():
        raise CaseSkipped(f"corrupt file ({said.getvalue().strip()})")
    if vital.dtstart == 0 and not vital.devs:
        raise CaseSkipped("corrupt file (no .vital header)")
    track = vital.trks.get(PLETH_TRACK)
    if track is None:
        raise CaseSkipped(f"no {PLETH_TRACK} track")
    if track.type != WAVE_TRACK_TYPE or track.srate <= 0:
        raise CaseSkipped(f"{PLETH_TRACK} is not a waveform track")
    samples = np.asarray(vital.get_track_samples(PLETH_TRACK, 1.0 / track.srate), np.float32)
    if samples.size == 0 or not np.isfinite(samples).any():
        raise CaseSkipped(f"{PLETH_TRACK} holds no samples")
    return Recording(samples=samples, rate_hz=float(track.srate))
