"""Numbers as a person reads them on `fab status`: `1 h 05 min`, `$1.73`, an MAE to two
decimals, and the trainer's last log record (metrics.jsonl) as a sentence."""

from __future__ import annotations

import functools
from typing import Any

from box.contract import WHOLE_NUMBER_LIMIT, finite_float
from ops.terminal_text import cut

SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400
SHOWN_KEYS = 12
"""Of a log record no sentence is made for: its first keys, said as they are."""
SHOWN_CHARACTERS = 40
"""Of a key or a value of such a record."""


def duration(seconds: float) -> str:
    """`45 s`, `12 min`, `1 h 05 min`, `2 d 03 h`: the two largest units that matter."""
    seconds = max(float(seconds), 0.0)
    if seconds < SECONDS_PER_MINUTE:
        return f"{seconds:.0f} s"
    minutes = round(seconds / SECONDS_PER_MINUTE)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(round(seconds / SECONDS_PER_HOUR), 24)
    return f"{days} d {hours:02d} h"


def money(usd: float) -> str:
    """Dollars with cents: `$0.53`, `$1,234.50`."""
    return f"${usd:,.2f}"


def _number(record: dict, key: str, spec: str) -> str | None:
    """`record[key]` formatted, where it is a number that format takes: a whole one for
    `d`, else a finite one (metrics.jsonl is the run's to write: NaN, or 400 digits)."""
    value = record.get(key)
    if spec.endswith("d"):
        whole = isinstance(value, int) and not isinstance(value, bool)
        return format(value, spec) if whole and abs(value) < WHOLE_NUMBER_LIMIT else None
    number = finite_float(value)
    return None if number is None else format(number, spec)


# What an epoch's and a train step's record add to their first words when they hold it:
# (words around the value, key, format).
_ALSO_SAID = {
    "epoch": (
        ("best {}", "best_val_mae", ".2f"),
        ("constant-median baseline {}", "val_baseline_mae", ".2f"),
    ),
    "train": (("learning rate {}", "lr", ".2e"), ("{} windows/s", "windows_per_s", ",.0f")),
}


def log_sentence(record: dict[str, Any]) -> str:
    """The trainer's last log record, said: what it measured, in its units."""
    get = functools.partial(_number, record)
    kind, step, epoch = record.get("kind"), get("step", "d"), get("epoch", "d")
    kind = kind if isinstance(kind, str) else None
    if kind in _ALSO_SAID:
        if kind == "epoch":
            head = (
                f"epoch {epoch} done at step {step}: validation MAE {get('val_mae', '.2f')} mg/dL"
            )
        else:
            head = f"step {step} of epoch {epoch}: train loss {get('loss', '.4f')}"
        also = [words.format(v) for words, key, spec in _ALSO_SAID[kind] if (v := get(key, spec))]
        return ", ".join([head, *also])
    if kind == "start":
        return f"the trainer started at step {step}"
    shown = [f"{_cut(key)} {_plain(value)}" for key, value in record.items() if key != "time"]
    said = ", ".join(shown[:SHOWN_KEYS]) + (", …" if len(shown) > SHOWN_KEYS else "")
    return said or "an empty record"


def _plain(value: Any) -> str:
    """A value of a record the trainer did not say how to say: a number, a word or text
    (cut), or what kind of thing it is."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) < WHOLE_NUMBER_LIMIT else "a huge integer"
    if isinstance(value, (str, bool)) or value is None:
        return _cut(str(value))
    return "{…}" if isinstance(value, dict) else "[…]"


def _cut(text: str) -> str:
    """Text of a record, cut; made safe where the line is printed
    (`ops.terminal_text.printable`, once)."""
    return cut(text, SHOWN_CHARACTERS)
