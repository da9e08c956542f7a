"""Durations and counts as a person types them: the one grammar every flag of `python -m
trainer` and of `fab` reads them with (`fab` imports this module; it loads without torch).

A duration is `90m`, `2h`, `1h30m`, `45s`, or a bare number in the flag's own unit
(`1.5` is an hour and a half where the flag is in hours; its help says which); units
may be spelt out and spaced as `fab status` prints them (`1 h 30 min`, `90min`,
`2 hours`). A count
is a whole number, plain (`20`), with a `k` or `M` (`600k`, `1.2M`) or with an exponent
(`1e6`). Each parser raises ValueError saying what it accepts; the caller names the flag.
"""

from __future__ import annotations

import argparse
import decimal
import math
import re
from collections.abc import Callable

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
UNIT_NAMES = {"s": "seconds", "m": "minutes", "h": "hours"}
_PART = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION = re.compile(rf"(?:{_PART}h)?(?:{_PART}m)?(?:{_PART}s)?")
_UNIT_WORDS = re.compile(r"(hours?|hrs?|minutes?|mins?|seconds?|secs?)")
"""Spelt-out units, read as their letter (`min` is `m`)."""
COUNT_FORMS = "a whole number such as 20, 600k, 1.2M or 1e6"
_COUNT_SCALES = {"k": 1_000, "m": 1_000_000}


def duration_forms(unit: str) -> str:
    """What a duration flag in `unit` accepts, as its help and its errors say it."""
    return f"a duration such as 90m, 2h or 1h30m, or a bare number of {UNIT_NAMES[unit]}"


def parse_duration(text: str, unit: str, whole: bool = False) -> float:
    """`text` as a number of `unit` ("s", "m" or "h"); with `whole`, an int (`90s` is
    not whole minutes)."""
    value = _in_unit(str(text).strip().lower(), unit)
    if value is None:
        raise ValueError(f"{text!r} is not {duration_forms(unit)}")
    if whole:
        if value != int(value):
            raise ValueError(f"{text!r} is not a whole number of {UNIT_NAMES[unit]}")
        return int(value)
    return value


def _in_unit(text: str, unit: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        text = _UNIT_WORDS.sub(lambda word: word[0][0], text).replace(" ", "")
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            return None
        seconds = sum(
            float(part) * UNIT_SECONDS[name]
            for part, name in zip(match.groups(), "hms", strict=True)
            if part
        )
        return seconds / UNIT_SECONDS[unit]
    return value if math.isfinite(value) else None


def parse_count(text: str) -> int:
    """`text` as a whole number; exact, `1.1k` is 1100 (decimal, not float, arithmetic)."""
    cleaned = str(text).strip()
    scale = _COUNT_SCALES.get(cleaned[-1:].lower(), 1)
    try:
        value = decimal.Decimal(cleaned[:-1] if scale > 1 else cleaned) * scale
    except decimal.InvalidOperation:
        value = decimal.Decimal("NaN")
    if not value.is_finite() or value != value.to_integral_value():
        raise ValueError(f"{text!r} is not {COUNT_FORMS}")
    return int(value)


def flag_problem(flag: str, value: object, expected: str, example: str) -> str:
    """The one wording of a flag value refused: what was seen, what it takes, an example."""
    return f"{flag} is {value!r}, expected {expected}; pass e.g. {flag} {example}"


def duration_type(unit: str) -> Callable[[str], float]:
    """An argparse `type=` reading a duration in `unit`; its error names the forms."""

    def duration(text: str) -> float:
        try:
            return parse_duration(text, unit)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return duration


def count(text: str) -> int:
    """An argparse `type=` reading a count; its error names the forms."""
    try:
        return parse_count(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
