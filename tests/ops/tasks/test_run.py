"""`fab train`'s checks before it builds, pushes or pulls anything."""

from __future__ import annotations

from tests.ops.conftest import assert_one_line_error


def test_train_on_a_dataset_storage_lacks_is_one_line_before_any_image_work(
    local_box, recording_tool
):
    docker = recording_tool("docker")
    stored = local_box.root.parent / "storage" / "datasets" / "synth-small"
    stored.mkdir(parents=True)
    (stored / "manifest.json").write_text('{"files": {}}\n')
    result = local_box.fab("train", "--dataset", "synht-small")
    assert result.returncode == 1
    assert_one_line_error(
        result,
        f"no dataset at file://{local_box.root.parent / 'storage'}/datasets/synht-small",
        "datasets there: synth-small",
        "fab upload-data",
    )
    assert docker.calls() == []  # no build, no push


def test_a_sweep_on_a_dataset_storage_lacks_is_one_line_before_any_image_work(
    local_box, recording_tool
):
    docker = recording_tool("docker")
    stored = local_box.root.parent / "storage" / "datasets" / "synth-small"
    stored.mkdir(parents=True)
    (stored / "manifest.json").write_text('{"files": {}}\n')
    result = local_box.fab("sweep", "--dataset", "synht-small", "--param", "lr=1e-3,1e-2")
    assert_one_line_error(result, "no dataset at", "datasets there: synth-small")
    assert docker.calls() == []  # no build, no push
