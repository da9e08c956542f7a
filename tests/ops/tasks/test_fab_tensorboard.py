"""`fab tensorboard` with no `--run`, seen in a real headless Chromium: every run of the
stack's storage (moto's S3; no box at all) and of the local `runs/` in one TensorBoard,
its HParams table showing each run's settings and final metrics.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.chromium import chromium_page
from tests.fixtures.run_folders import put_run, storage_only_target
from tests.local_server import free_port
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO
from trainer.storage import open_store

START_TIMEOUT_SECONDS = 60
PAGE_TIMEOUT_SECONDS = 60


def _url(fab: subprocess.Popen) -> str:
    """The URL `fab tensorboard` prints once it serves."""
    deadline, seen = time.monotonic() + START_TIMEOUT_SECONDS, ""
    while time.monotonic() < deadline and fab.poll() is None:
        if select.select([fab.stdout], [], [], 1.0)[0]:
            line = fab.stdout.readline()
            seen += line
            if line.startswith("TensorBoard of "):
                return line.split(": ", 1)[1].strip()
    raise AssertionError(f"fab tensorboard did not serve: {seen}{fab.stderr.read()}")


@pytest.fixture
def board(moto_server, tmp_path: Path):
    """`fab tensorboard` serving two runs from S3 and one from the local runs/."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in moto_server.env.items():
            patch.setenv(name, value)
        uri = moto_server.create_bucket(prefix="board")
        storage = open_store(uri)
        put_run(storage, "runs/", "r-lr-small", tmp_path, lr=1e-3, val_mae=12.5, sweep="s-lr")
        put_run(storage, "runs/", "r-lr-large", tmp_path, lr=3e-2, val_mae=19.75, sweep="s-lr")
    put_run(open_store(f"file://{tmp_path / 'runs'}"), "", "cpu-demo", tmp_path, lr=2e-3,
            val_mae=21.0)  # fmt: skip
    env = {
        **os.environ,
        **moto_server.env,
        "GLUCOSE_TARGET": str(storage_only_target(tmp_path / "t", uri)),
    }
    command = [str(FAB), "tensorboard", "--port", str(free_port()), "--local",
               str(tmp_path / "runs"), "--cache", str(tmp_path / "cache")]  # fmt: skip
    fab = subprocess.Popen(command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)  # fmt: skip
    try:
        yield _url(fab)
    finally:
        fab.send_signal(signal.SIGINT)  # what Ctrl-C sends
        fab.wait(timeout=30)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_the_hparams_table_shows_every_run_with_its_settings_and_final_metrics(board, tmp_path):
    with chromium_page(tmp_path / "chromium-profile") as page:
        page.open(f"{board}#hparams")
        text = page.wait_for_text("r-lr-small", "r-lr-large", "cpu-demo", "optim.lr",
                                  "0.0010000", "0.030000", "best_checkpoint/val_mae",
                                  timeout_s=PAGE_TIMEOUT_SECONDS)  # fmt: skip
        shot = page.screenshot(tmp_path / "hparams.png")
    assert "Number of matching session groups: 3" in text, text
    assert shot.read_bytes().startswith(b"\x89PNG")


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_the_scalars_page_lists_every_run_for_their_curves_together(board, tmp_path):
    with chromium_page(tmp_path / "chromium-profile") as page:
        page.open(f"{board}#timeseries")
        page.wait_for_text("r-lr-small", "r-lr-large", "cpu-demo", "/val_mae",
                           timeout_s=PAGE_TIMEOUT_SECONDS)  # fmt: skip


def test_no_runs_anywhere_is_one_line_saying_where_it_looked(tmp_path):
    target = storage_only_target(tmp_path / "target.json", f"file://{tmp_path / 'storage'}")
    env = {**os.environ, "GLUCOSE_TARGET": str(target)}
    done = subprocess.run(
        [str(FAB), "tensorboard", "--local", str(tmp_path / "runs"), "--cache",
         str(tmp_path / "cache")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    looked = f"no runs in file://{tmp_path / 'storage'} and {tmp_path / 'runs'}/"
    assert_one_line_error(done, looked, "point --local DIR", "--target local")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--port", "99999"], "--port 99999: not a port; expected a whole number from 1 to 65535"),
        (["--port", "-1"], "--port -1: not a port"),
        (["--cache", "{file}"], "is a file; expected a folder for the gathered runs"),
        (["--cache", "/proc/none"], "--cache /proc/none: cannot make that folder"),
    ],
)
def test_a_port_or_cache_that_cannot_be_is_one_line(tmp_path, flags, said):
    (tmp_path / "a-file").write_text("")
    flags = [flag.format(file=tmp_path / "a-file") for flag in flags]
    target = storage_only_target(tmp_path / "target.json", f"file://{tmp_path / 'storage'}")
    env = {**os.environ, "GLUCOSE_TARGET": str(target)}
    done = subprocess.run(
        [str(FAB), "tensorboard", "--local", str(tmp_path / "runs"), *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert_one_line_error(done, said)


def _serving_every_2_s(tmp_path: Path) -> subprocess.Popen:
    """`fab tensorboard` of the `file://` storage in `tmp_path`, gathering every 2 s."""
    target = storage_only_target(tmp_path / "target.json", f"file://{tmp_path / 'storage'}")
    env = {**os.environ, "GLUCOSE_TARGET": str(target), "GLUCOSE_TENSORBOARD_GATHER_SECONDS": "2"}
    command = [str(FAB), "tensorboard", "--port", str(free_port()), "--local",
               str(tmp_path / "runs"), "--cache", str(tmp_path / "cache")]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


@pytest.mark.e2e  # TensorBoard's own server
@pytest.mark.timeout(240)
def test_a_run_stored_while_it_serves_comes_in_without_a_restart(tmp_path):
    storage = open_store(f"file://{tmp_path / 'storage'}")
    put_run(storage, "runs/", "r-first", tmp_path, lr=1e-3, val_mae=12.5)
    fab = _serving_every_2_s(tmp_path)
    try:
        url = _url(fab)
        put_run(storage, "runs/", "r-later", tmp_path, lr=3e-3, val_mae=11.0)
        deadline, runs = time.monotonic() + START_TIMEOUT_SECONDS, []
        while "r-later" not in runs and time.monotonic() < deadline:
            time.sleep(1)
            with urllib.request.urlopen(f"{url.rstrip('/')}/data/runs", timeout=10) as answer:
                runs = json.loads(answer.read())
        assert "r-later" in runs and "r-first" in runs, runs
    finally:
        fab.send_signal(signal.SIGINT)
        fab.wait(timeout=30)


SESSION_GROUPS = {
    "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
    "colParams": [], "startIndex": 0, "sliceSize": 100, "includeMetrics": True,
}  # fmt: skip


def _data(url: str, path: str, request: dict | None = None):
    """The board's data API, as its pages read it (a request given as its GET form)."""
    query = f"?request={urllib.parse.quote(json.dumps(request))}" if request else ""
    with urllib.request.urlopen(f"{url.rstrip('/')}/data/{path}{query}", timeout=10) as answer:
        return json.loads(answer.read())


def _until(seen, what: str):
    """`seen()` once it is truthy, asked every second; what it last was, in the failure."""
    deadline, last = time.monotonic() + START_TIMEOUT_SECONDS, None
    while time.monotonic() < deadline:
        try:
            last = seen()
        except OSError as error:  # the board between two loads of a run: ask again
            last = error
        if last and not isinstance(last, OSError):
            return last
        time.sleep(1)
    raise AssertionError(f"the board never showed {what}; last: {last}")


@pytest.mark.e2e  # TensorBoard's own server
@pytest.mark.timeout(300)
def test_a_run_that_finishes_while_it_serves_shows_its_new_steps_and_its_end(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    storage = open_store(f"file://{tmp_path / 'storage'}")
    writer = SummaryWriter(str(tmp_path / "written"))
    (events,) = (tmp_path / "written").iterdir()

    def mirror(state: str, maes: dict[int, float]) -> None:
        """What the trainer's mirror stores: its grown event file, then its status."""
        for step, mae in maes.items():
            writer.add_scalar("epoch/val_mae", mae, step)
        writer.flush()
        storage.put_file(f"runs/r-live/tb/{events.name}", events)
        storage.write_bytes("runs/r-live/status.json", json.dumps({"state": state}).encode())

    storage.write_bytes("runs/r-live/launch.json", b'{"started_at": 1.79e9, "dataset": "synth"}')
    storage.write_bytes("runs/r-live/config.json", b'{"optim": {"lr": 0.001}}')
    mirror("running", {1: 30.0, 2: 25.0})
    fab = _serving_every_2_s(tmp_path)
    scalars = "plugin/scalars/scalars?run=r-live&tag=epoch/val_mae"
    try:
        url = _url(fab)
        _until(lambda: len(_data(url, scalars)) == 2, "the run's first two steps")
        mirror("running", {3: 21.0, 4: 18.0})
        _until(lambda: len(_data(url, scalars)) == 4, "steps 3 and 4 of the running run")
        storage.write_bytes("runs/r-live/summary.json", b'{"val": {"mae": 18.0}}')
        mirror("finished", {})

        def ended():
            groups = _data(url, "plugin/hparams/session_groups", SESSION_GROUPS)
            live = [g for g in groups.get("sessionGroups", []) if g["name"] == "r-live"]
            done = live and live[0]["hparams"].get("state") == "finished"
            success = done and live[0]["sessions"][0]["status"] == "STATUS_SUCCESS"
            return live[0] if success else None

        group = _until(ended, "the run's end in HParams")
        assert len(group["sessions"]) == 1, group  # the running session went with its folder
        metrics = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert metrics["best_checkpoint/val_mae"] == 18.0, group
    finally:
        writer.close()
        fab.send_signal(signal.SIGINT)
        fab.wait(timeout=30)
