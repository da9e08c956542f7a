"""One typed config per component, validated on construction, and the `train` flags
made from them.

A bad value raises `UserError` naming the flag that fixes it; `python -m trainer`
turns that into one line on stderr and exit code 2. The resolved `RunConfig` is
written to `config.json` in the run dir and stored (as a plain dict) in every
checkpoint.

Each field that is a `train` flag is declared with `flag(default, ...)`
(`trainer.flags`): the flag is `--<field-name>` (or `name=`), its default the field's,
its help the docstring under the field, its choices a `Literal` type; so `train_flags`
makes the whole command line from the dataclasses (as torchtitan's JobConfig does),
and the field's metadata says what a sweep may vary and what `fab runs` and report.md
show. A new flag is a new field. Torch-free: `fab train` and `fab sweep` check the flags
with this same parser before anything ships (`check_train_flags`), and `fab runs` asks
`not_settings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from box.contract import DATASETS_DIR, RUNS_DIR, workspace_path
from trainer.flags import LISTED, RANGE, add_flags, flag, flag_fields, from_flags

Precision = Literal["auto", "bf16", "fp16", "fp32"]
Arch = Literal["resnet34", "resnet18"]
# trainer.model.FORMULATIONS, and "auto"; spelled here so the CLI parses without torch.
Formulation = Literal["auto", "gemm", "torch", "nhwc"]
PRECISIONS, ARCHS, FORMULATIONS = (typing.get_args(kind) for kind in (Precision, Arch, Formulation))
# `train --epochs` left out; `fab plan` costs a run of this many too.
DEFAULT_EPOCHS = 20


# The residual blocks of a 100-sample window see 25 samples at most (the stem and its
# pool halve it twice), 4 in the last stage: wider kernels convolve mostly padding.
MAX_KERNEL_SIZE = 15
MAX_NAME_CHARS = 64


class UserError(Exception):
    """A mistake the user can fix (bad flag, bad dataset, incompatible resume): exit 2."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def check_run_name(name: str) -> None:
    """A run's `--name` is one printable line a table can show (`fab runs`)."""
    _require(
        len(name) <= MAX_NAME_CHARS and name.isprintable() and name == name.strip(),
        f"--name {name!r}: expected at most {MAX_NAME_CHARS} printable characters "
        "without leading or trailing blanks",
    )


@dataclass(frozen=True)
class SynthConfig:
    """`synth`: a synthetic PPG dataset."""

    out: Path = flag()
    """Directory the dataset is written to (created)."""
    cases: int = flag()
    """Number of synthetic subjects (at least 3); splits are made by case."""
    windows_per_case: int = flag()
    """Windows (one glucose label each) per case."""
    window_length: int = flag(100)
    """Samples per window (at least 32)."""
    seed: int = flag(0)
    """Everything generated is a pure function of this seed."""
    force: bool = flag(False)
    """Replace a dataset already in --out (without it, one there is refused)."""

    def __post_init__(self) -> None:
        _require(self.cases >= 3, f"--cases {self.cases}: need at least 3 (train/val/test)")
        _require(
            self.windows_per_case >= 1,
            f"--windows-per-case {self.windows_per_case}: must be at least 1",
        )
        _require(
            self.window_length >= 32,
            f"--window-length {self.window_length}: the model needs at least 32 samples",
        )


@dataclass(frozen=True)
class DataConfig:
    data_dir: Path = flag(name="data", setting=False)
    """Dataset directory (windows.npy, glucose.npy, case_id.npy, meta.json)."""
    val_fraction: float = flag(0.15)
    """Share of cases held out for validation (at least one case; below 0.5)."""
    test_fraction: float = flag(0.15)
    """Share of cases held out for the final test (at least one case; below 0.5)."""

    def __post_init__(self) -> None:
        for name in ("val_fraction", "test_fraction"):
            value = getattr(self, name)
            _require(
                0 < value < 0.5,
                f"--{name.replace('_', '-')} {value}: expected a share between 0 and 0.5",
            )


@dataclass(frozen=True)
class ModelConfig:
    arch: Arch = flag("resnet34", name="model", tunable=LISTED)
    """The network: resnet34 (the product model, ~7.2M parameters) or resnet18 (quick
    experiments)."""
    kernel_size: int = flag(3, tunable=LISTED)
    """Width of the residual blocks' convolutions: odd (so the padding stays symmetric),
    at most 15."""
    dropout: float = flag(0.2, tunable=RANGE)
    """Dropout before the linear head."""

    def __post_init__(self) -> None:
        _require(self.arch in ARCHS, f"--model {self.arch}: expected one of {', '.join(ARCHS)}")
        _require(
            self.kernel_size % 2 == 1 and 1 <= self.kernel_size <= MAX_KERNEL_SIZE,
            f"--kernel-size {self.kernel_size}: expected an odd width from 1 to {MAX_KERNEL_SIZE}",
        )
        _require(0 <= self.dropout < 1, f"--dropout {self.dropout}: expected 0 <= p < 1")


@dataclass(frozen=True)
class OptimConfig:
    lr: float | None = flag(
        None, tunable=RANGE, auto="2e-3 x sqrt(batch / 256) up to batch 1024: 4e-3 at most"
    )
    """Peak AdamW learning rate, reached after warmup, then cosine decay. Left out, the
    trainer's for the global batch (`trainer.loop.defaults.default_lr`); a resume keeps
    the run's."""
    weight_decay: float = flag(1e-2, tunable=RANGE)
    """AdamW decoupled weight decay (0 to 1: each step shrinks weights by lr x this), on
    the convolution and linear weights; BatchNorm's scales and shifts and the biases
    take none (unless --decay-norms-and-biases)."""
    decay_norms_and_biases: bool | None = flag(None, auto="off (a resume: the run's)")
    """Weight decay on every parameter, BatchNorm's scale and shift and the biases
    included, as runs started before 2026-11-27 trained (their resumes keep it). They
    carry no scale for the decay to shrink towards: decaying them only pulls them off
    their values."""
    beta2: float | None = flag(None, auto="0.999 at batch 256, lower at larger, 0.95 at least")
    """AdamW's second-moment decay (0 to 1). Left out, the trainer's for the global
    batch (`trainer.loop.defaults.default_beta2`); a resume keeps the run's."""
    warmup_fraction: float = flag(0.05, tunable=RANGE)
    """Share of all optimizer steps spent warming up linearly from zero."""
    min_lr_fraction: float = flag(0.02, tunable=RANGE)
    """Cosine decays to this share of the peak learning rate."""
    grad_clip_norm: float = flag(1.0, name="grad-clip", tunable=RANGE)
    """Global gradient norm clip (0 turns clipping off)."""
    grad_accum: int = flag(1, tunable=RANGE)
    """Micro-batches accumulated per optimizer step."""

    def __post_init__(self) -> None:
        _require(
            self.lr is None or (math.isfinite(self.lr) and self.lr > 0),
            f"--lr {self.lr}: must be a positive number",
        )
        _require(self.grad_accum >= 1, f"--grad-accum {self.grad_accum}: must be at least 1")
        _require(
            0 <= self.weight_decay <= 1, f"--weight-decay {self.weight_decay}: expected 0 to 1"
        )
        _require(
            self.beta2 is None or 0 < self.beta2 < 1,
            f"--beta2 {self.beta2}: expected a decay between 0 and 1 (e.g. 0.99)",
        )
        _require(
            0 <= self.warmup_fraction < 1,
            f"--warmup-fraction {self.warmup_fraction}: expected a share from 0 up to (not) 1",
        )
        _require(
            0 <= self.min_lr_fraction <= 1,
            f"--min-lr-fraction {self.min_lr_fraction}: expected a share from 0 to 1",
        )
        _require(
            math.isfinite(self.grad_clip_norm) and self.grad_clip_norm >= 0,
            f"--grad-clip {self.grad_clip_norm}: expected a norm >= 0 (0 turns clipping off)",
        )


@dataclass(frozen=True)
class TrainConfig:
    run_dir: Path = flag(setting=False)
    """Everything the run writes goes here; its name is the run id. A run dir that holds
    a run resumes it."""
    epochs: int = flag(DEFAULT_EPOCHS, tunable=RANGE)
    """Passes over the training cases' windows."""
    batch_size: int | None = flag(
        None,
        tunable=RANGE,
        auto="a power of two from 1024 to 16384 over all GPUs, 1600+ steps an epoch; 256 on a CPU",
    )
    """Windows per micro-batch over all ranks (the global batch; each rank takes
    1/world_size, shares differing by one window where it does not divide). Left out:
    the trainer's global batch for the device and the training set, whatever the
    number of ranks (on GPUs the largest power of two from 1024 to 16384 that leaves
    1600 steps an epoch, less where a GPU's memory holds less; 256 on a CPU) at the
    run's first start, the run's own on a resume (`trainer.loop.defaults`)."""
    precision: Precision = flag("auto", auto="bf16 on sm_80+ GPUs, fp16 on older, fp32 on CPU")
    """The training step's arithmetic. auto: bf16 on GPUs that compute it natively
    (sm_80+), fp16 + GradScaler on older GPUs (V100, T4), fp32 on CPU."""
    seed: int = flag(0, tunable=RANGE)
    """Seeds the split, the init, every epoch's permutation and dropout."""
    patience: int = flag(5, tunable=RANGE)
    """Stop after this many epochs without a better validation MAE."""
    max_steps: int | None = flag(None)
    """Stop (as finished) after this many optimizer steps in total."""
    log_every_steps: int = flag(10, name="log-every", setting=False)
    """Optimizer steps between log lines; the only per-step host syncs happen here."""
    formulation: Formulation = flag("auto", auto="gemm on a CPU, the fastest timed on a GPU")
    """How the network computes (`trainer.model`): gemm, torch or nhwc. auto: gemm on a
    CPU, on a GPU the fastest of them timed at the run's first start; a resume keeps
    the run's."""
    deterministic: bool = flag(False)
    """The same result every run on one GPU: no cuDNN autotuning, deterministic kernels
    only (slower); the CPU is deterministic anyway."""
    compile: bool = flag(False)
    """torch.compile the network (minutes at start; fused kernels, on a GPU the step's
    CUDA graph records them; the compiled code is cached in the run dir, a resume does
    not compile again)."""
    graph: bool = flag(True, name="no-graph")
    """Run eager steps, no CUDA graph. Without it, on a GPU the whole training step (and
    evaluation's forward) is recorded as a CUDA graph once and replayed: one launch a
    step instead of ~850 (`trainer.loop.step`); a capture that fails falls back to eager
    by itself."""
    name: str = flag("", setting=False)
    """A person's label for the run (`fab train --name`); the run id stays its key. A
    resume that gives none keeps the run's."""
    skip_test: bool = flag(False, setting=False)
    """Leave the test split unevaluated: a sweep's trial, whose sweep evaluates the test
    split once, for the trial it chooses (trials are compared on validation only)."""
    world_size: int = 1
    """Ranks training together (torchrun's WORLD_SIZE; 1 without torchrun)."""
    per_rank_batch_size: int | None = field(init=False, metadata={"setting": False})
    """Windows per micro-batch on each rank: batch_size / world_size, rounded up."""

    def __post_init__(self) -> None:
        _require(self.epochs >= 1, f"--epochs {self.epochs}: must be at least 1")
        _require(
            self.batch_size is None or self.batch_size >= 2,
            f"--batch-size {self.batch_size}: must be at least 2",
        )
        _require(
            self.precision in PRECISIONS,
            f"--precision {self.precision}: expected one of {', '.join(PRECISIONS)}",
        )
        _require(
            self.formulation in FORMULATIONS,
            f"--formulation {self.formulation}: expected one of {', '.join(FORMULATIONS)}",
        )
        _require(self.patience >= 1, f"--patience {self.patience}: must be at least 1")
        _require(
            self.max_steps is None or self.max_steps >= 1,
            f"--max-steps {self.max_steps}: must be at least 1",
        )
        _require(
            self.log_every_steps >= 1, f"--log-every {self.log_every_steps}: must be at least 1"
        )
        _require(self.world_size >= 1, f"WORLD_SIZE {self.world_size}: must be at least 1")
        check_run_name(self.name)
        if self.batch_size is None:
            object.__setattr__(self, "per_rank_batch_size", None)
            return
        _require(
            self.batch_size >= self.world_size,
            f"--batch-size {self.batch_size} is smaller than WORLD_SIZE {self.world_size}; the "
            f"batch is global and every rank takes a share: use at least {self.world_size}",
        )
        # Shares differ by one window where the batch does not divide (a resumed 4096 on 3 GPUs).
        object.__setattr__(self, "per_rank_batch_size", -(-self.batch_size // self.world_size))

    @property
    def run_id(self) -> str:
        return Path(self.run_dir).resolve().name


@dataclass(frozen=True)
class RunConfig:
    """Everything `train` needs; what config.json and checkpoints record."""

    data: DataConfig
    train: TrainConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint_every_seconds: float = flag(
        600.0, name="checkpoint-every", metavar="DURATION", unit="s", setting=False
    )
    """Wall clock between `last.pt` saves inside an epoch (0: at epochs only)."""
    checkpoint_every_steps: int | None = flag(None, metavar="N", setting=False)
    """Optimizer steps between `last.pt` saves, on top of the time-based ones."""
    checkpoint_uri: str | None = flag(None, setting=False)
    """Remote mirror for checkpoints and the run dir (file://, s3://, az://): a run's
    folder in storage, `<storageUri>/runs/<run id>`."""

    def __post_init__(self) -> None:
        _require(
            math.isfinite(self.checkpoint_every_seconds) and self.checkpoint_every_seconds >= 0,
            f"--checkpoint-every {self.checkpoint_every_seconds:g}: must be >= 0 seconds",
        )
        _require(
            self.checkpoint_every_steps is None or self.checkpoint_every_steps >= 1,
            f"--checkpoint-every-steps {self.checkpoint_every_steps}: must be at least 1",
        )

    def with_world_size(self, world_size: int) -> RunConfig:
        """This config for `world_size` ranks (validated: the global batch must split)."""
        train = dataclasses.replace(self.train, world_size=world_size)
        return dataclasses.replace(self, train=train)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (paths as strings) for config.json and checkpoints."""

        def plain(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, dict):
                return {key: plain(item) for key, item in value.items()}
            return value

        return plain(dataclasses.asdict(self))


SECTIONS: dict[str, type] = {
    name: hint
    for name, hint in typing.get_type_hints(RunConfig).items()
    if dataclasses.is_dataclass(hint)
}
"""config.json's sections (RunConfig.to_dict): `data`, `train`, `model`, `optim`."""
OWNERS = (*SECTIONS.items(), ("", RunConfig))
"""Each config in config.json, with its section ("": the top level)."""
TRAIN_CONFIGS = tuple(config for _, config in OWNERS)
"""The configs whose `flag` fields are `python -m trainer train`'s flags."""


def train_flag_fields() -> list[tuple[str, type, dataclasses.Field]]:
    """Every `train` flag as (its config.json section, "" at the top level; its config;
    its field), in the configs' order."""
    return [(section, config, item) for section, config in OWNERS for item in flag_fields(config)]


def not_settings() -> frozenset[str]:
    """config.json's keys, dotted as `fab runs` flattens them (`train.run_dir`), that say
    where a run is or how often it reports, not how it trains (a field's `setting`)."""
    return frozenset(
        f"{section}.{item.name}" if section else item.name
        for section, config in OWNERS
        for item in dataclasses.fields(config)
        if not item.metadata.get("setting", True)
    )


class _FlagParser(argparse.ArgumentParser):
    """An argparse parser whose errors are a UserError, not an exit (`fab` asks it)."""

    def error(self, message: str) -> typing.NoReturn:
        raise UserError(f"trainer flags: {message}")


def train_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every config's flag fields to `parser` (dest: the field's name)."""
    return add_flags(parser, *TRAIN_CONFIGS)


def run_config_from_flags(args: argparse.Namespace) -> RunConfig:
    """The RunConfig `train`'s parsed flags (train_flags) name."""
    sections = {name: from_flags(config, args) for name, config in SECTIONS.items()}
    return from_flags(RunConfig, args, **sections)


def check_train_flags(flags: Sequence[str]) -> RunConfig:
    """`flags` as `python -m trainer train` would take them, before anything ships;
    UserError naming what is wrong. `--data` and `--run-dir` stand in where absent
    (`fab` adds its own)."""
    placeholders = {
        "--data": workspace_path(DATASETS_DIR, "check"),
        "--run-dir": workspace_path(RUNS_DIR, "check"),
    }
    stand_ins = [
        part for key, value in placeholders.items() if key not in flags for part in (key, value)
    ]
    args = train_flags(_FlagParser(prog="python -m trainer train")).parse_args([*stand_ins, *flags])
    return run_config_from_flags(args)
