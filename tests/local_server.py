"""A local server process on 127.0.0.1 that a test may kill and start again (not a plugin).

The storage fixtures (moto for S3, Azurite for Blob) use it; the outage tests
stop the server mid-run and bring it back on the same port.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

SERVER_START_TIMEOUT_SECONDS = 60
SERVER_STOP_TIMEOUT_SECONDS = 10
READY_POLL_SECONDS = 0.1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class ServerProcess:
    """`command(port)` started with its output in `log`; restartable on the same port."""

    def __init__(self, name: str, command: Callable[[int], list[str]], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self._command = command
        self._log = log
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        assert self._process is None, f"{self.name} is already running"
        with self._log.open("ab") as log_file:
            self._process = subprocess.Popen(
                self._command(self.port), stdout=log_file, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_SECONDS
        while not port_open(self.port):
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self._process.returncode}: "
                    f"{self._log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} not listening on port {self.port}")
            time.sleep(READY_POLL_SECONDS)

    def stop(self) -> None:
        """Kill the server (SIGKILL: an outage, not a tidy shutdown)."""
        if self._process is None:
            return
        self._process.kill()
        try:
            self._process.wait(timeout=SERVER_STOP_TIMEOUT_SECONDS)
        finally:
            self._process = None
        deadline = time.monotonic() + SERVER_STOP_TIMEOUT_SECONDS
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(READY_POLL_SECONDS)

    def stall(self) -> None:
        """Freeze the server (SIGSTOP): connections still open, no request is answered,
        as with a store that hangs rather than refuses."""
        assert self._process is not None, f"{self.name} is not running"
        self._process.send_signal(signal.SIGSTOP)

    def unstall(self) -> None:
        """Let a stalled server answer again (SIGCONT), requests in flight included."""
        assert self._process is not None, f"{self.name} is not running"
        self._process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None
