#!/usr/bin/env python3
"""End watch: tells a run's end where no resume unit looks (this machine, a lab box).

A box `pulumi up` made tells each run end from its resume unit (box/resume.py). This
machine and a lab box have no box programs running, so `fab train` and `fab sweep` start
this program beside the container they start, when the target file sets notifyWebhook:
`python3 -m box.end_watch CONTAINER`, detached, from a copy of box/ under the box root.
It waits for that one container to exit (`docker wait`, in slices, through engine
restarts), judges the end as the resume unit does, tells it once (box/notify.py: the
webhook, and notices.json against a second telling), and exits. A webhook that refused
(a 503, no connection), or a store, is tried again after each of RETRY_PAUSES_SECONDS,
within notify.MAX_TRIES: nobody else looks again here.

The same ends are told: finished, failed, past its deadline; none for a run the user
stopped. A run the resume unit would start again (exit 75 or 69: a `docker stop`, the
engine's restart, the host's shutdown) has nobody to start it here, so it is told as
stopped, with the command that resumes it; but one whose trainer said it finished, its
last uploads not landed (box/unfinished_uploads.py: killed during them, or storage
down), is started again here as the resume unit would (its start uploads what storage
lacks), as often and after the same pauses, and judged once it is down for good: a
finished run whose files storage still lacks is told and stored so, the files named. A
container removed before it exited, or a
host that went down with its watcher, tells nothing. A watch follows one container by
its id, not its name: a resumed run's container is a new one, with a watch of its own;
two watches of one container tell its end once (notices.json).

A failed run's end is also stored in its folder in storage, as the resume unit stores
it (box/stored_end.py), where the settings name a storage: on this machine `fab train`
names its `file://` store, where a run killed before its first upload (exit 137) left
no end. A lab box has no identity of its own to write a bucket with: none there.

Settings: $GLUCOSE_WATCHDOG_CONFIG (the watchdog's format: box_root, notify_webhook,
storage_uri).
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from box import docker_cli, resume, run_ends, unfinished_uploads
from box.box_time import boot_time, now_seconds
from box.watchdog_config import WatchdogConfig, load_config_or_say_why

WAIT_SLICE_SECONDS = 600
"""One `docker wait`; the container is inspected again after each."""
ENGINE_AWAY_PAUSE_SECONDS = 30
"""After a `docker wait` that failed at once (the engine restarting): no busy loop."""
WATCH_AT_MOST_SECONDS = 45 * 24 * 3600
"""Longer than any run fab starts: a watcher never outlives its reason by much."""
RETRY_PAUSES_SECONDS = (60, 300)
"""Between looks at an end not told yet; each look tries notify.TRIES_PER_LOOK times."""
RESUME_COMMAND = {"train": "fab train --run {}", "sweep": "fab sweep --sweep {}"}


def log(message: str) -> None:
    print(f"glucose-end-watch: {message}", flush=True)


def stopped_state(container: docker_cli.TrainerContainer) -> str:
    """What the message says of a run the resume unit would have started again."""
    command = RESUME_COMMAND[container.kind].format(container.run_id)
    return f"stopped (exit {container.exit_code}) with nothing here to start it again (`{command}`)"


def wait_for_exit(config: WatchdogConfig, container_id: str) -> docker_cli.TrainerContainer | None:
    """The container once it is down; None when it is gone (removed) or the watch ran out."""
    give_up = time.monotonic() + WATCH_AT_MOST_SECONDS
    engine_said = ""
    while time.monotonic() < give_up:
        try:
            container = docker_cli.inspect_one(config.docker_command, container_id)
        except docker_cli.DockerError as error:
            if str(error) != engine_said:
                log(f"docker does not answer ({error}); trying every {ENGINE_AWAY_PAUSE_SECONDS} s")
                engine_said = str(error)
            time.sleep(ENGINE_AWAY_PAUSE_SECONDS)
            continue
        if container is None or not container.running:
            return container
        started = time.monotonic()
        waited = docker_cli.wait(config.docker_command, container_id, WAIT_SLICE_SECONDS)
        if not waited and time.monotonic() - started < ENGINE_AWAY_PAUSE_SECONDS:
            time.sleep(ENGINE_AWAY_PAUSE_SECONDS)
    return None


def tell(config: WatchdogConfig, container: docker_cli.TrainerContainer) -> None:
    home = config.sweeps_dir if container.kind == "sweep" else config.runs_dir
    ended = finish_uploads(config, container, home / container.run_id)
    if ended is None:
        log(f"{container.kind} {container.run_id}: its container is gone; nothing told")
        return
    container = ended
    reason = resume.why_not_resume(
        container, home / container.run_id, boot_time(config.proc_root), now_seconds()
    )
    if reason:
        state = resume.end_state(container, reason)
    elif unfinished_uploads.not_landed(container, home / container.run_id):
        state = run_ends.UPLOADS_NOT_LANDED
    else:
        state = stopped_state(container)
    log(f"{container.kind} {container.run_id} exited {container.exit_code}: {reason or state}")
    if not state:
        return
    end = run_ends.End(container, home, state)
    done = report(config, end)
    for pause in RETRY_PAUSES_SECONDS:
        if done:
            return
        log(f"{container.kind} {container.run_id}: its end is reported again in {pause} s")
        time.sleep(pause)
        done = report(config, end)


def finish_uploads(
    config: WatchdogConfig, container: docker_cli.TrainerContainer, run_dir: Path
) -> docker_cli.TrainerContainer | None:
    """A run that said it finished, its last uploads not landed, started again (its start
    uploads what storage lacks), after each of the resume unit's pauses, until it is
    down for good; the container as it last exited, None when it is gone."""

    def wanted(container: docker_cli.TrainerContainer) -> bool:
        """Not stopped by the user (`fab stop`), and its uploads still not landed."""
        booted, now = boot_time(config.proc_root), now_seconds()
        stays_down = resume.why_not_resume(container, run_dir, booted, now)
        return not stays_down and unfinished_uploads.not_landed(container, run_dir)

    for pause in resume.RETRY_DELAYS_SECONDS:
        if not wanted(container):
            return container
        log(
            f"run {container.run_id} said it finished, its last uploads not landed (exit "
            f"{container.exit_code}): started again in {pause} s to upload them"
        )
        time.sleep(pause)
        if not wanted(container):  # stopped meanwhile
            return container
        docker_cli.start(config.docker_command, container.id)
        ended = wait_for_exit(config, container.id)
        if ended is None:
            return None
        container = ended
    return container


def report(config: WatchdogConfig, end: run_ends.End) -> bool:
    """One look: the end stored where its trainer stored none, then told
    (box/run_ends.py); whether nothing is left to try (each keeps its own record of what
    was done)."""
    stored = run_ends.store_the_end(config, end, log)
    told = run_ends.tell_the_end(config, end, log)
    return stored and told


def watch(config: WatchdogConfig, container: str) -> int:
    """Watch `container` (a name or id) of ours to its end and tell it; the exit code."""
    found = docker_cli.inspect_one(config.docker_command, container)
    if found is None or found.kind not in RESUME_COMMAND:
        log(f"no run or sweep container {container!r}: nothing to watch")
        return 2
    log(f"watching {found.kind} {found.run_id} ({found.id[:12]})")
    ended = wait_for_exit(config, found.id)
    if ended is None:
        log(f"{found.kind} {found.run_id}: its container is gone; nothing told")
        return 0
    tell(config, ended)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m box.end_watch CONTAINER", file=sys.stderr)
        return 2
    # Its own session: no hangup of the shell or SSH session that started it reaches it.
    with contextlib.suppress(OSError):  # already a session leader
        os.setsid()
    config = load_config_or_say_why("glucose-end-watch")
    if config is None:
        return 2
    try:
        return watch(config, argv[0])
    except docker_cli.DockerError as error:
        log(f"ERROR: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
