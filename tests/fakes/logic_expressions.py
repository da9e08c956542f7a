"""Expressions of the Logic Apps Workflow Definition Language, evaluated as Azure does.

Only what the program's workflows use: string, number and null literals, function
calls, and property access (`x['name']`, null-safe `x?['name']`). The functions are
those of the reference (learn.microsoft.com/azure/logic-apps/workflow-definition-
language-functions-reference) the keeper's decision needs; `body(action)` is the
answer of an action of the run, given by the test. Like Azure, every argument is
evaluated before the call, `if`'s unchosen branch too, so an expression that fails on
an input in a branch it does not take fails here as it would there.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(-?\d+(?:\.\d+)?)|([A-Za-z_]\w*)|(\?\[|[()\[\],]))")
_EPOCH = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)


class ExpressionError(Exception):
    """What would fail the action at run time."""


def evaluate(expression: str, bodies: dict[str, Any], now: datetime.datetime) -> Any:
    """The value of `expression` (with or without its leading `@`)."""
    tokens = _tokens(expression.removeprefix("@"))
    value, rest = _expression(tokens, _functions(bodies, now))
    if rest:
        raise ExpressionError(f"unexpected {rest[0]!r}")
    return value


def _tokens(text: str) -> list[str]:
    tokens, at = [], 0
    while text[at:].strip():
        match = _TOKEN.match(text, at)
        if match is None:
            raise ExpressionError(f"cannot read {text[at:]!r}")
        tokens.append(match.group(match.lastindex))
        at = match.end()
    return tokens


def _expression(tokens: list[str], functions: dict[str, Callable]) -> tuple[Any, list[str]]:
    head, rest = tokens[0], tokens[1:]
    if head.startswith("'"):
        value = head[1:-1].replace("''", "'")
    elif re.fullmatch(r"-?\d+(?:\.\d+)?", head):
        value = float(head) if "." in head else int(head)
    elif head in ("null", "true", "false"):
        value = {"null": None, "true": True, "false": False}[head]
    else:
        if head not in functions or rest[:1] != ["("]:
            raise ExpressionError(f"unknown function {head!r}")
        arguments, rest = [], rest[1:]
        while rest[0] != ")":
            argument, rest = _expression(rest, functions)
            arguments.append(argument)
            rest = rest[1:] if rest[0] == "," else rest
        value, rest = functions[head](*arguments), rest[1:]
    while rest[:1] in (["["], ["?["]):
        safe = rest[0] == "?["
        key, rest = _expression(rest[1:], functions)
        rest = rest[1:]  # the closing bracket
        value = _property(value, key, safe)
    return value, rest


def _property(value: Any, key: Any, safe: bool) -> Any:
    if isinstance(value, dict) and key in value:
        return value[key]
    if safe and (value is None or isinstance(value, dict)):
        return None
    raise ExpressionError(f"no property {key!r} in {value!r}")


def _functions(bodies: dict[str, Any], now: datetime.datetime) -> dict[str, Callable]:
    def body(action: str) -> Any:
        if action not in bodies:
            raise ExpressionError(f"no action {action!r} ran")
        return bodies[action]

    def ticks(timestamp: Any) -> int:
        try:
            moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        except (AttributeError, ValueError):
            raise ExpressionError(f"ticks() of {timestamp!r}") from None
        return (moment - _EPOCH) // datetime.timedelta(microseconds=1) * 10

    def empty(value: Any) -> bool:
        return value is None or len(value) == 0

    def coalesce(*values: Any) -> Any:
        return next((value for value in values if value is not None), None)

    def string(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    return {
        "body": body,
        "ticks": ticks,
        "utcNow": lambda: now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "if": lambda condition, then, otherwise: then if condition else otherwise,
        "empty": empty,
        "coalesce": coalesce,
        "equals": lambda a, b: a == b,
        "greaterOrEquals": lambda a, b: a >= b,
        "contains": lambda collection, value: value in collection,
        "string": string,
    }
