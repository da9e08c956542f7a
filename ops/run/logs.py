"""`fab logs --run ID`: the log of a run, of a sweep's trial, or of a sweep (its driver's).

Live, it is the container's (`docker logs`; `--follow` until the container exits). What
no container holds is read from its `train.log`: in its folder on the box while the box
has it (a trial's grows there as it trains: it has no container of its own, it trains
in its sweep's), else in storage (mirrored with the run, or with the sweep's folder, so
it outlives the container and the box).

`--follow` on what no container holds shows what there is, then says so and exits 1
rather than wait: nothing `fab` could follow ends when the run does. A run or sweep
whose container is gone has ended; a trial's own end is its sweep's driver's business,
so `fab logs --follow --run SWEEP` is the live view of a sweep, its trials' starts and
ends included.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from box.contract import RUN_LOG_FILE, RUN_LOG_ROTATED
from ops.remote.boxes import AnyBox
from ops.run import on_box
from ops.run import sweep as on_box_sweep
from ops.run.ids import Named
from ops.run.on_box import ContainerState
from ops.runs import stored_log
from ops.runs.log_lines import LogLines
from ops.terminal_text import markup_safe, printable
from stack import storage_layout

console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class _Logged:
    """What a log is of: its words, its container, its folder on the box and in storage."""

    what: str
    """`run ID` or `sweep ID`."""
    container: str
    folder: str
    stored: str


def _logged(box: AnyBox, named: Named) -> _Logged:
    uri = box.target.storage_uri
    if named.is_sweep:
        return _Logged(
            f"sweep {named.id}",
            on_box_sweep.container_name(named.id),
            contract.sweep_dir(box.root, named.id),
            storage_layout.sweep_uri(uri, named.id),
        )
    return _Logged(
        f"run {named.id}",
        on_box.container_name(named.id),
        contract.run_dir(box.root, named.id),
        storage_layout.run_uri(uri, named.id),
    )


def show(box: AnyBox, named: Named, tail: str, follow: bool) -> None:
    """Print the log of what `named` names: `tail` lines (`all`, or a count), then with
    `follow` what comes, while its container runs."""
    logged = _logged(box, named)
    try:
        container = on_box.inspect_named(box, logged.container, named.id)
        if container is None:
            _without_container(box, named, logged, tail, follow)
            return
        result = _docker_logs(box, logged.container, tail, follow)
    except (OSError, EOFError) as error:
        raise Exit(_lost_box_message(box, logged.what, error)) from None
    _said(box, logged.what, result, follow, container)


def _said(box: AnyBox, what: str, result, follow: bool, container: ContainerState) -> None:
    if result.exited == -1 or box.dropped:
        raise Exit(_lost_box_message(box, what, "connection closed"))
    if result.exited != 0:
        said = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise Exit(f"no log for {what} on {box.address}: {printable(said, 300)}")
    if follow and not container.running:
        console.print(f"{what}'s container has exited ({container.exit_code}): "
                      "that is all of its log")  # fmt: skip


def _docker_logs(box: AnyBox, container: str, tail: str, follow: bool):
    """`docker logs` of the container, its stdout and stderr in one stream in the order
    docker gives them (`2>&1`: docker writes the container's stderr to its own), each
    line made safe and cut (`LogLines`) as it comes."""
    flags = f"--tail {shlex.quote(tail)}" + (" --follow" if follow else "")
    lines = LogLines(sys.stdout)
    try:
        return box.run(f"docker logs {flags} {shlex.quote(container)} 2>&1", check=False,
                       hide=False, out_stream=lines, err_stream=lines, pty=False)  # fmt: skip
    finally:
        lines.close()


def _without_container(box: AnyBox, named: Named, logged: _Logged, tail: str, follow: bool):
    """The log from the box's folder, else from storage; with --follow, said and refused
    after it."""
    holder = named.trial_line() if named.trial_of else f"{logged.what} has no container"
    if box.exists(f"{logged.folder}/{RUN_LOG_FILE}"):
        console.print(f"{holder} on {box.address}: its log from its folder there")
        _box_log(box, logged.folder, tail)
    else:
        found = stored_log.find_in(logged.stored)
        if found is None:
            raise Exit(stored_log.no_log_message(logged.what, box.address, logged.stored))
        console.print(f"{holder} on {box.address}: its log from {markup_safe(logged.stored)}")
        stored_log.show(found, tail, LogLines(sys.stdout))
    if follow and named.trial_of:
        raise Exit(
            f"--follow: {named.trial_line()}, no container of its own: above is its log as of "
            f"now; `fab logs --follow --run {named.trial_of}` follows the sweep, its trials' "
            "starts and ends included"
        )
    if follow:
        raise Exit(
            f"--follow: no container holds {logged.what} on {box.address}, so nothing adds to "
            f"its log; above is all of it (`fab status --run {named.id}` says how it ended)"
        )


def _box_log(box: AnyBox, folder: str, tail: str) -> None:
    """`train.log.1` (when kept) then `train.log` in `folder` on the box, their last
    `tail` lines, each made safe and cut as it comes."""
    files = " ".join(shlex.quote(f"{folder}/{name}") for name in (RUN_LOG_ROTATED, RUN_LOG_FILE))
    last = "" if tail == "all" else f" | tail -n {shlex.quote(tail)}"
    lines = LogLines(sys.stdout)
    try:
        box.run(f"cat {files} 2>/dev/null{last}", check=False, hide=False, out_stream=lines,
                pty=False)  # fmt: skip
    finally:
        lines.close()


def _lost_box_message(box: AnyBox, what: str, why) -> str:
    return (
        f"lost the connection to {box.address} while showing the log of {what} ({why}); "
        "the run goes on if the box does: `fab status` when it is reachable again"
    )
