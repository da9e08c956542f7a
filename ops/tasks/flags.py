"""What every `fab` task shares about its flags: the `task` decorator and common help.

One grammar for every task (docs/fab.md, "Flags"): a short flag means one thing
wherever it exists (SHORT_FLAGS; no other flag has one, so `-h` is help on every task);
a count is `20`, `600k`, `1.2M` or `1e6` and a duration `90m`, `2h` or a bare number of
the flag's unit (`trainer.quantities`, the trainer's own grammar). invoke would cast a
typed flag itself (`int("abc")`) and let the ValueError out as a 20-line traceback
before the task runs; here a value a flag refuses is invoke's ParseError instead (printed
alone, exit 1): one line naming the flag, the value and what it accepts. A flag's kind
is read from its annotation where the default is None (`windows: int | None = None`),
so a task can tell a flag left out from a 0 typed.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Callable
from typing import Any

import invoke
from invoke.exceptions import Exit, ParseError
from invoke.parser import Argument, Parser

from trainer.quantities import (
    COUNT_FORMS,
    UNIT_NAMES,
    duration_forms,
    flag_problem,
    parse_count,
    parse_duration,
)

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

# The only short flags, each one long flag's on every task that has it.
SHORT_FLAGS = {"target": "t", "stack": "s", "run": "r", "dataset": "d", "json": "j", "follow": "f"}
HELP_WORDS = ("-h", "--help")

# How a number flag of each kind is read, what a user is told it expects, an example.
NUMBERS: dict[type, tuple[Callable[[str], Any], str, str]] = {
    int: (parse_count, COUNT_FORMS, "10"),
    float: (float, "a number such as 1.5", "1.5"),
}


class ParsedFlag(Argument):
    """A count, number or duration flag: a value its parser refuses is a one-line
    ParseError naming the flag, the value and the forms it accepts."""

    def __init__(
        self, task_name: str, parse: Callable[[str], Any], expected: str, example: str, **kwargs
    ) -> None:
        # invoke's help shows a value only for str and int kinds (`--deadline=STRING`).
        super().__init__(**kwargs)
        self.task_name, self.parse, self.expected, self.example = (
            task_name, parse, expected, example
        )  # fmt: skip

    def set_value(self, value: Any, cast: bool = True) -> None:
        if cast:
            try:
                value = self.parse(value)
            except ValueError:
                flag = f"--{self.names[0]}"  # as typed: --max-steps, not the attribute
                problem = flag_problem(flag, value, self.expected, self.example)
                raise ParseError(f"fab {self.task_name}: {problem}") from None
        super().set_value(value, cast=False)


def _optional_number(body: Callable, name: str) -> type | None:
    """int or float when `name`'s annotation is `int | None` or `float | None`."""
    hint = typing.get_type_hints(body).get(name)
    kinds = set(typing.get_args(hint)) - {type(None)}
    return kinds.pop() if len(kinds) == 1 and kinds <= set(NUMBERS) else None


class FabTask(invoke.Task):
    """invoke's Task with the one grammar of flags (see the module's docstring).
    `durations` maps a parameter to its unit ("s", "m", "h"): a duration flag; one
    whose default is an int takes whole units only."""

    def __init__(self, *args: Any, durations: dict[str, str] | None = None, **kwargs) -> None:
        kwargs.setdefault("auto_shortflags", False)
        super().__init__(*args, **kwargs)
        self.durations = durations or {}

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        if default is None and (kind := _optional_number(self.body, name)):
            opts["kind"] = kind
        long = opts["names"][0]
        opts["names"] = [long, *([SHORT_FLAGS[long]] if long in SHORT_FLAGS else [])]
        return opts

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        helps = dict(self.help)  # invoke pops each help it uses: a second call would lose it
        try:
            return [self._parsed(arg) for arg in super().get_arguments(ignore_unknown_help)]
        finally:
            self.help = helps

    def _parsed(self, arg: Argument) -> Argument:
        unit = self.durations.get(arg.name)
        if unit:
            whole = isinstance(arg.default, int)  # e.g. --idle-shutdown-minutes: whole minutes
            forms = duration_forms(unit) + (f", in whole {UNIT_NAMES[unit]}" if whole else "")
            read = (lambda text: parse_duration(text, unit, whole=whole), forms, "90m")
            arg.help = "; ".join(filter(None, [arg.help, forms]))
        elif arg.kind in NUMBERS:
            read = NUMBERS[arg.kind]
        else:
            return arg
        parse, expected, example = read
        return ParsedFlag(
            self.name.replace("_", "-"),  # the name `fab -l` shows
            parse,
            expected,
            example,
            kind=int if arg.kind is int and not unit else str,
            names=arg.names,
            default=arg.default,
            help=arg.help,
            positional=arg.positional,
            optional=arg.optional,
            incrementable=arg.incrementable,
            attr_name=arg.attr_name,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # invoke hands `fab hold -h` to the positional it waits for, not to --help.
        if any(kwargs.get(name) in HELP_WORDS for name in self.positional):
            print_task_help(self)
            return None
        return super().__call__(*args, **kwargs)


def print_task_help(one: invoke.Task) -> None:
    """What `fab --help TASK` prints for `one`."""
    program = invoke.Program(binary="fab")
    program.collection = invoke.Collection(one)
    program.parser = Parser(contexts=program.collection.to_contexts())
    program.print_task_help(next(iter(program.collection.task_names)))


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


def refuse_task_flags_before_the_task(
    argv: list[str], collection: invoke.Collection, core: list[Argument]
) -> None:
    """`fab --target local train`, as sky and dstack users place a global flag: here
    `--target` and every other flag but fab's own (`core`) are a task's, written after
    it. One line naming the right place, not invoke's "No idea what '--target' is!".
    (`-t` before a task is fab's own `--connect-timeout`, read before this can look.)"""
    tasks = set(collection.task_names) | {
        alias for aliases in collection.task_names.values() for alias in aliases
    }
    first = next((i for i, token in enumerate(argv) if token in tasks), len(argv))
    own = {name for argument in core for name in argument.names}
    before = [token for token in argv[:first] if token.startswith("-")]
    misplaced = [token for token in before if token.lstrip("-").split("=", 1)[0] not in own]
    if not misplaced:
        return
    contexts = collection.to_contexts()
    for token in misplaced:
        flag, _, value = token.partition("=")
        if not any(flag in context.flags for context in contexts):
            continue  # invoke's own "No idea what ... is!" is right: no task has it
        at = argv.index(token)
        value = value or (argv[at + 1] if at + 1 < first else "VALUE")
        task_name = argv[first] if first < len(argv) else "TASK"
        everywhere = (
            f" (or GLUCOSE_TARGET={value} for every task of the line)"
            if flag in ("--target", "-t")
            else ""
        )
        raise Exit(
            f"fab: {flag} is a task's flag, not fab's: put it after the task, "
            f"`fab {task_name} {flag} {value}`{everywhere}"
        )
