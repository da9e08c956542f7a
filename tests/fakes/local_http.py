"""An HTTP server on 127.0.0.1 in a thread of the test process (not a plugin).

The cloud fakes (tests/fakes/arm.py, tests/fakes/aws_control.py) answer from plain
state the test edits, so they run in-process: no port to wait for, no process to reap.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO

POLL_SECONDS = 0.05  # how soon `close` returns


class LocalHttpServer:
    """Serves `handler` on a free 127.0.0.1 port until `close`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
        ).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Send one complete response; the fakes' requests are quiet (no log lines)."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def drip(out: BinaryIO, data: bytes, every_seconds: float, closing: threading.Event) -> None:
    """Write `data` one byte every `every_seconds` (each read well within a client's
    per-read timeout) until it is all out, the client hangs up, or `closing` is set."""
    for byte in data:
        if closing.wait(every_seconds):
            return
        try:
            out.write(bytes([byte]))
            out.flush()
        except OSError:  # the client gave up and closed
            return
