"""One value against one reference's constraints: type, enum, pattern, lengths, counts.

Shared by the AWS references (botocore shapes, CloudFormation schemas) and the Azure
ones (msrest `_validation`, enum classes). AWS patterns are Java regular expressions
(`\\p{L}`, a `(?i)` in mid-pattern), which Python's `re` refuses: they are matched
with `regex`, as cfn-lint itself does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import regex

PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "blob": (str,),
    "timestamp": (str,),
    "integer": (int, float),
    "long": (int, float),
    "double": (int, float),
    "float": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "list": (list,),
    "structure": (dict,),
    "object": (dict,),
    "map": (dict,),
}


@dataclass(frozen=True)
class Constraint:
    """What one reference says a value must be; `source` names the reference in messages."""

    source: str
    type: str | None = None
    enum: tuple[str, ...] = ()
    enum_ignores_case: bool = False
    pattern: str | None = None
    pattern_anywhere: bool = False
    """msrest validates with `re.search`; AWS and CloudFormation match the whole value."""
    min: float | None = None
    max: float | None = None
    """Length of a string, items of a list, or the number itself, as the reference uses them."""
    min_items: int | None = None
    max_items: int | None = None

    def problems(self, value: object) -> list[str]:
        """Each way `value` breaks this constraint, as "...: what (source)"."""
        found = self._type_problem(value)
        if found:
            return [f"{found} ({self.source})"]
        found = []
        if isinstance(value, str):
            found += self._string_problems(value)
        elif isinstance(value, list):
            found += self._count_problems(len(value))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found += self._number_problems(value)
        return [f"{problem} ({self.source})" for problem in found]

    def _type_problem(self, value: object) -> str | None:
        wanted = PYTHON_TYPES.get(self.type or "")
        if wanted is None:
            return None
        # bool is an int to Python, never to the APIs.
        if not isinstance(value, wanted) or isinstance(value, bool) != (bool in wanted):
            return f"{value!r} is a {type(value).__name__}, expected {self.type}"
        if self.type in ("integer", "long") and isinstance(value, float):
            return None if value.is_integer() else f"{value!r} is not a whole number"
        return None

    def _string_problems(self, value: str) -> list[str]:
        found = []
        if self.enum:
            known = {e.lower() for e in self.enum} if self.enum_ignores_case else set(self.enum)
            if (value.lower() if self.enum_ignores_case else value) not in known:
                found.append(f"{value!r} is not one of {sorted(self.enum)[:12]}")
        if self.min is not None and len(value) < self.min:
            found.append(f"{value!r} is shorter than {self.min:g} characters")
        if self.max is not None and len(value) > self.max:
            found.append(f"{_short(value)} is longer than {self.max:g} characters")
        if self.pattern is not None:
            match = regex.search if self.pattern_anywhere else regex.fullmatch
            if not match(self.pattern, value, regex.DOTALL):
                found.append(f"{_short(value)} does not match {self.pattern!r}")
        return found

    def _count_problems(self, count: int) -> list[str]:
        low = self.min_items if self.min_items is not None else self.min
        high = self.max_items if self.max_items is not None else self.max
        found = []
        if low is not None and count < low:
            found.append(f"{count} items, fewer than {low:g}")
        if high is not None and count > high:
            found.append(f"{count} items, more than {high:g}")
        return found

    def _number_problems(self, value: float) -> list[str]:
        if not math.isfinite(value):
            return [f"{value!r} is not a finite number"]
        if self.min is not None and value < self.min:
            return [f"{value:g} is below the minimum {self.min:g}"]
        if self.max is not None and value > self.max:
            return [f"{value:g} is above the maximum {self.max:g}"]
        return []


def _short(value: str) -> str:
    return repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value)} characters)"
