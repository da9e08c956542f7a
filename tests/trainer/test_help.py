"""`python -m trainer ... -h` as a person reads it: every flag says what it does first
and what leaving it out gives (the field's default, or the trainer's rule), and no
text is cut, at any terminal width. Read from the real process's output."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import trainer.__main__
from tests.paths import REPO
from trainer.commands import COMMANDS
from trainer.config import TRAIN_CONFIGS
from trainer.flags import flag_fields, flag_name

_ENTRY = re.compile(r"^  (-\S.*?)(?: {2,}(\S.*))?$")
_NOTE = re.compile(r"\((default: .+|required(: one of .+)?)\)$")


def _help(*argv: str, columns: int = 100) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trainer", *argv, "-h"],
        cwd=REPO,
        env={**os.environ, "COLUMNS": str(columns)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _flag_helps(text: str) -> dict[str, str]:
    """Each flag of the "options:" section, by its name, with its help on one line."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    helps: dict[str, list[str]] = {}
    for line in section.splitlines():
        entry = _ENTRY.match(line)
        if entry:
            name = entry[1].split()[0].rstrip(",")
            helps[name] = [entry[2] or ""]
        else:
            helps[name].append(line.strip())
    helps.pop("-h")
    return {name: " ".join(" ".join(parts).split()) for name, parts in helps.items()}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_of_every_command_says_what_leaving_it_out_gives(command):
    helps = _flag_helps(_help(command))
    configs = COMMANDS[command].configs
    assert set(helps) == {
        flag_name(item)
        for config in configs
        for item in flag_fields(config)
        if not (item.metadata["positional"] or item.metadata["remainder"])
    }
    silent = {name: text for name, text in helps.items() if not _NOTE.search(text)}
    assert silent == {}


@pytest.mark.parametrize(
    ("flag", "default"),
    [
        ("--epochs", "20"),
        ("--patience", "5"),
        ("--dropout", "0.2"),
        ("--weight-decay", "0.01"),
        ("--checkpoint-every", "600 s"),
        ("--model", "resnet34"),
        ("--no-graph", "off"),
        ("--max-steps", "none"),
    ],
)
def test_train_help_prints_the_fields_default(flag, default):
    assert _flag_helps(_help("train"))[flag].endswith(f"(default: {default})")


def test_a_flag_the_trainer_picks_for_prints_the_trainers_rule():
    helps = _flag_helps(_help("train"))
    autos = {
        flag_name(item): item.metadata["auto"]
        for config in TRAIN_CONFIGS
        for item in flag_fields(config)
        if item.metadata["auto"]
    }
    assert {"--lr", "--batch-size", "--precision", "--beta2"} <= set(autos)
    for name, rule in autos.items():
        assert helps[name].endswith(f"(default: the trainer's: {rule})"), name


@pytest.mark.parametrize("command", ["train", "bench"])
def test_no_graph_says_first_that_it_turns_the_graph_off(command):
    help_text = _flag_helps(_help(command))["--no-graph"]
    first_sentence = help_text.split(". ")[0]
    assert "eager" in first_sentence and "record" not in first_sentence


def test_the_top_level_description_is_whole():
    printed = " ".join(_help(columns=80).split())
    description = trainer.__main__.__doc__.split("\n\n")[0]
    assert " ".join(description.split()) in printed


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_no_help_line_ends_inside_a_word(command, columns):
    text = _help(*([command] if command else []), columns=columns)
    cut = [line for line in text.splitlines() if re.search(r"\w-$", line)]
    assert cut == []
