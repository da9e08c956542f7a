"""`fab prepare-data`: flag mistakes end in one line before any box is asked, and the
preparation's log reaches the terminal as letters (the run on a box is in
test_fab_e2e.py)."""

import json
from collections.abc import Iterator

import pytest

from tests.ops.conftest import assert_one_line_error


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ((), ("pass --milestone M1|M2|M3 or --cases",)),
        (("--milestone", "M1", "--cases", "1,2"), ("one of them",)),
        (("--cases", "1,5,9"), ("--cases needs --name",)),
        (("--milestone", "M9"), ("--milestone 'M9'", "M1, M2, M3")),
    ],
)
def test_flag_mistakes_are_one_line(local_box, args, fragments):
    assert_one_line_error(local_box.fab("prepare-data", *args), *fragments)


def test_a_dataset_name_unfit_for_paths_is_refused(local_box):
    result = local_box.fab("prepare-data", "--milestone", "M1", "--name", "../up")
    assert_one_line_error(result, "--name '../up' is not a usable dataset name")


@pytest.fixture
def preparation(docker_engine, probe_image) -> Iterator[str]:
    """A preparation's container that has ended, its log the box's words: an escape
    sequence among them (the real Docker engine; its name is `fab prepare-data`'s)."""
    script = "echo 'prepare-vitaldb: case 1'; printf 'case \\033]52;c;eA==\\007 done\\n'"
    name = "glucose-prepare-hostile-log"
    docker_engine.run(["rm", "--force", name], timeout_seconds=60, check=False)
    docker_engine.run(["run", "--name", name, "--volume", "/usr:/usr:ro", probe_image,
                       "/bin/sh", "-c", script], timeout_seconds=120)  # fmt: skip
    yield "hostile-log"
    docker_engine.run(["rm", "--force", name], timeout_seconds=60, check=False)


def test_the_followed_preparation_log_reaches_the_terminal_as_letters(
    preparation, tmp_path, monkeypatch, capsys
):
    from ops.remote.boxes import box_for
    from ops.run.prepare import follow
    from ops.target.resolve import load_target_file

    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(tmp_path / "known_hosts"))
    target = tmp_path / "here.json"
    target.write_text(json.dumps({"boxRoot": str(tmp_path / "box")}))
    follow(box_for(load_target_file(target)), preparation)
    # Through a terminal (the box counts it as a person there): its CR LF line ends are
    # the terminal's, not shown; the log's escape is shown as letters.
    assert capsys.readouterr().out == ("prepare-vitaldb: case 1\ncase \\x1b]52;c;eA==\\x07 done\n")
