"""Numbers as a person reads them on `fab status`: `1 h 05 min`, `$1.73`, an MAE to two
decimals, and the trainer's last log record (metrics.jsonl) as a sentence."""

from __future__ import annotations

import functools
from typing import Any

SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400


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
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return format(value, spec)


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
    shown = [f"{key} {_plain(value)}" for key, value in record.items() if key not in ("time",)]
    return ", ".join(shown) or "an empty record"


def _plain(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
