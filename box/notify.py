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

Exactly once per run end: BOX_ROOT/watchdog/notices.json (root's, 0600) keeps each end's
key (the container and when it exited) with the channels that took the message and
the tries made. A try is recorded before it is made, so MAX_TRIES holds across looks,
reboots and a process killed mid-send; where the disk cannot take the record (full,
read-only), the record goes to the box's state folder on /run (RUN_STATE_DIR) instead,
and where neither can, no try is made (an unrecorded try could repeat at every look).
A message whose request went out whole but got no answer in time counts as told
(box/bounded_post.py): a slow webhook gets it once. In one look a channel that refused
is tried again after RETRY_PAUSE_SECONDS, at most TRIES_PER_LOOK times, the rest at the
next look. A run that is only resumed (exit 75, started again) has no end, so no key.
Everything one call does (lock, records, sends, pauses) fits in BUDGET_SECONDS, or the
deadline its caller gives, plus one final record (WORST_CASE_SECONDS); logs name a
channel by its scheme and host, never the webhook's secret path. Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from box import bootstrap, bounded_post, contract, instance_metadata, user_files
from box.bounded_write import WRITE_TIMEOUT_SECONDS, write_within
from box.watchdog_config import WatchdogConfig

NOTICES_FILE = "notices.json"
MAX_TRIES = 6
"""Per run end, across every look and boot."""
TRIES_PER_LOOK = 2
RETRY_PAUSE_SECONDS = 2
"""Within a look, before a channel that refused is tried again."""
BUDGET_SECONDS = 10
"""Everything one call does before its last record: no send outlives it."""
LEAST_RECORD_SECONDS = 0.5
"""A record of a try begun at the budget's end still gets this long."""
WORST_CASE_SECONDS = BUDGET_SECONDS + 2 * (LEAST_RECORD_SECONDS + WRITE_TIMEOUT_SECONDS)
"""The budget, then the record of what was taken: the disk's, else /run's."""
LOCK_POLL_SECONDS = 0.2
SNS_API_VERSION = "2010-03-31"
SUBJECT_LIMIT = 100  # SNS's, for the mail's subject


def summary_line(config: WatchdogConfig, home: Path, run_id: str, state: str, now: float) -> str:
    """`run R finished: best val MAE 16.23, cost $3.45`, from what the run left."""
    summary = contract.RunSummary.from_dict(
        user_files.read_json(home, run_id, contract.SUMMARY_FILE)
    )
    status = contract.RunRecord.from_dict(user_files.read_json(home, run_id, contract.STATUS_FILE))
    mae = summary.val_mae if summary.val_mae is not None else status.val_mae
    parts = [f"best val MAE {mae:.2f}" if mae is not None else "no val MAE yet"]
    if summary.cost_usd is not None:
        parts.append(f"cost ${summary.cost_usd:.2f}")
    elif (estimate := _estimated_cost(home, run_id, now)) is not None:
        parts.append(f"cost about ${estimate:.2f}")
    kind = "sweep" if home == config.sweeps_dir else "run"
    return f"{kind} {run_id} {state}: {', '.join(parts)}"


def _estimated_cost(home: Path, run_id: str, now: float) -> float | None:
    """launch.json's price of its boxes for the time since the run's first start."""
    launch = contract.LaunchRecord.from_dict(
        user_files.read_json(home, run_id, contract.LAUNCH_FILE)
    )
    price, boxes = launch.hourly_price_usd, launch.boxes or 1
    started = user_files.sane_time(launch.started_at, now)
    if price is None or started is None:
        return None
    return price * boxes * (now - started) / 3600


def channels(config: WatchdogConfig) -> list[str]:
    """The channels this box sends to: `webhook`, `sns`."""
    named = (("webhook", config.notify_webhook), ("sns", config.notify_topic_arn))
    return [name for name, where in named if where]


def record_paths(config: WatchdogConfig) -> list[Path]:
    """Where the told-once record is kept: on the disk (survives a reboot), else in the
    state folder on /run (RUN_STATE_DIR, beside the resume unit's count)."""
    disk = Path(config.box_root) / contract.WATCHDOG_DIR / NOTICES_FILE
    run = Path(config.resume_state_path).with_name(NOTICES_FILE)
    return [disk] if run == disk else [disk, run]


def notify_once(
    config: WatchdogConfig,
    key: str,
    text: str,
    log: Callable[[str], None],
    give_up_at: float | None = None,
) -> bool:
    """Send `text` to each channel that has not taken the message of run end `key`, by
    `give_up_at` (time.monotonic(); default BUDGET_SECONDS from now) and one final
    record. Whether nothing is left to try (told everywhere, or MAX_TRIES spent). Never
    raises: a message must not hold up the stop or the resume that calls it."""
    wanted = channels(config)
    if not wanted:
        return True
    give_up = give_up_at if give_up_at is not None else time.monotonic() + BUDGET_SECONDS
    paths = record_paths(config)
    try:
        with _locked(paths, give_up) as locked:
            if not locked:
                log(f"WARNING: {paths[0]} stayed locked; the end of {key} is told at the next look")
                return False
            return _tell(config, key, text, wanted, paths, give_up, log)
    except Exception as error:  # a message never holds up a stop (docstring)
        log(f"WARNING: the end of {key} was not told: {error}")
        return False


def _tell(
    config: WatchdogConfig,
    key: str,
    text: str,
    wanted: list[str],
    paths: list[Path],
    give_up: float,
    log: Callable[[str], None],
) -> bool:
    notices = _load(paths)
    notice = notices.setdefault(key, {"text": text, "sent": [], "tries": 0})
    for _ in range(TRIES_PER_LOOK):
        left = [name for name in wanted if name not in notice["sent"]]
        if not left or notice["tries"] >= MAX_TRIES:
            return True
        if time.monotonic() >= give_up:
            return False
        notice["tries"] += 1
        # Recorded before it is made: the cap holds through a kill or a full disk.
        if not _save(paths, notices, give_up, log):
            log(
                f"WARNING: the end of {key} is not told: no try can be recorded, and an "
                "unrecorded one could repeat at every look"
            )
            return False
        for name in left:
            answer = SENDERS[name](config, text, give_up)
            where = destination(config, name)
            if answer.taken:
                notice["sent"].append(name)
                log(f"told ({name}, {where}: {answer.said}): {text}")
            else:
                log(
                    f"WARNING: the {name} notice of {key} was not taken by {where} "
                    f"(try {notice['tries']} of {MAX_TRIES}): {answer.said}"
                )
        _save(paths, notices, time.monotonic() + WRITE_TIMEOUT_SECONDS, log)
        if all(name in notice["sent"] for name in wanted):
            return True
        if time.monotonic() + RETRY_PAUSE_SECONDS < give_up:
            time.sleep(RETRY_PAUSE_SECONDS)
    return notice["tries"] >= MAX_TRIES


@contextlib.contextmanager
def _locked(paths: list[Path], give_up: float) -> Iterator[bool]:
    """The record's lock (the resume unit and the watchdog may look in the same minute),
    beside the first record whose folder takes one; False when none could be had."""
    opened = _lock_file(paths)
    if opened is None:
        yield False
        return
    with opened as lock:
        while True:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    yield False
                    return
                time.sleep(LOCK_POLL_SECONDS)
        yield True


def _lock_file(paths: list[Path]) -> IO[str] | None:
    """The lock file, opened; _locked closes it."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            return open(path.with_name(NOTICES_FILE + ".lock"), "a")
    return None


def _load(paths: list[Path]) -> dict:
    """Every record's notices, merged: the most tries, every channel that took one."""
    merged: dict = {}
    for path in paths:
        try:
            notices = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key, notice in (notices if isinstance(notices, dict) else {}).items():
            if not isinstance(notice, dict):
                continue
            known = merged.setdefault(key, {"text": notice.get("text"), "sent": [], "tries": 0})
            tries = notice.get("tries")
            if isinstance(tries, int) and not isinstance(tries, bool):
                known["tries"] = max(known["tries"], tries)
            sent = notice.get("sent") if isinstance(notice.get("sent"), list) else []
            known["sent"] += [name for name in sent if name not in known["sent"]]
    return merged


def _save(paths: list[Path], notices: dict, give_up: float, log: Callable[[str], None]) -> bool:
    """Write the record to the first place that takes it (0600: it names the runs);
    whether one did."""
    text = json.dumps(notices, indent=2, sort_keys=True) + "\n"
    for path in paths:
        partial = path.with_name(NOTICES_FILE + ".tmp")

        def write(path: Path = path, partial: Path = partial) -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(descriptor, "w") as handle:
                handle.write(text)
            os.replace(partial, path)

        try:
            seconds = min(WRITE_TIMEOUT_SECONDS, give_up - time.monotonic())
            write_within(write, max(LEAST_RECORD_SECONDS, seconds))
            return True
        except OSError as error:
            log(f"WARNING: notices not recorded in {path}: {error}")
    return False


def post_webhook(config: WatchdogConfig, text: str, give_up: float) -> bounded_post.Answer:
    """POST `{"text": ...}` (what Slack's and Teams' incoming webhooks take), by `give_up`."""
    return bounded_post.post(
        config.notify_webhook,
        json.dumps({"text": text}).encode(),
        {"Content-Type": "application/json"},
        within_seconds=_send_seconds(config, give_up),
    )


def publish_sns(config: WatchdogConfig, text: str, give_up: float) -> bounded_post.Answer:
    """SNS Publish to the stack's topic, signed with the instance role's keys, by `give_up`."""
    region, url = config.notify_topic_arn.split(":")[3], _sns_url(config)
    form = {
        "Action": "Publish",
        "Version": SNS_API_VERSION,
        "TopicArn": config.notify_topic_arn,
        "Subject": f"glucose-training: {text.split(':', 1)[0]}"[:SUBJECT_LIMIT],
        "Message": text,
    }
    body = urllib.parse.urlencode(form).encode()
    now = datetime.datetime.now(datetime.timezone.utc)
    # The keys' requests too fit in the send's time, each bounded as a whole: a metadata
    # service that drips its answer holds up nothing.
    keys_by = time.monotonic() + _send_seconds(config, give_up)
    try:
        keys = instance_metadata.aws_role_keys(config, give_up_at=keys_by)
    except instance_metadata.MetadataError as error:
        return bounded_post.Answer(False, f"no role keys: {error}")
    headers = bootstrap.signed_request("POST", url, region, "sns", keys, now, body)
    headers.pop("host")
    headers["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
    return bounded_post.post(url, body, headers, within_seconds=_send_seconds(config, give_up))


def _sns_url(config: WatchdogConfig) -> str:
    region = config.notify_topic_arn.split(":")[3]
    return config.sns_url or f"https://sns.{region}.amazonaws.com/"


def destination(config: WatchdogConfig, name: str) -> str:
    """Where channel `name` sends, as a log may say it (scheme and host)."""
    return bounded_post.shown(config.notify_webhook if name == "webhook" else _sns_url(config))


def _send_seconds(config: WatchdogConfig, give_up: float) -> float:
    """One send's time: the config's request timeout, cut to what the budget has left."""
    return min(config.request_timeout_seconds, give_up - time.monotonic())


SENDERS = {"webhook": post_webhook, "sns": publish_sns}
