"""trainer.flags: a config's fields are its command line, each flag's help the docstring
under its field, its choices a Literal, written once."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from trainer.flags import add_flags, field_docs, flag, from_flags


@dataclass(frozen=True)
class Toy:
    where: Path = flag()
    """Where it goes (100% of it)."""
    mode: Literal["fast", "slow"] = flag("fast")
    """How it goes."""
    pause_s: float = flag(1.0, name="pause", unit="s")
    """Between tries."""
    colour: str | None = flag(None, one_of="source")
    shape: str | None = flag(None, one_of="source")
    """A shape, else a colour."""
    not_a_flag: int = 3
    """Set by the program."""


def _parser() -> argparse.ArgumentParser:
    class Raising(argparse.ArgumentParser):
        def error(self, message: str):
            raise ValueError(message)

    return add_flags(Raising(prog="toy"), Toy)


def test_each_fields_docstring_is_read_from_the_source():
    assert field_docs(Toy) == {
        "where": "Where it goes (100% of it).",
        "mode": "How it goes.",
        "pause_s": "Between tries.",
        "shape": "A shape, else a colour.",
        "not_a_flag": "Set by the program.",
    }


def test_the_help_says_the_docstring_a_durations_forms_and_what_leaving_it_out_gives():
    helps = {action.dest: action.help for action in _parser()._actions}
    assert helps["where"] == "Where it goes (100%% of it). (required)"  # argparse's % escaped
    assert helps["mode"] == "How it goes. (default: fast)"
    assert helps["pause_s"].startswith("Between tries; a duration such as")
    assert helps["pause_s"].endswith("seconds (default: 1 s)")
    assert helps["shape"] == "A shape, else a colour. (required: one of --colour, --shape)"
    assert "not_a_flag" not in helps
    assert "100% of it" in _parser().format_help()


def test_a_literal_field_takes_its_choices_only():
    with pytest.raises(ValueError, match="invalid choice: 'medium'"):
        _parser().parse_args(["--where", "x", "--shape", "o", "--mode", "medium"])


def test_flags_sharing_a_choice_take_exactly_one():
    with pytest.raises(ValueError, match="one of the arguments --colour --shape is required"):
        _parser().parse_args(["--where", "x"])
    with pytest.raises(ValueError, match="not allowed with argument"):
        _parser().parse_args(["--where", "x", "--colour", "red", "--shape", "o"])


def test_the_parsed_flags_make_the_config_with_its_defaults():
    args = _parser().parse_args(["--where", "x", "--pause", "2m", "--colour", "red"])
    assert from_flags(Toy, args) == Toy(Path("x"), "fast", 120.0, "red", None)
