"""`python -m trainer`'s subcommands: what each one is for, and its config, whose fields
are its flags (made by trainer.flags, as `train`'s are from trainer.config).

The configs of the commands that only read their flags live here; `synth`'s, `train`'s
and `prepare-vitaldb`'s are their components' own. Torch-free: `--help` and a flag's
mistake never load torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainer.config import TRAIN_CONFIGS, SynthConfig
from trainer.container_env import cores
from trainer.data.vitaldb.config import PrepareConfig
from trainer.flags import flag


@dataclass(frozen=True)
class SweepCommand:
    dir: Path = flag()
    """The sweep's folder, holding its sweep.json (`fab sweep` writes it)."""


@dataclass(frozen=True)
class LaunchCommand:
    torchrun_args: list[str] = flag(remainder=True, metavar="-- TORCHRUN_ARGS")
    """torchrun's flags, then `train`'s, after `--`."""


@dataclass(frozen=True)
class EvaluateCommand:
    data: Path = flag()
    """The dataset directory to score on (the checkpoint's own, unless
    --allow-other-data)."""
    checkpoint: str = flag(metavar="PATH_OR_URI")
    """A checkpoint file (a run dir's checkpoints/best.pt) or a run's folder in storage
    (its BEST)."""
    split: Literal["train", "val", "test"] = flag("test")
    """Which of the checkpoint's splits to score: train, val or test."""
    allow_other_data: bool = flag(False)
    """Score the checkpoint on a dataset it was not trained on (its split's case ids)."""


@dataclass(frozen=True)
class SyncCommand:
    run_dir: Path = flag()
    """The run dir `train` wrote."""
    checkpoint_uri: str = flag()
    """The run's folder in storage, where its uploads go."""


@dataclass(frozen=True)
class DatasetFetchCommand:
    uri: str = flag(positional=True)
    """The dataset's folder in storage: <storageUri>/datasets/NAME."""
    dest: Path = flag(positional=True)
    """Local directory (kept: a second fetch is free)."""


@dataclass(frozen=True)
class DatasetPublishCommand:
    dir: Path = flag(positional=True)
    """The dataset directory."""
    uri: str = flag(positional=True)
    """Where: <storageUri>/datasets/NAME."""


@dataclass(frozen=True)
class BenchCommand:
    json: bool = flag(False)
    """Print one JSON object."""
    record: Path | None = flag(None, metavar="CSV")
    """Append a row to a measured-throughput CSV."""
    quick: bool = flag(False)
    """A few seconds, for tests."""
    batch_size: int | None = flag(None, auto="what train takes for M2-sized data")
    """The step's batch; with --time-to-quality, the run's global batch."""
    graph: bool = flag(True, name="no-graph")
    """On a GPU, time the step captured as one CUDA graph; --no-graph: the eager step (a
    run's fallback: --no-graph, a failed capture)."""
    time_to_quality: bool = flag(False)
    """Seconds from the process's start until the defaults reach the reference's best val
    MAE (the previous default, trained after them on the same data and seed), on fixed
    synthetic data (M2-sized on a GPU, small on a CPU, tiny with --quick)."""
    target_mae: float | None = flag(None, auto="the reference's best, trained in this run")
    """--time-to-quality's target (mg/dL), instead of training the reference for it."""
    seeds: int = flag(1, metavar="N")
    """--time-to-quality at seeds 0..N-1, judged on the medians."""
    nproc: int | None = flag(None, metavar="N", auto="one process, no torchrun")
    """--time-to-quality under torchrun with N ranks (GPUs; gloo processes on a CPU)."""
    noise_scale: Path | None = flag(None, metavar="RUN_DIR")
    """The gradient noise scale B_simple (McCandlish et al. 2018) at a run's checkpoints,
    from gradients at two batch sizes (--batch-size: the smaller; --quick: a few seconds)."""


@dataclass(frozen=True)
class BenchCheckpointCommand:
    uri: str = flag()
    """Where the checkpoints are uploaded: a file://, s3:// or az:// URI."""
    every: float = flag(30.0, metavar="SECONDS", unit="s")
    """Wall clock between checkpoints in the rounds that save them."""
    round_seconds: float = flag(30.0, unit="s")
    """How long each round of training runs."""
    rounds: int = flag(10)
    """Rounds of training, with and without checkpoints in turn (an even number)."""
    repeats: int = flag(3)
    """Saves and uploads timed."""
    upload_only: bool = flag(False)
    """Time the save and upload alone, no training."""
    batch_size: int | None = flag(None, auto="the bench's")
    """The training step's batch."""
    json: bool = flag(False)
    """Print one JSON object."""


@dataclass(frozen=True)
class BenchPrepareCommand:
    cases: int = flag(16)
    """Synthetic cases prepared."""
    minutes: float = flag(30.0, unit="m")
    """Recording per case."""
    workers: int = flag(factory=cores, auto="the machine's cores")
    """Cases prepared in parallel, one process each."""
    json: bool = flag(False)
    """Print one JSON object."""


@dataclass(frozen=True)
class Command:
    help: str
    """One line in `python -m trainer --help`."""
    configs: tuple[type, ...]
    """Whose flag fields the command takes."""


COMMANDS = {
    "synth": Command("write a synthetic PPG dataset", (SynthConfig,)),
    "train": Command("train (resumes from the run dir by itself)", TRAIN_CONFIGS),
    "sweep": Command(
        "run (or resume) the sweep in DIR (its sweep.json; see `fab sweep`)", (SweepCommand,)
    ),
    "launch": Command(
        "torchrun over `train`, exiting with the run's exit code: launch -- TORCHRUN_ARGS",
        (LaunchCommand,),
    ),
    "evaluate": Command("print JSON metrics of a checkpoint", (EvaluateCommand,)),
    "sync": Command(
        "upload what a run dir's store lacks (a finished run's pending uploads)", (SyncCommand,)
    ),
    "dataset-fetch": Command(
        "cache a dataset from storage, every file checked (its manifest)", (DatasetFetchCommand,)
    ),
    "dataset-publish": Command(
        "upload a dataset directory to storage, its manifest last", (DatasetPublishCommand,)
    ),
    "bench": Command("windows/s of pipeline and train step vs baseline", (BenchCommand,)),
    "bench-checkpoint": Command(
        "seconds to save + upload a checkpoint, throughput with vs without checkpoints",
        (BenchCheckpointCommand,),
    ),
    "prepare-vitaldb": Command(
        "VitalDB cases -> a dataset dir (resumable: run it again)", (PrepareConfig,)
    ),
    "bench-prepare": Command(
        "cases/min and windows/s of prepare-vitaldb on synthetic cases", (BenchPrepareCommand,)
    ),
}
"""Every subcommand, in `--help`'s order."""
