"""One HTTP request within a hard time limit, to where it was sent and nowhere else.

Every request the box makes to a cloud goes through `call`: instance metadata and ARM
(box/instance_metadata.py: the watchdog's deallocate, the verdict's and the stop
record's metadata, role keys and tokens), the stored end's reads and writes
(box/stored_end.py), and every message (box/notify.py: the webhook, SNS, through
`post`):

- the whole request is bounded: the name lookup, the connect, TLS, the request, the
  answer's status line, headers and body all run in a forked child
  (box/bounded_write.run_within) that is killed at the deadline. urllib's timeout holds
  per blocking call, so a server that answers one byte every few seconds held a send,
  and an ARM that drips its answer held the watchdog's deallocate, for ever;
- an answer is whole only when its body came to its end (or to the bytes asked for)
  within the deadline: a status line alone is not the cloud's answer to a caller that
  reads the body;
- no redirect is followed: a 3xx is an answer that did not take the request (a
  webhook that moved, or one that points the box at its own metadata service; the
  box's requests carry its credentials);
- the URL's path and query (a Slack or Teams webhook's secret) are never in what it
  returns, so never in a log: `shown` keeps the scheme and host, and an error (the
  child's, or an error page that quotes the path) loses them before it is cut to its
  length: cut first, a piece of the path no longer matched and stayed whole in the log.

`post` judges a message: one whose request went out whole, with no answer before the
deadline, counts as taken: a slow server that got it must not get it again (the
caller records it as told), while one that refused it (an error status, no
connection) did not. Every other caller counts only a whole answer.

Standard library only.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import re
import urllib.parse
from collections.abc import Callable

from box.bounded_write import run_within

SENT = "sent"
"""The child's report once the whole request is on the wire."""
STATUS = "status"
"""Then the answer's status and headers (JSON), once its head came."""
BODY = "body"
"""Then its body (base64), once read to its end or to the bytes asked for."""
MAX_ANSWER_CHARS = 200
"""Of an error answer's body to a message, as the log shows it."""
ANSWER_READ_BYTES = 4096
"""Of an error answer's body read, the secret taken out of all of it before the cut."""
SECRET_PIECE_CHARS = 8
"""A piece of the URL's path or query this long or longer is taken out on its own too
(a page may quote one segment, or the path decoded)."""


@dataclasses.dataclass(frozen=True)
class Reply:
    """What came of one request within its time."""

    status: int | None
    """The answer's status; None when no head came in time."""
    headers: dict[str, str]
    """Its headers, names in lower case."""
    body: bytes
    """Its body, at most the bytes asked for."""
    whole: bool
    """The answer came whole in time: head and body (to its end, or to the bytes asked
    for)."""
    sent: bool
    """The request went out whole."""
    raised: bool = False
    """The request failed on its own (no connection, a reset), before the deadline."""
    problem: str = ""
    """Why the answer is not whole, for a log (never the URL's path or query)."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """How one message's send went."""

    taken: bool
    """The message counts as delivered: a 2xx, or a request out whole left unanswered."""
    said: str
    """One line for the log; never the URL's path or query."""


def shown(url: str) -> str:
    """What a log may say of `url`: its scheme and host (and port), not its secret."""
    parts = urllib.parse.urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}"


def call(
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    *,
    within_seconds: float,
    answer_bytes: int,
) -> Reply:
    """`method` `url`, the answer's body read up to `answer_bytes`, all of it within
    `within_seconds`; never raises."""
    if within_seconds <= 0:
        return Reply(None, {}, b"", False, False, problem="no time left for the request")
    try:
        request = _request(method, url, body, headers, within_seconds, answer_bytes)
    except ValueError as error:
        problem = _without_secret(f"not a URL to call ({error})", url)
        return Reply(None, {}, b"", False, False, raised=True, problem=problem)
    child = run_within(request, within_seconds)
    sent = SENT in child.lines
    heads = [line for line in child.lines if line.startswith(STATUS + " ")]
    bodies = [line for line in child.lines if line.startswith(BODY + " ")]
    status, answer_headers = _head(heads[-1]) if heads else (None, {})
    answer = base64.b64decode(bodies[-1].split(" ", 1)[1]) if bodies else b""
    if bodies and not child.error:
        return Reply(status, answer_headers, answer, True, sent)
    if child.error:
        problem = _without_secret(child.error, url)
    elif status is not None:
        problem = f"the answer's body did not come whole within {within_seconds:.0f} s"
    elif sent:
        problem = f"no answer within {within_seconds:.0f} s after the request went out whole"
    else:
        problem = f"no connection to {shown(url)} within {within_seconds:.0f} s"
    return Reply(status, answer_headers, answer, False, sent, bool(child.error), problem)


def post(url: str, body: bytes, headers: dict[str, str], *, within_seconds: float) -> Answer:
    """POST the message `body` to `url`, all of it within `within_seconds`; never raises."""
    if within_seconds <= 0:
        return Answer(False, "no time left to send")
    reply = call(
        "POST", url, body, headers, within_seconds=within_seconds, answer_bytes=ANSWER_READ_BYTES
    )
    if reply.status is not None:
        return _judged(reply.status, _answer_shown(reply.body, url), url)
    if reply.sent and not reply.raised:
        return Answer(
            True,
            f"no answer within {within_seconds:.0f} s after the message went out whole: "
            "counted as told, never sent twice",
        )
    return Answer(False, reply.problem)


def _request(
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    timeout_seconds: float,
    answer_bytes: int,
) -> Callable[[Callable[[str], None]], None]:
    """The child's work: one request on a connection of its own, reported line by line."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL, got scheme {parts.scheme!r}")
    connection = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def exchange(report: Callable[[str], None]) -> None:
        # https: the default context checks the certificate and the host name.
        link = connection(parts.hostname, parts.port, timeout=timeout_seconds)
        link.request(method, target, body=body, headers=headers)
        report(SENT)
        response = link.getresponse()
        named = {name.lower(): value for name, value in response.getheaders()}
        report(f"{STATUS} {response.status} {json.dumps(named)}")
        answer = response.read(answer_bytes)
        report(f"{BODY} {base64.b64encode(answer).decode()}")
        link.close()

    def work(report: Callable[[str], None]) -> None:
        try:
            exchange(report)
        except Exception as error:
            # Its text may quote the request (http.client's InvalidURL does): the secret
            # goes here, before run_within cuts the text to its length.
            said = " ".join(str(error).split()) or type(error).__name__
            raise RuntimeError(_without_secret(said, url)) from None

    return work


def _head(line: str) -> tuple[int, dict[str, str]]:
    _, code, headers = line.split(" ", 2)
    return int(code), json.loads(headers)


def _judged(code: int, answer: str, url: str) -> Answer:
    if 200 <= code < 300:
        return Answer(True, f"HTTP {code}")
    if 300 <= code < 400:
        return Answer(False, f"HTTP {code} from {shown(url)}: a redirect, not followed")
    return Answer(False, _without_secret(f"HTTP {code} from {shown(url)}: {answer}", url))


def _answer_shown(body: bytes, url: str) -> str:
    """An error answer as the log shows it: the secret taken out of all that was read,
    then cut to MAX_ANSWER_CHARS. Where the read cut the body, its last len(url)
    characters go first: they may hold the start of the path, which no longer matches."""
    text = body.decode(errors="replace")
    if len(body) >= ANSWER_READ_BYTES:
        text = text[: max(0, len(text) - len(url))]
    return repr(_without_secret(text, url)[:MAX_ANSWER_CHARS])


def _without_secret(text: str, url: str) -> str:
    """`text` with the URL, its path and its query taken out (an error may quote them),
    as written and decoded, whole and each piece of SECRET_PIECE_CHARS or more."""
    parts = urllib.parse.urlsplit(url)
    text = text.replace(url, shown(url))
    whole = {parts.query, parts.path}
    whole |= {urllib.parse.unquote(secret) for secret in whole}
    pieces = {piece for secret in whole for piece in re.split(r"[/?&=@;]", secret)}
    secrets = {secret for secret in whole if len(secret) > 1}
    secrets |= {piece for piece in pieces if len(piece) >= SECRET_PIECE_CHARS}
    for secret in sorted(secrets, key=len, reverse=True):  # the whole before its pieces
        text = text.replace(secret, "/...")
    return text
