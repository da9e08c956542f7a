"""One message POSTed within a hard time limit, to where it was sent and nowhere else.

Every message the box sends (box/notify.py: the webhook, SNS) goes through `post`:

- the whole send is bounded: the name lookup, the connect, TLS, the request and the
  answer's status line all run in a forked child (box/bounded_write.run_within) that
  is killed at the deadline. urllib's timeout holds per blocking call, so a server
  that answers one byte every few seconds held a send (and the watchdog's stop with
  it) for ever;
- no redirect is followed: a 3xx is an answer that did not take the message (a
  webhook that moved, or one that points the box at its own metadata service);
- the URL's path and query (a Slack or Teams webhook's secret) are never in what it
  returns, so never in a log: `shown` keeps the scheme and host;
- a message whose request went out whole, with no answer before the deadline, counts
  as taken: a slow server that got it must not get it again (the caller records it
  as told), while one that refused it (an error status, no connection) did not.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import http.client
import urllib.parse
from collections.abc import Callable

from box.bounded_write import run_within

SENT = "sent"
"""The child's report once the whole request is on the wire."""
STATUS = "status"
MAX_ANSWER_BYTES = 200
"""Of an error answer's body, for the log."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """How one send went."""

    taken: bool
    """The message counts as delivered: a 2xx, or a request out whole left unanswered."""
    said: str
    """One line for the log; never the URL's path or query."""


def shown(url: str) -> str:
    """What a log may say of `url`: its scheme and host (and port), not its secret."""
    parts = urllib.parse.urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}"


def post(url: str, body: bytes, headers: dict[str, str], *, within_seconds: float) -> Answer:
    """POST `body` to `url`, all of it within `within_seconds`; never raises."""
    if within_seconds <= 0:
        return Answer(False, "no time left to send")
    try:
        request = _request(url, body, headers, within_seconds)
    except ValueError as error:
        return Answer(False, _without_secret(f"not a URL to post to ({error})", url))
    child = run_within(request, within_seconds)
    statuses = [line for line in child.lines if line.startswith(STATUS + " ")]
    if statuses:
        _, code, answer = statuses[-1].split(" ", 2)
        return _judged(int(code), answer, url)
    if SENT in child.lines and not child.error:
        return Answer(
            True,
            f"no answer within {within_seconds:.0f} s after the message went out whole: "
            "counted as told, never sent twice",
        )
    if child.error:
        return Answer(False, _without_secret(child.error, url))
    return Answer(False, f"no connection to {shown(url)} within {within_seconds:.0f} s")


def _request(
    url: str, body: bytes, headers: dict[str, str], timeout_seconds: float
) -> Callable[[Callable[[str], None]], None]:
    """The child's work: one request on a connection of its own, reported line by line."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL, got scheme {parts.scheme!r}")
    connection = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def work(report: Callable[[str], None]) -> None:
        # https: the default context checks the certificate and the host name.
        link = connection(parts.hostname, parts.port, timeout=timeout_seconds)
        link.request("POST", target, body=body, headers=headers)
        report(SENT)
        response = link.getresponse()
        answer = b"" if 200 <= response.status < 300 else response.read(MAX_ANSWER_BYTES)
        report(f"{STATUS} {response.status} {answer!r}")
        link.close()

    return work


def _judged(code: int, answer: str, url: str) -> Answer:
    if 200 <= code < 300:
        return Answer(True, f"HTTP {code}")
    if 300 <= code < 400:
        return Answer(False, f"HTTP {code} from {shown(url)}: a redirect, not followed")
    return Answer(False, _without_secret(f"HTTP {code} from {shown(url)}: {answer}", url))


def _without_secret(text: str, url: str) -> str:
    """`text` with the URL, its path and its query taken out (an error may quote them)."""
    parts = urllib.parse.urlsplit(url)
    text = text.replace(url, shown(url))
    for secret in (parts.query, parts.path):
        if len(secret) > 1:
            text = text.replace(secret, "/...")
    return text
