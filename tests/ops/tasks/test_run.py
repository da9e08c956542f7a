"""`fab train`'s and `fab sweep`'s checks before they build, push or pull anything."""

from __future__ import annotations

import pytest

from tests.ops.conftest import assert_one_line_error


@pytest.mark.parametrize(
    "command",
    [("train", "--dataset", "synht-small"),
     ("sweep", "--dataset", "synht-small", "--param", "lr=1e-3,1e-2")],
)  # fmt: skip
def test_a_dataset_storage_lacks_is_one_line_before_any_image_work(
    local_box, recording_tool, command
):
    docker = recording_tool("docker")
    stored = local_box.root.parent / "storage" / "datasets" / "synth-small"
    stored.mkdir(parents=True)
    (stored / "manifest.json").write_text('{"files": {}}\n')
    result = local_box.fab(*command)
    assert result.returncode == 1
    assert_one_line_error(
        result,
        f"no dataset at file://{local_box.root.parent / 'storage'}/datasets/synht-small",
        "datasets there: synth-small",
        "fab upload-data",
    )
    assert docker.calls() == []  # no build, no push


def test_a_bad_trainer_flag_is_one_line_before_anything_ships(local_box, recording_tool):
    docker = recording_tool("docker")
    result = local_box.fab("train", "--dataset", "synth-small", "--trainer-args", "--epochs 0")
    assert_one_line_error(result, "--epochs 0: must be at least 1")
    result = local_box.fab("train", "--dataset", "synth-small", "--trainer-args", "--epocs 3")
    assert_one_line_error(result, "trainer flags: unrecognized arguments: --epocs 3")
    assert docker.calls() == []  # no build, no push, no dataset fetch


def test_an_unbalanced_quote_in_trainer_args_is_one_line_before_any_box_work(
    local_box, recording_tool
):
    docker = recording_tool("docker")
    for task in (
        ["train", "--dataset", "synth"],
        ["sweep", "--dataset", "synth", "--param", "lr=1"],
    ):
        result = local_box.fab(*task, "--trainer-args", "--name 'first try --lr 3e-4")
        assert_one_line_error(result, "--trainer-args", "No closing quotation", "close each quote")
    assert docker.calls() == []


def test_status_watch_every_a_negative_number_is_one_line(local_box):
    result = local_box.fab("status", "--watch", "--every", "-1")
    assert_one_line_error(result, "--every is -1, expected seconds above 0", "--every 10")
