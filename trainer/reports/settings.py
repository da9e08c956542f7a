"""A run's settings as the trainer flags that give them, read back from config.json.

Every `train` flag is listed (trainer.config's field table, in its order) with the
run's value, and beside it the default whenever the run changed it, so a sweep trial's
report says what was tuned (dropout, weight decay, kernel size, warm-up, ...). A flag
the run left to the trainer (a field's `auto`: `--lr`, `--batch-size`, `--formulation`,
...) shows what the trainer picked, marked as the trainer's, not as a change; given, its
default is the trainer's rule.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from trainer.config import RunConfig, train_flag_fields
from trainer.flags import TRAINERS, flag_name, shown_value


class Row(NamedTuple):
    flag: str
    value: str
    default: str
    """The default where the run's value differs from it, else empty."""


def given_to_the_trainer(asked: RunConfig) -> frozenset[str]:
    """The fields left to the trainer (`auto`) that `asked`, the config as the flags
    gave it, gave all the same: the report shows their default as changed."""
    return frozenset(
        item.name
        for section, _, item in train_flag_fields()
        if item.metadata["auto"]
        and getattr(getattr(asked, section) if section else asked, item.name) != item.default
    )


def flag_rows(
    config: dict[str, Any], summary: dict[str, Any], given: frozenset[str] = frozenset()
) -> list[Row]:
    """One row per `train` flag of the run whose config.json is `config` and summary.json
    `summary`; `given`: the flags left to the trainer that the run gave
    (given_to_the_trainer), the others it left."""
    train = config["train"]
    # What config.json records as asked, the run resolved: these say what it ran with.
    resolved = {
        "batch_size": f"{train['batch_size']} ({train['per_rank_batch_size']} a rank x "
        f"{train['world_size']})",
        "precision": summary["precision"],
    }
    rows = []
    for section, _, item in train_flag_fields():
        value = (config.get(section) or {}).get(item.name) if section else config.get(item.name)
        if item.default is True:  # --no-graph: the flag is on when the field is off
            value = not value
        shown = resolved.get(item.name) or shown_value(value, item.metadata["unit"])
        rows.append(Row(flag_name(item), *_value_and_default(item, value, shown, given)))
    return rows


def _value_and_default(
    item: dataclasses.Field, value: Any, shown: str, given: frozenset[str]
) -> tuple[str, str]:
    auto, default = item.metadata["auto"], item.default
    if auto and item.name not in given:
        return f"{shown} ({TRAINERS})", ""
    if auto:
        return shown, f"{TRAINERS}: {auto}"
    if default is dataclasses.MISSING:  # a required flag (--data, --run-dir)
        return shown, ""
    default = (not default) if default is True else default
    return shown, "" if value == default else shown_value(default, item.metadata["unit"])
