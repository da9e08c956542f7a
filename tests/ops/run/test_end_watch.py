"""What `fab train` and `fab sweep` leave on a lab box for its end watch, over the real
sshd: the programs of this build, the webhook in a file only its owner reads, and a
watch that starts detached; a box that cannot take them is a warning, never a failure.
(The watch itself, against a real engine and webhook: tests/box/test_watchdog_real_docker.py.)"""

from __future__ import annotations

import json
import stat
import time
import uuid

import pytest

from ops.remote.boxes import box_for
from ops.remote.ssh import Box
from ops.run import end_watch
from ops.target.resolve import load_target_file
from stack import box_packing

WEBHOOK = "https://hooks.slack.com/services/T0/B0/secret-path"
LOG_WITHIN_SECONDS = 20


@pytest.fixture
def box(local_box, monkeypatch) -> Box:
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    local_box.write_target(notifyWebhook=WEBHOOK)
    return Box(load_target_file(local_box.target_file))


def _watch_log(local_box) -> str:
    path = local_box.root / "watchdog" / end_watch.LOG_FILE
    give_up = time.monotonic() + LOG_WITHIN_SECONDS
    while not (path.exists() and path.read_text()) and time.monotonic() < give_up:
        time.sleep(0.2)
    return path.read_text() if path.exists() else ""


def test_a_lab_box_with_a_webhook_gets_an_end_watch_and_one_without_none(box, local_box):
    assert end_watch.wanted(box)
    local_box.write_target()
    assert not end_watch.wanted(Box(load_target_file(local_box.target_file)))


def test_a_stacks_box_gets_no_end_watch_its_resume_unit_tells(local_box):
    local_box.write_target(cloud="aws", notifyWebhook=WEBHOOK)
    assert not end_watch.wanted(Box(load_target_file(local_box.target_file)))


def test_this_machine_gets_an_end_watch_that_stores_a_failed_runs_end_in_its_store(tmp_path):
    # No webhook: the watch is there for a run killed before its first upload, whose end
    # it stores in the `file://` store `fab runs` reads (box/stored_end.py).
    storage = f"file://{tmp_path / 'storage'}"
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"storageUri": storage, "boxRoot": str(tmp_path / "box")}))
    this_machine = box_for(load_target_file(target))
    assert end_watch.wanted(this_machine)
    assert json.loads(end_watch.settings_json(this_machine))["storage_uri"] == storage


def test_a_lab_box_is_told_no_storage_its_file_uri_is_this_machines(box):
    assert "storage_uri" not in json.loads(end_watch.settings_json(box))


def test_the_webhook_reaches_the_box_in_a_file_only_its_owner_reads(box, local_box):
    said = end_watch.start(box, f"glucose-train-{uuid.uuid4().hex[:8]}", "run r1")
    assert said.startswith("told when it ends: run r1's end goes to notifyWebhook"), said
    settings = local_box.root / "watchdog" / end_watch.SETTINGS_FILE
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    written = json.loads(settings.read_text())
    assert (written["notify_webhook"], written["box_root"]) == (WEBHOOK, str(local_box.root))
    assert "secret-path" not in said


def test_the_watch_starts_detached_from_the_programs_of_this_build(box, local_box):
    name = f"glucose-train-{uuid.uuid4().hex[:8]}"
    end_watch.start(box, name, "run r1")
    end_watch.start(box, name, "run r1")
    build = box_packing.build_programs().sha256[:16]
    folders = list((local_box.root / "watchdog" / end_watch.PROGRAMS_DIR).iterdir())
    assert [folder.name for folder in folders] == [build]
    assert (folders[0] / "box" / "end_watch.py").is_file()
    # No such container: the watch ran, said so in its log, and ended.
    assert "glucose-end-watch:" in _watch_log(local_box)


def test_the_watchs_log_is_its_owners_alone_and_never_holds_the_webhooks_secret(box, local_box):
    log = local_box.root / "watchdog" / end_watch.LOG_FILE
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    log.chmod(0o644)  # as a watch of an older build left it
    end_watch.start(box, f"glucose-train-{uuid.uuid4().hex[:8]}", "run r1")
    assert "glucose-end-watch:" in _watch_log(local_box)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "secret-path" not in log.read_text()


def test_a_box_root_the_watch_cannot_use_is_a_warning_not_a_failed_train(box, local_box):
    watchdog = local_box.root / "watchdog"
    watchdog.rmdir()
    watchdog.write_text("a file where the folder goes")
    said = end_watch.start(box, "glucose-train-r1", "run r1")
    assert said.startswith("WARNING:") and "cannot watch run r1" in said
    assert "`fab status` says how it ended" in said
