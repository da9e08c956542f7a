"""A cloud's front on 127.0.0.1 that misbehaves where told and passes the rest on.

It stands between a box program and the fake it talks to (tests/fixtures/metadata.py's
IMDS and ARM): a request whose path holds a rule's text gets the rule's answer, every
other one is passed to the backend and its answer back unchanged. The rules are what
real fronts do to the box: drip an answer one byte every few seconds (from its status
line, or its body after a whole head: urllib's per-read timeout never trips on either),
or hand out a document of their own (an instance role's credentials past 64 KiB).
"""

from __future__ import annotations

import dataclasses
import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler

from tests.fakes.local_http import LocalHttpServer, drip, reply

DRIPPED_BODY = b"." * 100
DRIPPED_HEAD = b"HTTP/1.1 202 Accepted\r\nContent-Length: %d\r\n\r\n" % len(DRIPPED_BODY)
"""A dripped answer: ARM's 202 to a deallocate, 100 bytes of body; at 2 s a byte, over
four minutes."""
BACKEND_TIMEOUT_SECONDS = 10


@dataclasses.dataclass
class _Rule:
    path_part: str
    drip_seconds: float = 0.0
    head_whole: bool = False
    """Drip only the body, after the status line and headers went out at once."""
    document: bytes = b""


class CloudFront:
    """Passes requests to `backend` (a base URL) but those a rule takes; `dripped` lists
    the paths it dripped an answer to."""

    def __init__(self, backend: str = "") -> None:
        self.backend = backend
        self.dripped: list[str] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.server = LocalHttpServer(_handler(self))

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def drip(self, path_part: str = "/", *, every_seconds: float, head_whole: bool = False) -> None:
        """Answer each request whose path holds `path_part` one byte every `every_seconds`."""
        with self._lock:
            self._rules.append(_Rule(path_part, every_seconds, head_whole))

    def serve(self, path_part: str, document: bytes) -> None:
        """Answer each request whose path holds `path_part` with `document` (200, JSON)."""
        with self._lock:
            self._rules.append(_Rule(path_part, document=document))

    def stop_misbehaving(self) -> None:
        """Pass every request on from now on (an answer dripping now goes on dripping)."""
        with self._lock:
            self._rules.clear()

    def close(self) -> None:
        self._closing.set()
        self.server.close()

    def _rule_for(self, path: str) -> _Rule | None:
        with self._lock:
            return next((rule for rule in self._rules if rule.path_part in path), None)

    def _drip(self, out, rule: _Rule, path: str) -> None:
        with self._lock:
            self.dripped.append(path)
        answer = DRIPPED_HEAD + DRIPPED_BODY
        if rule.head_whole:
            out.write(DRIPPED_HEAD)
            out.flush()
            answer = DRIPPED_BODY
        drip(out, answer, rule.drip_seconds, self._closing)

    def _pass_on(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        parts = urllib.parse.urlsplit(self.backend)
        link = http.client.HTTPConnection(
            parts.hostname, parts.port, timeout=BACKEND_TIMEOUT_SECONDS
        )
        headers = {name: value for name, value in handler.headers.items() if name != "Host"}
        try:
            link.request(handler.command, handler.path, body=body or None, headers=headers)
            answer = link.getresponse()
            payload = answer.read()
            kind = answer.getheader("Content-Type", "application/octet-stream")
            reply(handler, answer.status, payload, kind)
        finally:
            link.close()


def _handler(front: CloudFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            rule = front._rule_for(self.path)
            if rule is None:
                front._pass_on(self, body)
            elif rule.drip_seconds:
                front._drip(self.wfile, rule, self.path)
                self.close_connection = True
            else:
                reply(self, 200, rule.document, "application/json")

        do_GET = do_PUT = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler
