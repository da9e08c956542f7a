"""What `prepare-vitaldb` is asked to do, validated on construction."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainer.config import UserError
from trainer.container_env import cores
from trainer.flags import flag

DEFAULT_SOURCE_URL = "https://api.vitaldb.net"
# The seeds' milestones: the first N case ids with a PLETH track and a glucose draw.
Milestone = Literal["M1", "M2", "M3"]
MILESTONE_CASES = dict(zip(typing.get_args(Milestone), (50, 200, 1000), strict=True))
LabelMethod = Literal["nearest", "linear"]
LABEL_METHODS = typing.get_args(LabelMethod)
MIN_WINDOW_SAMPLES = 32  # the model's minimum (trainer.data.dataset.MIN_WINDOW_LENGTH)
# The band-pass keeps up to 8 Hz: a rate below twice that would alias what it keeps.
MIN_SAMPLE_RATE_HZ = 16.0


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def _case_ids(text: str) -> tuple[int, ...]:
    """`--cases 1,5,9`."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected case ids separated by commas, e.g. 1,5,9"
        ) from None


def _samples(seconds: float, rate: float, flag: str) -> int:
    samples = seconds * rate
    _require(
        abs(samples - round(samples)) < 1e-6,
        f"{flag} {seconds:g} at --sample-rate {rate:g}: not a whole number of samples; "
        "pick values whose product is an integer",
    )
    return round(samples)


@dataclass(frozen=True)
class PrepareConfig:
    """`prepare-vitaldb`: which cases, from where, cut into which windows."""

    out: Path = flag()
    """The dataset directory written (and the preparation's resume state, out/.prepare)."""
    vital_dir: Path | None = flag(None, one_of="source")
    """A folder of `<caseid>.vital` files; else the files come from --source-url."""
    cases: tuple[int, ...] = flag((), one_of="source", parse=_case_ids, metavar="1,5,9")
    """Case ids to fetch over HTTP from --source-url."""
    milestone: Milestone | None = flag(None, one_of="source")
    """M1/M2/M3: the first 50/200/1000 case ids with a PLETH track and a glucose draw,
    fetched over HTTP."""
    labs: Path | None = flag(None, metavar="FILE.csv")
    """The lab table as CSV (caseid,dt,name,result); else fetched from --source-url
    (with --vital-dir too)."""
    window_seconds: float = flag(1.0, unit="s")
    """Window length (1 s = 100 samples at 100 Hz, as the seeds)."""
    sample_rate: float = flag(100.0, metavar="HZ")
    """Hz the band-passed PLETH is resampled to."""
    stride_seconds: float | None = flag(None, unit="s", auto="--window-seconds (no overlap)")
    """Between window starts."""
    label_window_minutes: float = flag(30.0, unit="m")
    """How far from a glucose draw a window may be and still get its label."""
    label_method: LabelMethod = flag("nearest")
    """How a window gets its label. nearest: the nearest draw's value; linear:
    interpolated between the draws either side."""
    workers: int = flag(factory=cores, auto="the machine's cores")
    """Cases prepared in parallel, one process each."""
    source_url: str = flag(DEFAULT_SOURCE_URL)
    """The open dataset's API (cases, trks, labs, `<version>/<caseid>.vital`)."""

    def __post_init__(self) -> None:
        sources = [self.vital_dir is not None, bool(self.cases), self.milestone is not None]
        _require(sum(sources) == 1, "pass exactly one of --vital-dir, --cases, --milestone")
        _require(
            self.milestone is None or self.milestone in MILESTONE_CASES,
            f"--milestone {self.milestone}: expected one of {', '.join(MILESTONE_CASES)}",
        )
        _require(all(case > 0 for case in self.cases), "--cases: case ids are positive integers")
        _require(
            self.vital_dir is None or Path(self.vital_dir).is_dir(),
            f"--vital-dir {self.vital_dir}: no such directory; expected a folder of "
            "<caseid>.vital files",
        )
        _require(
            self.labs is None or Path(self.labs).is_file(),
            f"--labs {self.labs}: no such file; expected the lab table as CSV "
            "(caseid,dt,name,result)",
        )
        _require(
            self.sample_rate >= MIN_SAMPLE_RATE_HZ,
            f"--sample-rate {self.sample_rate:g}: must be at least {MIN_SAMPLE_RATE_HZ:g} Hz "
            "(the band-pass keeps up to 8 Hz)",
        )
        _require(self.window_seconds > 0, f"--window-seconds {self.window_seconds:g}: must be > 0")
        _require(
            self.window_length >= MIN_WINDOW_SAMPLES,
            f"--window-seconds {self.window_seconds:g} at {self.sample_rate:g} Hz gives "
            f"{self.window_length} samples; the model needs at least {MIN_WINDOW_SAMPLES}",
        )
        _require(
            self.stride_seconds is None or self.stride_seconds > 0,
            f"--stride-seconds {self.stride_seconds}: must be > 0",
        )
        _require(self.stride_samples >= 1, "--stride-seconds: at least one sample")
        _require(
            self.label_window_minutes > 0,
            f"--label-window-minutes {self.label_window_minutes:g}: must be > 0",
        )
        _require(
            self.label_method in LABEL_METHODS,
            f"--label-method {self.label_method}: expected one of {', '.join(LABEL_METHODS)}",
        )
        _require(self.workers >= 1, f"--workers {self.workers}: must be at least 1")
        _require(
            self.source_url.startswith(("http://", "https://")),
            f"--source-url {self.source_url}: expected an http:// or https:// URL",
        )

    @property
    def window_length(self) -> int:
        return _samples(self.window_seconds, self.sample_rate, "--window-seconds")

    @property
    def stride_samples(self) -> int:
        stride = self.window_seconds if self.stride_seconds is None else self.stride_seconds
        return _samples(stride, self.sample_rate, "--stride-seconds")

    @property
    def online(self) -> bool:
        """Whether the .vital files come over HTTP."""
        return self.vital_dir is None

    def request(self) -> dict[str, Any]:
        """What makes two preparations the same (every flag but --workers), JSON-able.

        A killed preparation resumes only under the same request, and a finished one
        is left alone only when asked for again exactly.
        """
        fields = dataclasses.asdict(self)
        for name in ("out", "workers"):
            fields.pop(name)
        fields["vital_dir"] = str(Path(self.vital_dir).resolve()) if self.vital_dir else None
        fields["labs"] = str(Path(self.labs).resolve()) if self.labs else None
        fields["cases"] = list(self.cases)
        fields["stride_seconds"] = self.stride_samples / self.sample_rate
        if not self.online and self.labs is not None:
            fields["source_url"] = None  # nothing is fetched: the URL does not matter
        return fields
