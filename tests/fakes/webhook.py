"""A Slack-style incoming webhook on 127.0.0.1: the real HTTP server a run's end is POSTed to."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.fakes.local_http import LocalHttpServer, reply

POLL_SECONDS = 0.1


class Webhook:
    """Keeps each POSTed JSON body, answers `status`."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.status = 200
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hook._lock:
                    if hook.status == 200:
                        hook.posts.append(json.loads(body))
                reply(self, hook.status, b"ok", "text/plain")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = LocalHttpServer(Handler)

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
