"""Told when it ends on this machine and lab boxes: box/end_watch.py, started beside a run.

A box `pulumi up` made tells every run end from its resume unit (docs/notifications.md)
and stores a failed one's in storage. This machine and a lab box run no box programs,
so `fab train` and `fab sweep` start the end watch beside the container they start
where the target file sets notifyWebhook, and on this machine with its `file://` store
(the watch stores there the end of a run killed before its first upload: `fab runs`
lists it failed). The box programs (stack.box_packing's archive, one folder per build)
are copied under the box root, the watch's settings (the webhook URL: a credential, so
a 0600 file written from stdin, never on a command line) beside them, and the watch
starts detached, outliving `fab` and its SSH session. On box 0 only: rank 0's box tells
a run of several. A box without python3 (>= 3.10) gets a warning; the run still starts.
"""

from __future__ import annotations

import shlex

from box import contract
from box.watchdog_config import GUARD_DEFAULTS, WatchdogConfig
from ops.remote.ssh import Box
from ops.target import local
from stack import box_packing

PROGRAMS_DIR = "programs"
"""Under BOX_ROOT/watchdog: one folder per build of the box programs."""
SETTINGS_FILE = "end-watch.json"
LOG_FILE = "end-watch.log"
PYTHON_CHECK = f"python3 -c 'import sys; sys.exit(sys.version_info < {contract.MIN_PYTHON})'"


def wanted(box: Box) -> bool:
    """Whether `fab` starts an end watch on `box`: no resume unit reports the end there
    already, and a webhook is set or the watch can store a failed run's end (this
    machine's `file://` store)."""
    if box.target.set_up_by_cloud_init:
        return False
    return bool(box.target.notify_webhook or store_written(box))


def store_written(box: Box) -> str:
    """The storage the watch writes a failed run's end to (box/stored_end.py): this
    machine's `file://` store; "" elsewhere (a lab box's `file://` URI names a folder of
    this machine, and it has no identity of its own to write a bucket with)."""
    uri = box.target.storage_uri
    return uri if box.target.this_machine and local.file_storage_dir(uri) else ""


def settings_json(box: Box) -> str:
    """The watch's settings: the watchdog's format, with what it reads of it."""
    return WatchdogConfig(
        "local",
        GUARD_DEFAULTS["idle_shutdown_minutes"],
        box_root=box.root,
        notify_webhook=box.target.notify_webhook,
        storage_uri=store_written(box),
    ).to_json()


def start(box: Box, container: str, what: str) -> str:
    """Start the end watch of `container` (the run's or sweep's, named `what`) on `box`;
    the line that tells the user what to expect. Never raises: the run has started, and
    a watch that cannot start is a warning, not a failed `fab train`."""
    if box.run(PYTHON_CHECK, check=False).exited != 0:
        return _not_watched(
            box, what, f"no python3 >= {'.'.join(map(str, contract.MIN_PYTHON))} there"
        )
    home = f"{box.root}/{contract.WATCHDOG_DIR}"
    programs = box_packing.build_programs()
    folder = f"{home}/{PROGRAMS_DIR}/{programs.sha256[:16]}"
    settings = f"{home}/{SETTINGS_FILE}"
    # A folder per build: a watch already running keeps the files it started from.
    copied, said = box.run_with_input(
        f"mkdir -p {shlex.quote(f'{home}/{PROGRAMS_DIR}')} && "
        f"if test -d {shlex.quote(folder)}; then cat > /dev/null; else "
        f"partial=$(mktemp -d {shlex.quote(folder)}.XXXXXX) && "
        f'tar -xf - -C "$partial" && mv "$partial" {shlex.quote(folder)}; fi',
        programs.text,
        check=False,
    )
    if copied == 0:
        copied, said = box.run_with_input(
            f"umask 077 && rm -f {shlex.quote(settings)} && cat > {shlex.quote(settings)}",
            settings_json(box),
            check=False,
        )
    if copied != 0:
        return _not_watched(box, what, f"cannot write {home}: {said.strip()[-200:]}")
    # Only the watch goes to the background, every stream of it redirected: `cd X && W &`
    # would background a shell holding the session's streams, and `fab` (invoke, SSH)
    # would wait on them until the run ended.
    # umask 077: its log (and anything it writes) is its owner's alone.
    log = shlex.quote(f"{home}/{LOG_FILE}")
    box.run(
        f"cd {shlex.quote(folder)} || exit 1; umask 077; touch {log} && chmod 600 {log} || exit 1; "
        f"GLUCOSE_WATCHDOG_CONFIG={shlex.quote(settings)} "
        f"nohup python3 -m {box_packing.PACKAGE}.end_watch {shlex.quote(container)} "
        f">> {log} 2>&1 < /dev/null &"
    )
    if box.target.notify_webhook:
        return f"told when it ends: {what}'s end goes to notifyWebhook ({box.address} watches it)"
    return f"watched to its end: if {what} dies before its first upload, `fab runs` lists it failed"


def _not_watched(box: Box, what: str, why: str) -> str:
    where = "notifyWebhook" if box.target.notify_webhook else "`fab runs` if it fails early"
    return (
        f"WARNING: {box.address} cannot watch {what} ({why}), so its end will not reach "
        f"{where}; `fab status` says how it ended"
    )
