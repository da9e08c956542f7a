"""A real sshd: an interactive login keeps the box up, a port-forward tunnel does not.

sshd records terminal sessions in the system's utmp (/run/utmp) only when that
file exists; a build container may lack it, so the test creates it for its own
run and removes it after. The watchdog reads the real utmp and /proc here, so it
also sees any other session on the machine; the assertions look only at sessions
that belong to this test's sshd.
"""

import contextlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.fakes.fake_box import FakeBox

SESSION_WAIT_SECONDS = 15
T0 = 1_800_000_000.0
REPORTED_PID = re.compile(r"\(pid (\d+)\)")
SYSTEM_UTMP = Path("/run/utmp")


@pytest.fixture
def system_utmp():
    """/run/utmp for sshd to write to, as every systemd box has it."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: sshd writes login records only when it runs as root")
    created = not SYSTEM_UTMP.exists()
    if created:
        SYSTEM_UTMP.touch(mode=0o664)
    yield SYSTEM_UTMP
    if created:
        with contextlib.suppress(FileNotFoundError):
            SYSTEM_UTMP.unlink()


def _children_of(pid: int) -> set[int]:
    """Every live process below `pid`."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
        except (ValueError, OSError, IndexError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _titles(pids: set[int]) -> list[str]:
    titles = []
    for pid in pids:
        try:
            titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return titles


def _connect(server, *options: str, command: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [
            "ssh",
            *("-i", str(server.client_key), "-p", str(server.port)),
            *("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"),
            *("-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"),
            *options,
            f"{server.user}@{server.host}",
            *([command] if command else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for_session_title(server, marker: str) -> None:
    deadline = time.monotonic() + SESSION_WAIT_SECONDS
    while time.monotonic() < deadline:
        if any(marker in title for title in _titles(_children_of(server.process.pid))):
            return
        time.sleep(0.2)
    raise AssertionError(f"no sshd session titled *{marker}* within {SESSION_WAIT_SECONDS}s")


def _our_reported_sessions(tmp_path, server) -> tuple[dict, list[int]]:
    box = FakeBox(tmp_path / "box", proc_root="/proc", utmp_path=str(SYSTEM_UTMP))
    box.tick(T0)
    state = box.watchdog_state()
    reported = [
        int(match.group(1))
        for session in state["signals"]["ssh_sessions"]
        for match in [REPORTED_PID.search(session)]
    ]
    ours = _children_of(server.process.pid)
    return state, [pid for pid in reported if pid in ours]


@pytest.mark.e2e
def test_interactive_ssh_login_is_seen_and_keeps_the_box_up(sshd_factory, system_utmp, tmp_path):
    server = sshd_factory()
    client = _connect(server, "-tt", command="sleep 120")
    try:
        _wait_for_session_title(server, "@pts/")
        state, ours = _our_reported_sessions(tmp_path, server)
    finally:
        client.kill()
    assert len(ours) == 1
    assert "ssh" in state["busy_reasons"]


@pytest.mark.e2e
def test_port_forward_tunnel_is_not_a_session(sshd_factory, system_utmp, tmp_path):
    server = sshd_factory()
    client = _connect(server, "-N", "-L", f"{_free_port()}:127.0.0.1:{server.port}")
    try:
        # An authenticated connection without a session channel: `sshd: USER`.
        _wait_for_session_title(server, f"sshd: {server.user}")
        _, ours = _our_reported_sessions(tmp_path, server)
    finally:
        client.kill()
    assert ours == []


@pytest.mark.e2e
def test_a_process_that_takes_a_sessions_title_is_not_one(system_utmp, tmp_path):
    impostor = subprocess.Popen(["bash", "-c", 'exec -a "sshd: mallory@pts/9" sleep 60'])
    try:
        box = FakeBox(tmp_path / "box", proc_root="/proc", utmp_path=str(SYSTEM_UTMP))
        box.tick(T0)
        sessions = box.watchdog_state()["signals"]["ssh_sessions"]
    finally:
        impostor.kill()
        impostor.wait()
    assert not any(f"(pid {impostor.pid})" in session for session in sessions)
