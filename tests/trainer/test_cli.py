"""`python -m trainer`'s command line: a mistake is one line naming the flag and the fix
(not argparse's usage), durations and counts read in the one grammar of trainer.quantities."""

import subprocess
import sys

import pytest

from box.contract import EXIT_USER_ERROR
from tests.paths import REPO
from trainer.__main__ import _parser, main
from trainer.commands import COMMANDS, BenchCheckpointCommand
from trainer.flags import flag_fields, from_flags

TRAIN = ["train", "--data", "d", "--run-dir", "r"]


def _error_lines(argv: list[str], capsys) -> list[str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == EXIT_USER_ERROR
    return capsys.readouterr().err.strip().splitlines()


def test_a_word_for_a_number_is_one_line_naming_the_flag_and_the_forms():
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--epochs", "x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_USER_ERROR
    assert done.stderr.strip().splitlines() == [
        "error: python -m trainer train: argument --epochs: 'x' is not a whole number such as "
        "20, 600k, 1.2M or 1e6; `python -m trainer train --help` lists what it takes"
    ]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train"], "the following arguments are required: --data, --run-dir"),
        ([*TRAIN, "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ([*TRAIN, "--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
        ([*TRAIN, "--checkpoint-every", "soon"], "argument --checkpoint-every: 'soon' is not a "
         "duration such as 90m, 2h or 1h30m, or a bare number of seconds"),
        (["synth", "--out", "o", "--cases", "3", "--windows-per-case", "1.5"],
         "argument --windows-per-case: '1.5' is not a whole number"),
        (["bench-checkpoint", "--uri", "file:///x", "--every", "often"],
         "argument --every: 'often' is not a duration"),
    ],
)  # fmt: skip
def test_each_mistake_is_one_line_with_the_help_to_read(argv, says, capsys):
    lines = _error_lines(argv, capsys)
    assert len(lines) == 1, lines
    assert says in lines[0] and "--help` lists what it takes" in lines[0]


@pytest.mark.parametrize(
    ("flag", "given", "field", "expected"),
    [
        ("--checkpoint-every", "10m", "checkpoint_every_seconds", 600.0),
        ("--checkpoint-every", "1h30m", "checkpoint_every_seconds", 5400.0),
        ("--checkpoint-every", "90", "checkpoint_every_seconds", 90.0),
        ("--max-steps", "600k", "max_steps", 600_000),
        ("--max-steps", "1e6", "max_steps", 1_000_000),
        ("--checkpoint-every-steps", "1.2M", "checkpoint_every_steps", 1_200_000),
        ("--batch-size", "16k", "batch_size", 16_000),
    ],
)
def test_train_reads_durations_and_counts_in_the_one_grammar(flag, given, field, expected):
    assert getattr(_parser().parse_args([*TRAIN, flag, given]), field) == expected


def test_a_duration_flags_help_says_its_unit():
    train = _parser()._subparsers._group_actions[0].choices["train"]
    helps = {action.dest: action.help for action in train._actions}
    assert "a bare number of seconds" in helps["checkpoint_every_seconds"]


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        (["synth", "--out", "o", "--cases", "3", "--windows-per-case", "2k"],
         "windows_per_case", 2000),
        (["bench-checkpoint", "--uri", "u", "--every", "1m"], "every", 60.0),
        (["bench-prepare", "--minutes", "1h"], "minutes", 60.0),
        (["prepare-vitaldb", "--out", "o", "--milestone", "M1", "--label-window-minutes",
          "1h"], "label_window_minutes", 60.0),
    ],
)  # fmt: skip
def test_the_other_commands_read_the_same_grammar(argv, field, expected):
    assert getattr(_parser().parse_args(argv), field) == expected


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_of_every_command_says_what_it_does(command):
    parser = _parser()._subparsers._group_actions[0].choices[command]
    flags = [action for action in parser._actions if action.dest != "help"]
    assert flags and [action.dest for action in flags if not action.help] == []


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"train"}))
def test_a_commands_flags_are_its_configs_fields(command):
    parser = _parser()._subparsers._group_actions[0].choices[command]
    (config,) = COMMANDS[command].configs
    flags = {action.dest for action in parser._actions if action.dest != "help"}
    assert flags == {field.name for field in flag_fields(config)}


def test_train_help_prints_each_flags_docstring():
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "-h"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = " ".join(done.stdout.split())
    assert "Share of cases held out for the final test" in printed
    assert "--no-graph Run eager steps, no CUDA graph" in printed


def test_a_command_gets_its_config_validated_and_typed():
    args = _parser().parse_args(["bench-checkpoint", "--uri", "u", "--every", "2m", "--json"])
    assert from_flags(BenchCheckpointCommand, args) == BenchCheckpointCommand(
        uri="u", every=120.0, json=True
    )
