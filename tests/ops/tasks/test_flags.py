"""ops.tasks.flags: a number flag of any `fab` task given something else is one line."""

from __future__ import annotations

import subprocess

import pytest

from ops.tasks import namespace
from ops.tasks.flags import FabTask, NumberFlag
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO


def _number_flags() -> list[tuple[str, str, type]]:
    """(task, flag, int or float) for every number flag `fab -l`'s tasks take; a flag
    of a task built by plain invoke counts too (its kind is the number)."""
    found = []
    for task_name in namespace.task_names:
        for arg in namespace[task_name].get_arguments():
            number = arg.number if isinstance(arg, NumberFlag) else arg.kind
            if number in (int, float):
                found.append((task_name, arg.names[0], number))
    return found


def test_every_task_is_built_by_the_flags_task_decorator():
    plain = [name for name in namespace.task_names if not isinstance(namespace[name], FabTask)]
    assert plain == [], "use `from ops.tasks.flags import task` in these tasks' modules"


def test_the_tasks_have_number_flags_to_check():
    assert {("plan", "windows"), ("plan", "deadline"), ("train", "max-steps")} <= {
        (task, flag) for task, flag, _ in _number_flags()
    }


@pytest.mark.parametrize(("task", "flag", "number"), _number_flags())
def test_a_number_flag_given_a_word_is_one_line_naming_flag_and_expectation(task, flag, number):
    done = subprocess.run(
        [str(FAB), task, f"--{flag}", "abc"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    expected = "a whole number" if number is int else "a number"
    assert_one_line_error(done, f"fab {task}: --{flag} is 'abc', expected {expected}")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
