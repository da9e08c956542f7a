"""Told when it ends: one short message per run end, to the stack's webhook and SNS topic.

Who calls it, at the moment the box learns a run ended: the resume unit (box/resume.py)
when a run's container stays down (finished, failed, past its deadline; never for
one it starts again, nor one `fab stop` stopped: that person knows), and the idle
watchdog (box/watchdog.py) before it stops a box whose run hung. The message names
the run, its state, its best validation MAE (two decimals) and its cost in dollars
with cents: summary.json's when the run wrote one, else launch.json's hourly price for
the time since its first start ("about").

Where it goes: `notify_webhook` (a Slack/Teams-compatible POST of `{"text": ...}`) and,
on AWS, `notify_topic_arn` (the stack's SNS topic, alertEmails subscribed), published
with the instance role's keys from IMDSv2, signed by box/bootstrap.py's SigV4.

Exactly once per run end: BOX_ROOT/watchdog/notices.json (root's) keeps each end's
key (the container and when it exited) with the channels that took the message; a
channel that failed is tried again at the next look, MAX_TRIES times in all. A run
that is only resumed (exit 75, started again) has no end, so no key. The sending
is bounded by BUDGET_SECONDS (the watchdog's worst case counts it). Standard library only.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from box import bootstrap, contract, instance_metadata, user_files
from box.bounded_write import write_within
from box.watchdog_config import WatchdogConfig

NOTICES_FILE = "notices.json"
MAX_TRIES = 3
BUDGET_SECONDS = 10
"""No request starts after this; each one is bounded by the config's timeout."""
LOCK_POLL_SECONDS = 0.2
SNS_API_VERSION = "2010-03-31"
SUBJECT_LIMIT = 100  # SNS's, for the mail's subject


def summary_line(config: WatchdogConfig, home: Path, run_id: str, state: str, now: float) -> str:
    """`run R finished: best val MAE 16.23, cost $3.45`, from what the run left."""
    summary = user_files.read_json(home, run_id, "summary.json") or {}
    status = user_files.read_json(home, run_id, contract.STATUS_FILE) or {}
    best = (summary.get("val") or {}).get("mae") if isinstance(summary.get("val"), dict) else None
    mae = _number(best) if best is not None else _number(status.get("val_mae"))
    parts = [f"best val MAE {mae:.2f}" if mae is not None else "no val MAE yet"]
    cost = _number(summary.get("cost_usd"))
    if cost is not None:
        parts.append(f"cost ${cost:.2f}")
    elif (estimate := _estimated_cost(home, run_id, now)) is not None:
        parts.append(f"cost about ${estimate:.2f}")
    kind = "sweep" if home == config.sweeps_dir else "run"
    return f"{kind} {run_id} {state}: {', '.join(parts)}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _estimated_cost(home: Path, run_id: str, now: float) -> float | None:
    """launch.json's price of its boxes for the time since the run's first start."""
    launch = user_files.read_json(home, run_id, contract.LAUNCH_FILE) or {}
    price, boxes = _number(launch.get("hourly_price_usd")), _number(launch.get("boxes")) or 1
    started = user_files.sane_time(launch.get("started_at"), now)
    if price is None or started is None:
        return None
    return price * boxes * (now - started) / 3600


def channels(config: WatchdogConfig) -> list[str]:
    """The channels this box sends to: `webhook`, `sns`."""
    named = (("webhook", config.notify_webhook), ("sns", config.notify_topic_arn))
    return [name for name, where in named if where]


def notify_once(config: WatchdogConfig, key: str, text: str, log: Callable[[str], None]) -> None:
    """Send `text` to each channel that has not taken the message of run end `key`, within
    BUDGET_SECONDS (and one request's timeout). Never raises: a message must not hold up
    the stop or the resume that calls it, so a failure is logged and tried at the next look."""
    wanted = channels(config)
    if not wanted:
        return
    give_up = time.monotonic() + BUDGET_SECONDS
    path = Path(config.box_root) / contract.WATCHDOG_DIR / NOTICES_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The resume unit and the watchdog may look in the same minute.
        with open(path.with_name(NOTICES_FILE + ".lock"), "a") as lock:
            if not _locked(lock.fileno(), give_up):
                log(f"WARNING: {path} stayed locked; the end of {key} is told at the next look")
                return
            notices = _load(path)
            notice = notices.setdefault(key, {"text": text, "sent": [], "tries": 0})
            left = [name for name in wanted if name not in notice["sent"]]
            if not left or notice["tries"] >= MAX_TRIES:
                return
            notice["tries"] += 1
            for name in left:
                if time.monotonic() < give_up and _sent(config, name, text, key, notice, log):
                    notice["sent"].append(name)
            _save(path, notices, log)
    except Exception as error:  # a message never holds up a stop (docstring)
        log(f"WARNING: the end of {key} was not told: {error}")


def _locked(fd: int, give_up: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= give_up:
                return False
            time.sleep(LOCK_POLL_SECONDS)


def _sent(
    config: WatchdogConfig, name: str, text: str, key: str, notice: dict, log: Callable
) -> bool:
    try:
        SENDERS[name](config, text)
    except Exception as error:  # one channel failed, for any reason: retried
        log(f"WARNING: the {name} notice of {key} failed (try {notice['tries']}): {error}")
        return False
    log(f"told ({name}): {text}")
    return True


def _load(path: Path) -> dict:
    try:
        notices = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return notices if isinstance(notices, dict) else {}


def _save(path: Path, notices: dict, log: Callable[[str], None]) -> None:
    partial = path.with_name(NOTICES_FILE + ".tmp")

    def write() -> None:
        partial.write_text(json.dumps(notices, indent=2, sort_keys=True) + "\n")
        os.replace(partial, path)

    try:
        write_within(write)
    except OSError as error:
        log(f"WARNING: notices not recorded in {path}: {error}")


def post_webhook(config: WatchdogConfig, text: str) -> None:
    """POST `{"text": ...}`: what Slack's and Teams' incoming webhooks take."""
    status, body = instance_metadata.request(
        config.notify_webhook,
        method="POST",
        body=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        timeout_seconds=config.request_timeout_seconds,
    )
    if not 200 <= status < 300:
        raise ValueError(f"the webhook answered HTTP {status}: {body[:200]!r}")


def publish_sns(config: WatchdogConfig, text: str) -> None:
    """SNS Publish to the stack's topic, signed with the instance role's keys."""
    region = config.notify_topic_arn.split(":")[3]
    url = config.sns_url or f"https://sns.{region}.amazonaws.com/"
    form = {
        "Action": "Publish",
        "Version": SNS_API_VERSION,
        "TopicArn": config.notify_topic_arn,
        "Subject": f"glucose-training: {text.split(':', 1)[0]}"[:SUBJECT_LIMIT],
        "Message": text,
    }
    body = urllib.parse.urlencode(form).encode()
    now = datetime.datetime.now(datetime.timezone.utc)
    headers = bootstrap.signed_request("POST", url, region, "sns", _role_keys(config), now, body)
    headers.pop("host")
    headers["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
    status, answer = instance_metadata.request(
        url,
        method="POST",
        body=body,
        headers=headers,
        timeout_seconds=config.request_timeout_seconds,
    )
    if status != 200:
        raise ValueError(f"SNS answered HTTP {status}: {answer[:300]!r}")


def _role_keys(config: WatchdogConfig) -> dict:
    """The instance role's temporary keys, from IMDSv2."""
    roles = "iam/security-credentials/"
    (role,) = instance_metadata.aws_metadata(config, roles)
    (keys,) = instance_metadata.aws_metadata(config, roles + role.split()[0])
    return json.loads(keys)


SENDERS = {"webhook": post_webhook, "sns": publish_sns}
