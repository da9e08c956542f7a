"""A run's settings as the trainer flags that give them, read back from config.json.

Every `train` flag that sets how the run learns is listed with its value, and beside it
the default whenever the run's value differs, so a sweep trial's report says what was
tuned (dropout, weight decay, kernel size, warm-up, ...). The defaults are the config
dataclasses' own (trainer.config), the ones `train` falls back on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.config import DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "train": TrainConfig}
FLAGS = (
    ("--model", "model", "arch"),
    ("--epochs", "train", "epochs"),
    ("--lr", "optim", "lr"),
    ("--grad-accum", "optim", "grad_accum"),
    ("--formulation", "train", "formulation"),
    ("--seed", "train", "seed"),
    ("--patience", "train", "patience"),
    ("--max-steps", "train", "max_steps"),
    ("--deterministic", "train", "deterministic"),
    ("--compile", "train", "compile"),
    ("--kernel-size", "model", "kernel_size"),
    ("--dropout", "model", "dropout"),
    ("--weight-decay", "optim", "weight_decay"),
    ("--decay-norms-and-biases", "optim", "decay_norms_and_biases"),
    ("--beta2", "optim", "beta2"),
    ("--warmup-fraction", "optim", "warmup_fraction"),
    ("--min-lr-fraction", "optim", "min_lr_fraction"),
    ("--grad-clip", "optim", "grad_clip_norm"),
    ("--val-fraction", "data", "val_fraction"),
    ("--test-fraction", "data", "test_fraction"),
    ("--log-every", "train", "log_every_steps"),
    ("--skip-test", "train", "skip_test"),
    ("--checkpoint-every-steps", "", "checkpoint_every_steps"),
    ("--checkpoint-uri", "", "checkpoint_uri"),
)
"""(flag, config.json section ("" for the top level), field); --data, --batch-size,
--precision and --checkpoint-every are shown by the report with what they resolved to."""


def default(section: str, name: str) -> Any:
    """The value `train` takes when the flag is left out."""
    owner = SECTIONS.get(section, RunConfig)
    found = {field.name: field for field in dataclasses.fields(owner)}[name]
    return found.default


def flag_rows(config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(flag, the run's value, its default) per flag; the default is
    dataclasses.MISSING where the run kept it."""
    rows = []
    for flag, section, name in FLAGS:
        value = (config.get(section) or {}).get(name) if section else config.get(name)
        usual = default(section, name)
        rows.append((flag, value, dataclasses.MISSING if value == usual else usual))
    return rows
