"""What the bucket or a run writes never acts on the user's terminal: the real `fab`
under a real pseudo-terminal (rich sees a terminal and colours), with a clipboard write
(OSC 52), a window title (OSC 0), a screen clear (CSI 2J) and a rich `[link=...]` (an
OSC 8 hyperlink) in a run's name (`fab runs`), its stored train.log (`fab logs`), the
keys of its metrics.jsonl (`fab status`), a stored key (`fab download`) and the flags
its launch record holds (`fab train --run ID`).

Everything that reaches the terminal is read back from the pty's master side; rich's
own colours (SGR, `ESC [ ... m`) are the one escape allowed, the hostile text must be
there, shown as letters.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.ops.conftest import FAB
from tests.paths import REPO
from trainer.storage import open_store
from trainer.sweep.spec import SPEC_FILE

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
LINK = "[link=https://evil.example/]click[/link]"
HOSTILE = f"x[/bold]{CLIPBOARD}{TITLE}{CLEAR}{LINK}"
SHOWN = ("\\x1b]52;c;cm0gLXJmIH4K\\x07", "\\x1b]0;owned\\x07", "\\x1b[2J", LINK)
"""How the terminal must show them: letters."""
RICH_COLOURS = re.compile(rb"\x1b\[[0-9;]*m")
RICH_PROGRESS = re.compile(rb"\x1b\[(\?25[lh]|2K|[0-9]*A)")
"""What rich's own progress bar writes besides colours: the cursor hidden and shown, a
line erased, the cursor moved up (to draw the bar again in place)."""
PTY_COLUMNS, PTY_ROWS = 400, 50
FAB_SECONDS = 120


def run_in_pty(args: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """`args` with a pseudo-terminal as stdin, stdout and stderr; its exit code and
    every byte it wrote to the terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLUMNS, 0, 0))
    env = {**env, "TERM": "xterm-256color", "COLUMNS": str(PTY_COLUMNS)}
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env)
    os.close(slave)
    written, deadline = bytearray(), time.monotonic() + FAB_SECONDS
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every holder of the terminal's other side is gone
                    break
                if not chunk:
                    break
                written += chunk
        else:
            raise AssertionError(f"`fab {args[1]}` still running after {FAB_SECONDS} s")
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return process.wait(timeout=30), bytes(written)


def assert_nothing_acts(
    written: bytes, letters: tuple[str, ...] = SHOWN, progress: bool = False
) -> str:
    """No escape reached the terminal but rich's colours (and with `progress` its
    progress bar's); the hostile text is shown as `letters`. What the terminal showed,
    as text."""
    bare = RICH_COLOURS.sub(b"", RICH_PROGRESS.sub(b"", written) if progress else written)
    assert b"\x1b" not in bare, bare
    assert b"\x07" not in bare and "\x9b".encode() not in bare, bare
    shown = bare.decode()
    for each in letters:
        assert each in shown, shown
    return shown


@pytest.fixture
def here(tmp_path: Path) -> dict:
    """A local target: a box root here, a `file://` store here."""
    storage = f"file://{tmp_path / 'storage'}"
    target = tmp_path / "here.json"
    target.write_text(json.dumps({"boxRoot": str(tmp_path / "box"), "storageUri": storage}))
    return {"env": {**os.environ, "GLUCOSE_TARGET": str(target)}, "storage": storage,
            "box": tmp_path / "box"}  # fmt: skip


def test_a_runs_name_from_the_bucket_reaches_the_terminal_as_letters(here):
    store = open_store(here["storage"])
    store.write_bytes("runs/r-hostile/summary.json", json.dumps({"name": HOSTILE}).encode())
    store.write_bytes("runs/r-hostile/status.json", b'{"state": "finished"}')
    code, written = run_in_pty([str(FAB), "runs"], here["env"])
    shown = assert_nothing_acts(written)
    assert code == 0, shown
    assert "r-hostile" in shown and "x[/bold]" in shown


def test_a_stored_log_reaches_the_terminal_as_letters(here, docker_engine):
    log = f"epoch 1\n{HOSTILE}\nepoch 2\n".encode()
    open_store(here["storage"]).write_bytes("runs/r-log/train.log", log)
    code, written = run_in_pty([str(FAB), "logs", "--run", "r-log"], here["env"])
    shown = assert_nothing_acts(written)
    assert code == 0, shown
    assert "epoch 1" in shown and "epoch 2" in shown


def test_metrics_keys_reach_the_terminal_as_letters_in_fab_status(here, docker_engine):
    run_dir = here["box"] / "runs" / "r-status"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"state": "running", "step": 3}))
    # One key each: the view cuts a key past 40 characters.
    record = {"kind": "x[/bold]", CLIPBOARD: 1, TITLE: 2, CLEAR: 3, LINK: 4, "step": 3}
    (run_dir / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    code, written = run_in_pty([str(FAB), "status", "--run", "r-status"], here["env"])
    shown = assert_nothing_acts(written)
    assert code == 0, shown
    assert "last log:" in shown


# A key is a path in a `file://` store: `//` would fold into one `/` there.
KEY_LINK = "[link=file:evil]click[/link]"


def test_a_stored_key_reaches_the_terminal_as_letters_in_fab_download(here, tmp_path):
    store = open_store(here["storage"])
    store.write_bytes("runs/r-key/summary.json", b"{}")
    store.write_bytes(f"runs/r-key/x[/bold]{CLIPBOARD}{TITLE}{CLEAR}{KEY_LINK}", b"x")
    args = ["download", "--run", "r-key", "--offline", "--to", str(tmp_path / "d")]
    code, written = run_in_pty([str(FAB), *args], here["env"])
    shown = assert_nothing_acts(written, (*SHOWN[:3], KEY_LINK), progress=True)
    assert code == 3, shown  # a refused key: not safe to delete the store
    assert "stored keys were refused" in shown


def test_a_launch_records_flags_reach_the_terminal_as_letters_in_fab_train(here):
    launch = {"run_id": "r-flags", "dataset": "synth", "trainer_args": [HOSTILE]}
    open_store(here["storage"]).write_bytes("runs/r-flags/launch.json", json.dumps(launch).encode())
    code, written = run_in_pty([str(FAB), "train", "--run", "r-flags"], here["env"])
    shown = assert_nothing_acts(written)
    assert code == 1, shown
    assert "unrecognized arguments: x[/bold]" in shown


def test_a_sweeps_spec_on_the_box_reaches_the_terminal_as_letters_in_fab_sweep(here, docker_engine):
    spec = {"sweep_id": "s-hostile", "dataset": "synth", "data_dir": "/d", "runs_dir": "/r",
            "storage_uri": here["storage"], "params": ["lr=0.1"], "name": HOSTILE}  # fmt: skip
    folder = here["box"] / "sweeps" / "s-hostile"
    folder.mkdir(parents=True)
    (folder / SPEC_FILE).write_text(json.dumps(spec))
    args = ["sweep", "--sweep", "s-hostile", "--dataset", "other", "--param", "lr=0.1,0.2"]
    code, written = run_in_pty([str(FAB), *args], here["env"])
    shown = assert_nothing_acts(written)
    assert code == 1, shown
    assert "names an earlier sweep s-hostile (x[/bold]" in shown


def test_the_datasets_storage_lists_reach_the_terminal_as_letters_in_fab_train(here):
    link = "[link=file:evil]click"  # a folder's name: no `/` in it
    name = f"x[bold]{CLIPBOARD}{TITLE}{CLEAR}{link}"
    open_store(here["storage"]).write_bytes(f"datasets/{name}/manifest.json", b"{}")
    code, written = run_in_pty([str(FAB), "train", "--dataset", "nope"], here["env"])
    shown = assert_nothing_acts(written, (*SHOWN[:3], link))
    assert code == 1, shown
    assert "datasets there: x[bold]" in shown
