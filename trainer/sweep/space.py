"""The flags a sweep varies, written `--param NAME=SPEC`, checked before any trial runs.

    lr=1e-4:1e-2:log      a range (log-uniform); `0:0.3` uniform; integers stay integers
    dropout=0,0.1,0.3     listed values: what a grid takes, and a choice for the others

Each value is checked by the trainer's own config (`trainer.config`): the bounds live
there once, and a value out of them is refused here with the trainer's message, on
the laptop before anything ships and again in the image before a trial starts. A
range is checked at both ends: every bound in the configs is an interval. Standard
library and `trainer.config` only: `fab` imports this.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import (
    SECTIONS,
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    UserError,
)
from trainer.flags import RANGE, tunables, without_none
from trainer.quantities import COUNT_FORMS, parse_count

LOG = "log"


@dataclass(frozen=True)
class Tunable:
    """A `train` flag a sweep may vary (its field's `tunable`): the config field it sets
    and its type."""

    config: type
    field: str
    kind: type
    ranges: bool = True
    """False: listed values only (odd kernel widths, architectures)."""

    def check(self, value: Any) -> None:
        """Raise the trainer's UserError when `value` is out of the flag's bounds."""
        base = {DataConfig: {"data_dir": Path()}, TrainConfig: {"run_dir": Path()}}
        self.config(**base.get(self.config, {}), **{self.field: value})


def _kind(config: type, name: str) -> type:
    """int, float or str: how a swept value is read (a Literal's choices are names)."""
    hint = without_none(typing.get_type_hints(config)[name])
    return str if typing.get_origin(hint) is typing.Literal else hint


# The optimizer's first, as `fab sweep --help` lists them: what a sweep varies most.
TUNABLE = {
    name: Tunable(config, item.name, _kind(config, item.name), item.metadata["tunable"] == RANGE)
    for name, (config, item) in tunables(OptimConfig, ModelConfig, TrainConfig).items()
}
"""The flags a sweep may vary (a field's `tunable`), by name: `lr`, `kernel-size`."""

CONFIG_SECTIONS = {config: section for section, config in SECTIONS.items()}
"""config.json's section of each config (RunConfig.to_dict)."""


def recorded(config: dict, name: str) -> Any:
    """The value of swept flag `name` that a run's config.json records (None: none)."""
    tunable = TUNABLE[name]
    section = config.get(CONFIG_SECTIONS[tunable.config])
    return section.get(tunable.field) if isinstance(section, dict) else None


@dataclass(frozen=True)
class Param:
    """One swept flag: listed `values`, or a range `low`..`high` (log-uniform if `log`)."""

    name: str
    values: tuple[Any, ...] = ()
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False

    @property
    def is_range(self) -> bool:
        return not self.values

    @property
    def kind(self) -> type:
        return TUNABLE[self.name].kind

    def text(self) -> str:
        """The spec as written (`parse_param(p.text()) == p`)."""
        if self.values:
            return f"{self.name}={','.join(str(v) for v in self.values)}"
        return f"{self.name}={self.low}:{self.high}" + (f":{LOG}" if self.log else "")


def _convert(text: str, kind: type, where: str) -> Any:
    try:
        value = _READERS[kind](text.strip())  # a count as every flag takes it: 16k, 1e4
    except ValueError:
        raise UserError(f"{where}: {text.strip()!r} is not {_KIND_WORDS[kind]}") from None
    if kind is float and not math.isfinite(value):
        raise UserError(f"{where}: {text.strip()!r} is not a finite number")
    return value


_READERS = {float: float, int: parse_count, str: str}
_KIND_WORDS = {float: "a number", int: COUNT_FORMS, str: "a name"}


def parse_param(text: str) -> Param:
    """`--param NAME=SPEC` as a Param; UserError naming the spec when it is wrong."""
    where = f"--param {text}"
    name, sep, spec = text.partition("=")
    name = name.strip().removeprefix("--")
    if not sep or name not in TUNABLE:
        raise UserError(
            f"{where}: expected NAME=VALUES or NAME=LOW:HIGH[:log] with NAME one of "
            f"{', '.join(TUNABLE)}"
        )
    tunable = TUNABLE[name]
    if ":" in spec:
        param = _range(name, tunable, spec, where)
        ends = (param.low, param.high)
    else:
        values = tuple(_convert(v, tunable.kind, where) for v in spec.split(","))
        if len(set(values)) != len(values):
            raise UserError(f"{where}: a value is listed twice")
        param, ends = Param(name, values=values), values
    for value in ends:
        try:
            tunable.check(value)
        except UserError as error:
            raise UserError(f"{where}: {error}") from None
    return param


def _range(name: str, tunable: Tunable, spec: str, where: str) -> Param:
    parts = spec.split(":")
    if not tunable.ranges or tunable.kind is str:
        raise UserError(f"{where}: --{name} takes listed values only (e.g. {name}=A,B)")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2].strip() != LOG):
        raise UserError(f"{where}: a range is LOW:HIGH or LOW:HIGH:log")
    low, high = (_convert(part, tunable.kind, where) for part in parts[:2])
    log = len(parts) == 3
    if not low < high:
        raise UserError(f"{where}: LOW must be below HIGH")
    if log and low <= 0:
        raise UserError(f"{where}: a log range needs LOW > 0")
    return Param(name, low=low, high=high, log=log)


def parse_params(texts: list[str]) -> list[Param]:
    """Every `--param`, each flag at most once."""
    params = [parse_param(text) for text in texts]
    names = [param.name for param in params]
    if not params:
        raise UserError("which flags? pass --param NAME=SPEC at least once (e.g. lr=1e-4:1e-2:log)")
    if len(set(names)) != len(names):
        raise UserError(f"--param {max(names, key=names.count)} is given twice")
    return params


def grid_size(params: list[Param]) -> int:
    """How many trials a grid over `params` has; UserError when one is a range."""
    ranges = [param.text() for param in params if param.is_range]
    if ranges:
        raise UserError(
            f"--param {ranges[0]}: a grid needs listed values (NAME=A,B,C); "
            "ranges are for --method random or tpe"
        )
    return math.prod(len(param.values) for param in params)


def trial_flags(values: dict[str, Any]) -> list[str]:
    """`train` flags for one trial's values, in the params' order."""
    return [part for name, value in values.items() for part in (f"--{name}", str(value))]
