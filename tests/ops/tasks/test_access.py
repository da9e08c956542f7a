"""`fab tensorboard --run`'s image comes from the run's launch.json, which the run dir's
writer (the container, or the bucket it was restored from) controls: it is read as the
contract's LaunchRecord, and what names no usable image is one line, never a crash."""

from __future__ import annotations

import pytest
from invoke.exceptions import Exit

from ops.tasks.access import _launched_image


def test_the_launch_records_image_is_the_one_started():
    assert _launched_image('{"image": "127.0.0.1:5000/glucose-training:abc"}') == (
        "127.0.0.1:5000/glucose-training:abc"
    )


@pytest.mark.parametrize(
    "record",
    ["[" * 100_000, '{"image": 5}', '["image"]', '{"image": "x; rm -rf /"}', "{torn"],
    ids=["nested-too-deep", "a-number", "a-list", "a-shell-word", "torn"],
)
def test_a_launch_record_naming_no_usable_image_is_one_line(record):
    with pytest.raises(Exit, match=r"launch\.json names no usable image"):
        _launched_image(record)
