"""ops.tasks.flags: one grammar for every `fab` task's flags: `-h` is help, a short flag
means one thing, counts and durations are read alike, and a value a flag refuses is one
line naming the flag, the value and what it accepts."""

from __future__ import annotations

import subprocess
from collections import defaultdict

import pytest
from fabric import Config, Executor
from fabric.main import Fab
from invoke.exceptions import ParseError
from invoke.parser import Parser

from ops.remote.lease import parse_minutes
from ops.tasks import namespace
from ops.tasks.flags import SHORT_FLAGS, FabTask, ParsedFlag
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO

# (task, flag, unit) of every duration flag (train's --hours and hold's duration are
# read by their task: `auto` and `0` mean more than a time).
DURATION_FLAGS = [("plan", "deadline", "hours"), ("status", "every", "seconds"),
                  ("box-update", "idle-shutdown-minutes", "minutes")]  # fmt: skip


def _fab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FAB), *argv], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def _parsed(*argv: str) -> dict:
    """The flags `fab` would hand the task `argv[0]`, parsed as `fab` parses them."""
    contexts = Parser(contexts=namespace.to_contexts()).parse_argv(list(argv))
    return contexts[0].as_kwargs


def _flags() -> list[tuple[str, ParsedFlag]]:
    return [
        (name, arg)
        for name in namespace.task_names
        for arg in namespace[name].get_arguments()
        if isinstance(arg, ParsedFlag)
    ]


def test_every_task_is_built_by_the_flags_task_decorator():
    plain = [name for name in namespace.task_names if not isinstance(namespace[name], FabTask)]
    assert plain == [], "use `from ops.tasks.flags import task` in these tasks' modules"


def test_fab_train_dash_h_prints_trains_help():
    done = _fab("train", "-h")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: fab [--core-opts] train [--options]")
    assert "--hours=STRING" in done.stdout


@pytest.mark.parametrize("task", sorted(namespace.task_names))
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_dash_h_is_every_tasks_help(task, flag, capsys):
    program = Fab(namespace=namespace, executor_class=Executor, config_class=Config)
    program.run(["fab", task, flag], exit=False)
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: fab [--core-opts] {task} "), out
    assert "Options:" in out


def test_no_task_has_a_short_flag_outside_the_table_and_each_means_one_long_flag():
    meanings = defaultdict(set)
    for name in namespace.task_names:
        for arg in namespace[name].get_arguments():
            for short in arg.names[1:]:
                meanings[short].add(arg.names[0])
    assert {short: longs for short, longs in meanings.items() if len(longs) > 1} == {}
    assert {short: longs.pop() for short, longs in meanings.items()} == {
        short: long for long, short in SHORT_FLAGS.items()
    }


def test_the_table_gives_every_task_with_the_long_flag_its_short_one():
    for name in namespace.task_names:
        for arg in namespace[name].get_arguments():
            if arg.names[0] in SHORT_FLAGS:
                assert list(arg.names[1:]) == [SHORT_FLAGS[arg.names[0]]], (name, arg.names)


def test_short_target_means_target_on_every_task_that_has_it():
    for name in ("train", "logs", "status", "runs", "sweep", "download", "plan"):
        assert _parsed(name, "-t", "local")["target"] == "local", name


def test_the_tasks_have_number_flags_to_check():
    assert {("plan", "windows"), ("plan", "deadline"), ("train", "max-steps")} <= {
        (task, arg.names[0]) for task, arg in _flags()
    }


@pytest.mark.parametrize(("task", "arg"), _flags(), ids=lambda x: getattr(x, "name", x))
def test_a_number_flag_given_a_word_is_one_line_naming_flag_and_expectation(task, arg):
    flag = arg.names[0]
    done = _fab(task, f"--{flag}", "abc")
    assert done.returncode == 1
    assert_one_line_error(done, f"fab {task}: --{flag} is 'abc', expected {arg.expected}")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("argv", "flag", "expected"),
    [
        (["plan", "--windows", "600k"], "windows", 600_000),
        (["plan", "--windows", "1e6"], "windows", 1_000_000),
        (["plan", "--windows", "1.2M"], "windows", 1_200_000),
        (["train", "--max-steps", "50k"], "max_steps", 50_000),
        (["plan", "--deadline", "2h"], "deadline", 2.0),
        (["plan", "--deadline", "90m"], "deadline", 1.5),
        (["plan", "--deadline", "1.5"], "deadline", 1.5),
        (["status", "--every", "1m"], "every", 60.0),
        (["status", "--every", "30"], "every", 30.0),
        (["box-update", "--idle-shutdown-minutes", "1h"], "idle_shutdown_minutes", 60),
        (["box-update", "--idle-shutdown-minutes", "45"], "idle_shutdown_minutes", 45),
    ],
)
def test_counts_and_durations_are_read_in_the_one_grammar(argv, flag, expected):
    assert _parsed(*argv)[flag] == expected


@pytest.mark.parametrize(("task", "flag", "unit"), DURATION_FLAGS)
def test_a_duration_flags_help_says_its_unit_and_a_wrong_one_is_refused(task, flag, unit):
    arg = next(a for a in namespace[task].get_arguments() if a.names[0] == flag)
    assert f"a bare number of {unit}" in arg.help
    with pytest.raises(ParseError, match=rf"fab {task}: --{flag} is '2x', expected a duration"):
        _parsed(task, f"--{flag}", "2x")


def test_fab_plan_takes_a_deadline_and_windows_as_a_person_types_them():
    done = _fab("plan", "--windows", "600k", "--deadline", "2h", "--json")
    assert done.returncode == 0, done.stderr
    assert '"deadline_hours": 2.0' in done.stdout and '"windows": 600000' in done.stdout


@pytest.mark.parametrize(
    ("text", "minutes"), [("2h", 120), ("90m", 90), ("1h30m", 90), ("1.5", 90), ("0", 0)]
)
def test_a_hold_reads_the_same_durations_a_bare_number_in_hours(text, minutes):
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--target", "local", "train"],
         "put it after the task, `fab train --target local` (or GLUCOSE_TARGET=local"),
        (["--target=local", "status", "--run", "r1"], "`fab status --target local`"),
        (["-s", "dev", "runs"], "`fab runs -s dev`"),
    ],
)  # fmt: skip
def test_a_tasks_flag_before_the_task_names_where_it_goes(argv, hint):
    done = _fab(*argv)
    assert done.returncode == 1
    assert "No idea what" not in done.stderr
    message = assert_one_line_error(done, hint)
    assert message.startswith(f"fab: {argv[0].split('=')[0]} is a task's flag, not fab's")


def test_a_flag_no_task_has_is_still_invokes_own_error():
    assert _fab("--no-such-flag", "runs").stderr.strip() == "No idea what '--no-such-flag' is!"


def test_fabs_own_flags_before_the_task_still_work():
    listed = _fab("--list")
    assert listed.returncode == 0 and "train" in listed.stdout
