"""A Slack-style incoming webhook on 127.0.0.1: the real HTTP server a run's end is POSTed to.

Besides answering `status`, it can misbehave as a real endpoint does: answer a list of
statuses first (a 503 and then a 200), answer late after taking the POST, drip its
answer one byte every few seconds, point elsewhere with a redirect, or quote the path
it was POSTed to in its error page (as many a "no such hook" page does).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.fakes.local_http import LocalHttpServer, drip, reply

POLL_SECONDS = 0.1
DRIPPED_ANSWER = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"." * 100
"""A dripping answer: 117 bytes, over seven minutes at 4 s a byte (or till it closes)."""


class Webhook:
    """Keeps each POSTed JSON body it took (answered 2xx); counts every POST in `attempts`."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.attempts = 0
        self.status = 200
        self.answers: list[int] = []
        """Answered first, one per POST, before `status`."""
        self.answer_after_seconds = 0.0
        """Takes the POST, then waits this long before answering."""
        self.drip_seconds = 0.0
        """Takes the POST, then answers one byte every this many seconds."""
        self.location = ""
        """Sent as Location with the answer (a 3xx status points there)."""
        self.error_page = b""
        """The body of an error answer, `{path}` replaced by the path POSTed to."""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = hook._take(json.loads(body))
                if hook.drip_seconds:
                    hook._drip(self.wfile)
                    return
                hook._closing.wait(hook.answer_after_seconds)
                if hook.location:
                    self.send_response(status)
                    self.send_header("Location", hook.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                page = hook.error_page.replace(b"{path}", self.path.encode())
                reply(self, status, page if status >= 400 and page else b"ok", "text/plain")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = LocalHttpServer(Handler)

    def _take(self, post: dict) -> int:
        with self._lock:
            self.attempts += 1
            status = self.answers.pop(0) if self.answers else self.status
            if 200 <= status < 300:
                self.posts.append(post)
            return status

    def _drip(self, out) -> None:
        drip(out, DRIPPED_ANSWER, self.drip_seconds, self._closing)

    def close(self) -> None:
        self._closing.set()
        self.server.close()

    @property
    def texts(self) -> list[str]:
        with self._lock:
            return [post["text"] for post in self.posts]

    def wait_for_texts(self, count: int, timeout_seconds: float) -> list[str]:
        """The texts once `count` have come, or all that came within `timeout_seconds`."""
        give_up = time.monotonic() + timeout_seconds
        while len(self.texts) < count and time.monotonic() < give_up:
            time.sleep(POLL_SECONDS)
        return self.texts
