"""A run's end, once the resume unit (box/resume.py) or the end watch (box/end_watch.py)
judged it down for good: stored in the run's folder in storage where its trainer could
not store it, then told once.

Stored: a run that failed for good (any exit but 0, 75 or 69; not a sweep, whose
driver's folder is its own) gets the run's last status.json, `failed` with the
container's exit code (box/stored_end.py), never over an end its trainer stored. A run
whose trainer said it finished but whose last uploads did not land is never stored
failed: it is stored `finished-upload-pending` with the files storage lacks, and its
message names them (box/unfinished_uploads.py). Told: one message per end, to the
stack's webhook and topic (box/notify.py).

The resume unit stores all the ends of one look within STORES_BUDGET_SECONDS, then tells
them within TELLS_BUDGET_SECONDS, after every run that comes back has been started: a
store or a webhook that is slow or down never holds up a start; what is left is done at
the next look. Standard library only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from box import contract, docker_cli, notify, stored_end, unfinished_uploads, user_files
from box.box_time import now_seconds
from box.watchdog_config import WatchdogConfig

TELLS_BUDGET_SECONDS = 60
"""All the ends one look tells, each within notify.BUDGET_SECONDS: the resume unit's
300 s (TimeoutStartSec) hold the docker wait, the starts, these and
STORES_BUDGET_SECONDS."""
STORES_BUDGET_SECONDS = 20
"""All the ends one look stores (store_ends), each within stored_end.STORE_SECONDS."""
# An end is told (and stored) only when first seen within a day of it. The unit looks
# every minute the box is up, so a real end is seen within minutes (or at the next
# boot); without the bound, the first look of programs that judge every container (not
# just the newest) would tell every old run's end on the box at once.
TELL_ENDS_WITHIN_SECONDS = 24 * 3600
UPLOADS_NOT_LANDED = "finished, but its last uploads did not land"
"""An end's words until its store has listed which files storage lacks."""

Say = Callable[[str], None]


@dataclasses.dataclass
class End:
    """A container whose run stays down, its home (runs/ or sweeps/) and what it did: the
    message's words (those of a finished run whose uploads did not land name the files
    storage lacks once its store has listed them)."""

    container: docker_cli.TrainerContainer
    home: Path
    state: str


def store_ends(config: WatchdogConfig, ends: list[End], say: Say) -> None:
    """Store each end its trainer did not, all within STORES_BUDGET_SECONDS."""

    def store(end: End, by: float) -> None:
        store_the_end(config, end, say, give_up_at=by)

    _each(ends, STORES_BUDGET_SECONDS, stored_end.STORE_SECONDS, "stored", store, say)


def tell_ends(config: WatchdogConfig, ends: list[End], say: Say) -> None:
    """Tell each end once, all within TELLS_BUDGET_SECONDS."""

    def tell(end: End, by: float) -> None:
        tell_the_end(config, end, say, give_up_at=by)

    _each(ends, TELLS_BUDGET_SECONDS, notify.BUDGET_SECONDS, "told", tell, say)


def _each(
    ends: list[End],
    budget_seconds: float,
    own_seconds: float,
    done: str,
    act: Callable[[End, float], None],
    say: Say,
) -> None:
    """`act(end, by)` on each end, each by its own time, all within the budget; those
    left are `done` at the next look."""
    give_up = time.monotonic() + budget_seconds
    for end in ends:
        if time.monotonic() >= give_up:
            say(f"run {end.container.run_id}: its end is {done} at the next look (no time left)")
            continue
        act(end, min(give_up, time.monotonic() + own_seconds))


def tell_the_end(
    config: WatchdogConfig, end: End, say: Say, give_up_at: float | None = None
) -> bool:
    """One message (box/notify.py) for the end of this container's run: it `end.state`;
    `say` logs what was sent (the caller's journal). Whether nothing is left to try."""
    container = end.container
    if not is_this_boxs_end(container, end.home):
        return True
    key = f"{container.id}@{container.finished_at:.0f}"
    text = notify.summary_line(config, end.home, container.run_id, end.state, now_seconds())
    return notify.notify_once(config, key, text, say, give_up_at)


def store_the_end(
    config: WatchdogConfig, end: End, say: Say, give_up_at: float | None = None
) -> bool:
    """The end in the run's folder in storage, where its trainer stored none (the
    module's docstring); a finished run's whose uploads did not land names the files
    storage lacks, and `end.state` then names them too. Whether nothing is left to try."""
    container, home = end.container, end.home
    if home != config.runs_dir or not is_this_boxs_end(container, home):
        return True
    last = user_files.read_json(home, container.run_id, contract.STATUS_FILE) or {}
    if end.state == UPLOADS_NOT_LANDED:
        done, end.state = unfinished_uploads.store(
            config, container, home / container.run_id, last, say, give_up_at
        )
        return done
    said = contract.RunRecord.from_dict(last).state
    if not stored_end.is_failure(container.exit_code) or said == contract.STATE_FINISHED:
        return True  # the trainer's to store; never `failed` over its `finished`
    record = {
        **last,
        "run_id": container.run_id,
        "state": contract.STATE_FAILED,
        "exit_code": container.exit_code,
        "updated_at": container.finished_at,
    }
    return stored_end.store(config, container.run_id, record, say, give_up_at)


def is_this_boxs_end(container: docker_cli.TrainerContainer, home: Path) -> bool:
    """Whether this box reports the end of the container's run (tells it, stores it): not
    one first seen over a day after it (TELL_ENDS_WITHIN_SECONDS), nor one of a box of
    workers of a multi-node run (it has a heartbeat and no status: rank 0's box reports)."""
    if now_seconds() - container.finished_at > TELL_ENDS_WITHIN_SECONDS:
        return False
    run_dir = home / container.run_id
    no_status = not (run_dir / contract.STATUS_FILE).exists()
    return not (no_status and (run_dir / contract.HEARTBEAT_FILE).exists())
