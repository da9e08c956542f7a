"""Spot eviction notices from the instance metadata service of either cloud.

- AWS: IMDSv2 — ``PUT /latest/api/token``, then ``GET
  /latest/meta-data/spot/instance-action`` answers 404 until a notice exists, then
  ``{"action", "time"}``; the notice comes 2 minutes ahead, so polling every 5 s is
  plenty (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
- Azure: Scheduled Events — ``GET /metadata/scheduledevents?api-version=2020-07-01``
  with ``Metadata: true``; a ``Preempt`` event gives at least 30 s, so poll about
  once a second and, once the checkpoint is uploaded, POST ``{"StartRequests":
  [{"EventId": ...}]}`` to let the platform go ahead early
  (https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events).

Both clouds serve this at 169.254.169.254; ``GLUCOSE_IMDS_URL`` points the trainer
elsewhere (a fake on 127.0.0.1 in tests; ``off`` disables watching). Each poller
probes once with a short timeout in its own thread and stops for good when nothing
answers (a laptop, CI): watching costs the training loop nothing per step.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

IMDS_URL_ENV = "GLUCOSE_IMDS_URL"
DEFAULT_IMDS_URL = "http://169.254.169.254"
PROBE_TIMEOUT_SECONDS = 1.0
REQUEST_TIMEOUT_SECONDS = 2.0
AWS_POLL_SECONDS = 5.0
AZURE_POLL_SECONDS = 1.0
AWS_TOKEN_TTL_SECONDS = 21600
AZURE_EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"

# Link-local metadata must never go through an HTTP(S)_PROXY from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Notice:
    """The cloud is about to take the machine away."""

    cloud: str
    detail: str
    event_id: str | None = None


def _call(
    url: str,
    timeout_s: float,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    """(status, body); raises OSError when nothing answers."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class AwsSpotPoller:
    """IMDSv2 `spot/instance-action`."""

    cloud = "aws"
    interval_s = AWS_POLL_SECONDS

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._token: str | None = None

    def _fetch_token(self, timeout_s: float) -> str | None:
        status, body = _call(
            f"{self.base_url}/latest/api/token",
            timeout_s,
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_SECONDS)},
        )
        return body.decode() if status == 200 and body else None

    def probe(self) -> bool:
        self._token = self._fetch_token(PROBE_TIMEOUT_SECONDS)
        return self._token is not None

    def poll(self) -> Notice | None:
        url = f"{self.base_url}/latest/meta-data/spot/instance-action"
        status, body = _call(url, REQUEST_TIMEOUT_SECONDS, headers=self._headers())
        if status == 401:  # the token expired: fetch a new one and ask again
            self._token = self._fetch_token(REQUEST_TIMEOUT_SECONDS)
            status, body = _call(url, REQUEST_TIMEOUT_SECONDS, headers=self._headers())
        if status != 200:
            return None
        notice = json.loads(body)
        return Notice("aws", f"spot {notice.get('action')} at {notice.get('time')}")

    def _headers(self) -> dict[str, str]:
        return {"X-aws-ec2-metadata-token": self._token or ""}

    def acknowledge(self, notice: Notice) -> None:
        """AWS has nothing to acknowledge."""


class AzurePreemptPoller:
    """Scheduled Events `Preempt`."""

    cloud = "azure"
    interval_s = AZURE_POLL_SECONDS

    def __init__(self, base_url: str) -> None:
        self.url = base_url + AZURE_EVENTS_PATH

    def _events(self, timeout_s: float) -> list[dict] | None:
        status, body = _call(self.url, timeout_s, headers={"Metadata": "true"})
        if status != 200:
            return None
        document = json.loads(body)
        return document.get("Events") if isinstance(document, dict) else None

    def probe(self) -> bool:
        try:
            return self._events(PROBE_TIMEOUT_SECONDS) is not None
        except ValueError:  # something answered, but not Scheduled Events
            return False

    def poll(self) -> Notice | None:
        for event in self._events(REQUEST_TIMEOUT_SECONDS) or []:
            if event.get("EventType") == "Preempt":
                detail = f"Preempt not before {event.get('NotBefore')}"
                return Notice("azure", detail, event.get("EventId"))
        return None

    def acknowledge(self, notice: Notice) -> None:
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]}).encode()
        headers = {"Metadata": "true", "Content-Type": "application/json"}
        status, _ = _call(self.url, REQUEST_TIMEOUT_SECONDS, "POST", headers, body)
        log.info("spot notice: acknowledged Azure event %s (HTTP %s)", notice.event_id, status)


class NoticeWatcher:
    """Polls both clouds' notices in background threads; calls `on_notice` once."""

    def __init__(self, on_notice: Callable[[Notice], None], base_url: str | None = None):
        base_url = base_url if base_url is not None else os.environ.get(IMDS_URL_ENV, "")
        self.base_url = (base_url or DEFAULT_IMDS_URL).rstrip("/")
        self.enabled = base_url.strip().lower() != "off"
        self.notice: Notice | None = None
        self._on_notice = on_notice
        self._stopping = threading.Event()
        self._pollers = [AwsSpotPoller(self.base_url), AzurePreemptPoller(self.base_url)]
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> NoticeWatcher:
        if not self.enabled:
            return self
        for poller in self._pollers:
            thread = threading.Thread(
                target=self._watch, args=(poller,), name=f"spot-{poller.cloud}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT_SECONDS * 2)

    def acknowledge(self) -> None:
        """After the checkpoint is uploaded: let the platform go ahead (Azure)."""
        notice = self.notice
        for poller in self._pollers:
            if notice is not None and poller.cloud == notice.cloud:
                try:
                    poller.acknowledge(notice)
                except OSError as error:
                    log.warning("spot notice: acknowledging %s failed: %s", notice, error)

    def _watch(self, poller: AwsSpotPoller | AzurePreemptPoller) -> None:
        try:
            available = poller.probe()
        except OSError:
            available = False
        if not available:
            log.debug(
                "spot notice: no %s metadata at %s; not watching", poller.cloud, self.base_url
            )
            return
        log.info("spot notice: watching %s every %.0f s", poller.cloud, poller.interval_s)
        while not self._stopping.wait(poller.interval_s):
            try:
                notice = poller.poll()
            except (OSError, ValueError) as error:  # a hiccup: the next poll may work
                log.debug("spot notice: %s poll failed: %s", poller.cloud, error)
                continue
            if notice is not None:
                self._report(notice)
                return

    def _report(self, notice: Notice) -> None:
        with self._lock:
            if self.notice is not None:
                return
            self.notice = notice
        log.warning("spot notice (%s): %s; checkpointing and stopping", notice.cloud, notice.detail)
        self._on_notice(notice)
