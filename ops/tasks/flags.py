"""What every `fab` task shares about its flags: the `task` decorator and common help.

invoke casts a typed flag itself (`int("abc")`) and lets the ValueError out as a
20-line traceback before the task runs. `task` here builds tasks whose number flags
fail in one line instead (invoke's ParseError: printed alone, exit 1), and reads a
flag's kind from its annotation where the default is None (`windows: int | None =
None`), so a task can tell a flag left out from a 0 typed.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Callable
from typing import Any

import invoke
from invoke.exceptions import Exit, ParseError
from invoke.parser import Argument

TARGET_HELP = (
    "target file, or `local`: this machine's Docker engine (default: $GLUCOSE_TARGET, else "
    "the Pulumi stack's outputs)"
)
STACK_HELP = "Pulumi stack to read outputs from (default: the selected stack)"
IMAGE_HELP = "a built image (default: this tree's, glucose-training:<git revision>)"
BUILD_HELP = {
    "base-image": "base image (default: the Dockerfile's pinned PyTorch CUDA runtime)",
    "build-arg": "extra docker build arg NAME=VALUE (repeatable)",
    "extra-ca": "PEM file of extra CA certificates (networks that intercept TLS)",
}

# What a user is told a number flag expects, by its kind.
EXPECTED_NUMBER = {int: ("a whole number", "10"), float: ("a number", "1.5")}


class NumberFlag(Argument):
    """An int or float flag: a value that is not one is a one-line ParseError."""

    def __init__(self, task_name: str, number: type, **kwargs: Any) -> None:
        # invoke's help shows a value only for str and int kinds (`--deadline=STRING`),
        # so a float flag shows as str and is cast here.
        super().__init__(kind=int if number is int else str, **kwargs)
        self.task_name, self.number = task_name, number

    def set_value(self, value: Any, cast: bool = True) -> None:
        if cast:
            try:
                value = self.number(value)
            except ValueError:
                what, example = EXPECTED_NUMBER[self.number]
                flag = f"--{self.names[0]}"  # as typed: --max-steps, not the attribute
                raise ParseError(
                    f"fab {self.task_name}: {flag} is {value!r}, expected {what}; "
                    f"pass e.g. {flag} {example}"
                ) from None
        super().set_value(value, cast=False)


def _optional_number(body: Callable, name: str) -> type | None:
    """int or float when `name`'s annotation is `int | None` or `float | None`."""
    hint = typing.get_type_hints(body).get(name)
    kinds = set(typing.get_args(hint)) - {type(None)}
    return kinds.pop() if len(kinds) == 1 and kinds <= set(EXPECTED_NUMBER) else None


class FabTask(invoke.Task):
    """invoke's Task with number flags that fail in one line (see the module's docstring)."""

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        if default is None and (kind := _optional_number(self.body, name)):
            opts["kind"] = kind
        return opts

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        dashed = self.name.replace("_", "-")  # the name `fab -l` shows
        return [
            NumberFlag(
                dashed,
                arg.kind,
                names=arg.names,
                default=arg.default,
                help=arg.help,
                positional=arg.positional,
                optional=arg.optional,
                incrementable=arg.incrementable,
                attr_name=arg.attr_name,
            )
            if arg.kind in EXPECTED_NUMBER
            else arg
            for arg in super().get_arguments(ignore_unknown_help)
        ]


def task(*args: Any, **kwargs: Any) -> Any:
    """invoke's `@task` (bare or with options), building a FabTask."""
    return invoke.task(*args, klass=FabTask, **kwargs)


def trainer_flags(text: str) -> list[str]:
    """`--trainer-args`' one string as the trainer's flags, split as a shell would; an
    unbalanced quote is one line naming it."""
    try:
        return shlex.split(text)
    except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
        raise Exit(
            f"--trainer-args {text!r}: {error}; close each quote, e.g. "
            "--trainer-args \"--name 'first try' --lr 3e-4\""
        ) from None


def positive_seconds(flag: str, value: float) -> float:
    """A wait in seconds that must be above 0 (`time.sleep` refuses a negative one)."""
    if value <= 0:
        raise Exit(f"{flag} is {value:g}, expected seconds above 0; pass e.g. {flag} 10")
    return float(value)
