"""Each boot's record carries the size, zone and market the box booted on, from its cloud's
instance metadata (the fake IMDS speaks both clouds' formats), and a boot on anything but
the stack's first choice is told to the stack's webhook, once."""

from __future__ import annotations

import json

import pytest

from tests.fakes.fake_box import BOOT_TIME, FakeBox


def _box(tmp_path, fake_metadata, cloud, **config):
    return FakeBox(tmp_path, cloud=cloud, metadata_url=fake_metadata.url, **config)


def _boots(box) -> list[dict]:
    path = box.box_root / "watchdog" / "boots.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_aws_boot_records_the_instance_type_zone_and_market(tmp_path, fake_metadata):
    fake_metadata.aws_instance_type, fake_metadata.aws_zone = "g6.xlarge", "eu-west-1c"
    fake_metadata.aws_life_cycle = "spot"
    box = _box(tmp_path, fake_metadata, "aws")
    assert box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    (record,) = _boots(box)
    assert (record["size"], record["zone"], record["market"]) == ("g6.xlarge", "eu-west-1c", "spot")


def test_an_azure_boot_records_the_vm_size_zone_and_priority(tmp_path, fake_metadata):
    fake_metadata.azure_vm_size, fake_metadata.azure_zone = "Standard_NC40ads_H100_v5", "2"
    box = _box(tmp_path, fake_metadata, "azure")
    assert box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    (record,) = _boots(box)
    assert (record["size"], record["zone"], record["market"]) == (
        "Standard_NC40ads_H100_v5",
        "2",
        "on-demand",
    )


def test_metadata_that_does_not_answer_still_records_the_boot(tmp_path):
    box = FakeBox(tmp_path, cloud="aws")  # its metadata URL answers nothing
    done = box.run("boot_record.py", now=BOOT_TIME + 30)
    assert done.returncode == 0
    (record,) = _boots(box)
    assert "size" not in record and record["at"] == pytest.approx(BOOT_TIME, abs=60)
    assert "no size recorded for this boot" in done.stdout


def test_a_boot_on_a_fallback_size_is_told_to_the_webhook_once(tmp_path, fake_metadata, webhook):
    box = _box(
        tmp_path,
        fake_metadata,
        "aws",
        first_choice="g6.xlarge on-demand",
        notify_webhook=webhook.server.endpoint,
    )
    assert box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    assert box.run("boot_record.py", now=BOOT_TIME + 90).returncode == 0  # the unit again
    assert webhook.texts == [
        "A glucose-training box booted on g5.xlarge eu-west-1b on-demand, not the stack's "
        "first choice g6.xlarge on-demand: its dollars follow that size (`fab status` shows "
        "the price)."
    ]


def test_a_boot_on_the_first_choice_tells_nobody(tmp_path, fake_metadata, webhook):
    box = _box(
        tmp_path,
        fake_metadata,
        "aws",
        first_choice="g5.xlarge on-demand",
        notify_webhook=webhook.server.endpoint,
    )
    assert box.run("boot_record.py", now=BOOT_TIME + 30).returncode == 0
    assert webhook.posts == []
