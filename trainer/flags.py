"""Command lines made from config dataclasses: one field, one flag.

A field that is a flag is declared with `flag(...)`: `--<field-name>` (or `name=`), the
field's default (none: a required flag), and its help the docstring written under the
field, read from the source as torchtitan's configs are (tyro reads them the same way):
the text is written once, where the field is, and `-h` prints it, then the flag's
default as report.md writes it (`shown_value`), or the trainer's rule (`auto`). A field
typed `Literal[...]` takes those choices. The field's metadata says the rest: what a sweep may
vary (`tunable`), whether it says how the run trains (`setting`, `fab runs` shows those),
and what the trainer picks when it is left out (`auto`, report.md shows it).

Every `python -m trainer` subcommand is built here (trainer.commands); torch-free, so
`fab` checks `train` flags with this same parser before anything ships.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal

from trainer.quantities import count, duration_forms, duration_type

RANGE, LISTED = "range", "listed"
"""What a sweep may give a tunable flag: a range or listed values, or listed values only
(odd kernel widths, architectures)."""
TRAINERS = "the trainer's"
"""Who picks a value a run left out where a field has `auto` (`-h`, report.md)."""
_UNIT_WORDS = {"s": "s", "m": "min", "h": "h"}


def flag(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    name: str = "",
    metavar: str | None = None,
    unit: str = "",
    parse: Callable[[str], Any] | None = None,
    positional: bool = False,
    remainder: bool = False,
    one_of: str = "",
    tunable: Literal["", "range", "listed"] = "",
    setting: bool = True,
    auto: str = "",
) -> Any:
    """A config field that is a flag. `factory`: a default made when the parser is (the
    machine's cores); `unit` ("s", "m", "h"): a duration, `10m` or a bare number of that
    unit (`trainer.quantities`); `parse`: reads the text itself; `positional`: an
    argument, not a flag, `remainder` the rest of the line; `one_of`: the flags sharing
    this name are a required choice of one. `tunable`: RANGE or LISTED, what `fab sweep
    --param` may vary; `setting`: False for where the run is or how often it reports,
    not how it trains; `auto`: what the trainer picks when the flag is left out."""
    meta = {
        "flag": name,
        "metavar": metavar,
        "unit": unit,
        "parse": parse,
        "positional": positional,
        "remainder": remainder,
        "one_of": one_of,
        "tunable": tunable,
        "setting": setting,
        "auto": auto,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def is_flag(item: dataclasses.Field) -> bool:
    return "flag" in item.metadata


def flag_fields(config: type) -> list[dataclasses.Field]:
    return [item for item in dataclasses.fields(config) if is_flag(item)]


def flag_name(item: dataclasses.Field) -> str:
    """How the command line spells the field: `--kernel-size`, `--no-graph`."""
    return "--" + (item.metadata["flag"] or item.name.replace("_", "-"))


def default_of(item: dataclasses.Field) -> Any:
    """The value a flag left out gives (a factory's, made now)."""
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


@functools.cache
def field_docs(config: type) -> dict[str, str]:
    """Each field's docstring: the string right under its annotation in the class's
    source (cached: `-h` reads a module's source once)."""
    node = ast.parse(inspect.getsource(config).lstrip()).body[0]
    assert isinstance(node, ast.ClassDef), config
    docs = {}
    for statement, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


def help_of(config: type, item: dataclasses.Field, group: Sequence[str] = ()) -> str:
    """A flag's help: its field's docstring, on one line, then a duration's forms, then
    what leaving it out gives (`group`: the flags of its `one_of` choice)."""
    text = " ".join(field_docs(config).get(item.name, "").split())
    unit = item.metadata["unit"]
    if unit:
        text = "; ".join(filter(None, [text.removesuffix("."), duration_forms(unit)]))
    note = _default_note(item, group)
    return f"{text} ({note})" if note else text


def _default_note(item: dataclasses.Field, group: Sequence[str]) -> str:
    """What a flag left out gives: its field's default, the trainer's rule (`auto`), or
    that it is required; nothing for an argument (positional: always given)."""
    meta = item.metadata
    if meta["positional"] or meta["remainder"]:
        return ""
    if meta["one_of"]:
        return f"required: one of {', '.join(group)}"
    if meta["auto"]:
        return f"default: {TRAINERS}: {meta['auto']}"
    if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
        return "required"
    # A flag that turns its field off (--no-graph) is itself off when left out.
    default = False if item.default is True else default_of(item)
    return f"default: {shown_value(default, meta['unit'])}"


def shown_value(value: Any, unit: str = "") -> str:
    """A value as `-h` and report.md write it: on/off, none, `600 s`, `30 min`."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "" or value == ():
        return "none"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text} {_UNIT_WORDS[unit]}" if unit else text


def add_flags(parser: argparse.ArgumentParser, *configs: type) -> argparse.ArgumentParser:
    """Every flag field of `configs` on `parser` (dest: the field's name)."""
    choices: dict[str, argparse._MutuallyExclusiveGroup] = {}
    groups: dict[str, list[str]] = {}
    for config in configs:
        for item in flag_fields(config):
            groups.setdefault(item.metadata["one_of"], []).append(flag_name(item))
    for config in configs:
        hints = typing.get_type_hints(config)
        for item in flag_fields(config):
            one_of = item.metadata["one_of"]
            if one_of and one_of not in choices:
                choices[one_of] = parser.add_mutually_exclusive_group(required=True)
            where = choices[one_of] if one_of else parser
            # argparse formats help with %: a literal one is written twice.
            help_text = help_of(config, item, groups[one_of]).replace("%", "%%")
            _add(where, item, hints[item.name], help_text)
    return parser


def _add(parser: Any, item: dataclasses.Field, kind: Any, help_text: str) -> None:
    meta, name = item.metadata, flag_name(item)
    kind = without_none(kind)
    if kind is bool:
        # A flag switches its field away from the default: --no-graph turns graph off;
        # one whose default is None (a resume's own) turns it on.
        action = "store_false" if item.default else "store_true"
        options = {"default": None} if item.default is None else {}
        parser.add_argument(name, dest=item.name, action=action, help=help_text, **options)
        return
    if meta["remainder"]:
        parser.add_argument(
            item.name, nargs=argparse.REMAINDER, metavar=meta["metavar"], help=help_text
        )
        return
    options = _value_options(item, kind)
    if meta["positional"]:
        parser.add_argument(item.name, metavar=meta["metavar"], help=help_text, **options)
        return
    if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
        options["required"] = True
    else:
        options["default"] = default_of(item)
    # Choices show as themselves ({auto,bf16,...}); any other value by its flag's name.
    derived = None if "choices" in options else name[2:].upper().replace("-", "_")
    metavar = meta["metavar"] or derived
    parser.add_argument(name, dest=item.name, metavar=metavar, help=help_text, **options)


def without_none(kind: Any) -> Any:
    """`int | None` -> int: a flag left out gives the field's default, None or not."""
    if typing.get_origin(kind) not in (typing.Union, types.UnionType):
        return kind
    given = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    return given[0] if len(given) == 1 else kind


def _value_options(item: dataclasses.Field, kind: Any) -> dict[str, Any]:
    """How argparse reads the field's text: its type, or its choices (a Literal)."""
    meta = item.metadata
    if typing.get_origin(kind) is Literal:
        return {"choices": typing.get_args(kind)}
    if meta["parse"]:
        return {"type": meta["parse"]}
    if meta["unit"]:
        return {"type": duration_type(meta["unit"])}
    return {"type": count if kind is int else kind}


def from_flags(config: type, args: argparse.Namespace, **others: Any) -> Any:
    """`config` with its flag fields as `args` parsed them (validated on construction),
    and `others` for its fields that are no flags."""
    return config(**{item.name: getattr(args, item.name) for item in flag_fields(config)}, **others)


def tunables(*configs: type) -> dict[str, tuple[type, dataclasses.Field]]:
    """Each flag a sweep may vary, by its name (`lr`, `kernel-size`), with its config."""
    return {
        flag_name(item)[2:]: (config, item)
        for config in configs
        for item in flag_fields(config)
        if item.metadata["tunable"]
    }
