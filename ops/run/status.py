"""`fab status`: one screen about a run, from what the box has on disk and in docker.

Sources: the trainer's status.json (ARCHITECTURE.md), the last line of metrics.jsonl,
the container's state (exit code, restarts), nvidia-smi when the box has it,
launch.json (written by `fab train`) for the time and price the run started with,
and the box's idle watchdog: its state (countdown, leases, a stop that failed), its
records of boots and stops. The dollars are each box's up time while the run's trainer
ran (`trainer.reports.cost`), so a box stopped overnight, a run that ended and the hours
a stopped run waits cost nothing; a moment the run shared the box with other runs (a
sweep's trials) is split evenly between them.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from invoke.exceptions import Exit

from box import contract
from box.contract import (
    STATE_FINISHED,
    STATE_RUNNING,
    STATE_UPLOAD_PENDING,
    LaunchRecord,
    RunRecord,
)
from ops.data import box_copy
from ops.remote.ssh import Box
from ops.run import on_box
from ops.run.on_box import ContainerState
from ops.runs import upload_pending
from ops.runs.readable import duration, log_sentence, money
from ops.terminal_text import printable
from stack.config import MAX_NODE_COUNT
from trainer.reports import cost

NVIDIA_QUERY = (
    "nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total "
    "--format=csv,noheader,nounits"
)
SECONDS_PER_HOUR = 3600
# The boot records, the stop records and the boot the box is in, in one round trip.
RECORDS = (
    'cd "$0" 2>/dev/null && cat {boots} 2>/dev/null; echo ---; cat {stops} 2>/dev/null; '
    "echo ---; cat /proc/sys/kernel/random/boot_id; awk '/^btime/ {{print $2}}' /proc/stat"
)
# Each run dir in $0: its name and its status.json (at most 64 KiB, base64: the box's
# files are untrusted), a line each.
RUN_STATUSES = (
    'cd "$0" 2>/dev/null || exit 0; for d in */; do [ -d "$d" ] || continue; '
    'printf "%s " "${{d%/}}"; head -c 65536 "${{d}}{status}" 2>/dev/null | base64 -w0; echo; done'
)


@dataclass(frozen=True)
class BoxSnapshot:
    """The box's guard rails: the watchdog's state and the last stop it recorded; and
    when the box was up (its boot and stop records, and the boot it is in)."""

    watchdog: dict
    last_stop: dict
    uptime: tuple[cost.Uptime, ...] = ()
    problems: tuple[str, ...] = ()
    """What of the box's records could not be read, a line each."""


@dataclass(frozen=True)
class RunSnapshot:
    """Everything `status` prints, read from the box at one moment."""

    run_id: str
    state: str
    status: RunRecord
    last_metrics: dict
    gpus: list[str]
    launch: LaunchRecord
    box: BoxSnapshot
    now: float
    others: tuple[BoxSnapshot | None, ...] = ()
    """Boxes 1..N-1 of a multi-box run, None where one did not answer."""
    live: bool = False
    """Its container runs now: only then do its dollars count until now."""
    runs: dict[str, RunRecord] = field(default_factory=dict)
    """The status.json of each run on box 0, which share the box with this one (a
    sweep's trials among them: `cost.sharing_spans`)."""
    problems: tuple[str, ...] = ()
    """What of the run's files could not be read: a line per file, each key it held
    that its record cannot read (`updated_at is NaN, not a finite number`)."""
    address: str = "the box"
    """Box 0 as `fab` names it ("this machine" on the local target)."""

    def cost(self, hourly_price_usd: float) -> cost.RunCost | None:
        """Each box's up time during the spans the run's trainer ran (the last until now
        while its container runs), at the price in force at launch; None without a
        launch record. A container that is not running (stopped, preempted, killed with
        its status still `running`) adds nothing past its last word. A run shares each
        moment of the box with the other runs (a sweep's trials too) running then, as
        its summary's `cost_usd` does (`cost.box_run_cost`)."""
        started = self.launch.started_at
        price = self.launch.hourly_price_usd
        price = hourly_price_usd if price is None else price
        if started is None:
            return None
        spans = cost.ran_spans(self.status, self.now if self.live else None)
        if not spans:  # a run from before status.json kept its spans
            last_word = min(self.now, self.status.updated_at or self.now)
            spans = [(float(started), self.now if self.live else last_word)]
        boxes = [self.box, *self.others]
        count = self.launch.boxes  # launch.json is the run dir's: no more than a stack has
        count = count if count and 0 < count <= MAX_NODE_COUNT else len(boxes)
        uptimes = [list((box or self.box).uptime) for box in boxes][:count]
        uptimes += [list(self.box.uptime)] * (count - len(uptimes))
        others = cost.sharing_spans(self.run_id, self.runs)
        prices = cost.launch_prices(self.launch)
        return cost.run_cost(uptimes, spans, float(price), others, prices)


def json_or_empty(text: str | bytes | None) -> dict:
    """The object `text` holds; {} for none, a torn file, one nested too deep or another
    shape (a box's or a bucket's file: never trusted to be ours)."""
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):  # torn, or nested past what json follows
        return {}
    return value if isinstance(value, dict) else {}


NOT_STARTED = "not started"
"""A run the box holds no container or record of."""


def describe_state(
    container: ContainerState | None,
    status: RunRecord,
    stopped_by_user: bool,
    restarts: bool = True,
) -> str:
    """running / preempted-waiting / stopped / finished / finished-upload-pending /
    failed (exit N) / not started. `restarts`: the box's resume unit starts a run that
    exited 75 again (a box `pulumi up` made); elsewhere nothing does. A run that said it
    finished is never called failed: killed in its last uploads (exit 137), its container
    is started again to send them (STATE_UPLOAD_PENDING, as the box judges it)."""
    if container is None:
        return status.state or NOT_STARTED
    if container.running:
        return STATE_RUNNING
    if container.restarting:
        return "restarting (an old container under docker's restart policy)"
    if status.uploads_unsettled(container.exit_code):
        return STATE_UPLOAD_PENDING
    if container.exit_code == 0:
        return STATE_FINISHED
    if container.exit_code == contract.EXIT_STOPPED:
        if stopped_by_user:
            return "stopped by `fab stop` (checkpoint saved; `fab train --run ID` resumes)"
        if not restarts:
            return (
                "stopped (exit 75, checkpoint saved; nothing restarts it here: "
                "`fab train --run ID` resumes)"
            )
        return "preempted-waiting (resumes when the box is back)"
    if container.exit_code == contract.EXIT_BOXES_AWAY:
        return (
            "waiting for its other boxes (they did not meet in time: one is away, evicted "
            "or stopped; the box tries again every minute until the deadline, for at most "
            "peerWaitMinutes a boot, then stops itself)"
        )
    if container.exit_code == contract.EXIT_USER_ERROR:
        return "failed (exit 2: bad flags or dataset; see `fab logs`)"
    return f"failed (exit {container.exit_code}; see `fab logs`)"


def uploads_waiting(box: Box, run_id: str) -> str:
    """A run that finished, its last uploads not all landed: the files of its run dir on
    `box` that storage lacks, where they wait, and what sends them."""
    where = box.location(contract.run_dir(box.root, run_id))
    restarts = box.target.set_up_by_cloud_init
    try:
        missing = box_copy.not_in_storage(box, run_id)
    except Exception as error:  # storage down, or the box's listing: not which files, no more
        unknown = upload_pending.said(None, run_id, restarts, where)
        return f"{unknown} (storage did not say which files it lacks: {type(error).__name__})"
    return upload_pending.said(missing, run_id, restarts, where)


def node_line(box: Box, run_id: str) -> str:
    """Box K > 0 of a multi-node run: its container, and the step its heartbeat saw."""
    run_dir = contract.run_dir(box.root, run_id)
    container = on_box.inspect_container(box, run_id)
    heartbeat = RunRecord.parse(box.read_text(f"{run_dir}/{contract.HEARTBEAT_FILE}"))
    stopped_by_user = box.exists(f"{run_dir}/{contract.STOPPED_BY_USER}")
    state = describe_state(container, heartbeat, stopped_by_user, box.target.set_up_by_cloud_init)
    seen = f", step {heartbeat.step}" if heartbeat.step is not None else ""
    return f"node {box.node}:     {state}{seen} ({box.address}; `fab logs --node {box.node}`)"


def snapshot(box: Box, run_id: str, others: list[Box] | tuple[Box, ...] = ()) -> RunSnapshot:
    """Box 0's view of the run; `others` (boxes 1..N-1) add their up time for the cost."""
    run_dir = contract.run_dir(box.root, run_id)
    container = on_box.inspect_container(box, run_id)
    status, status_problems = RunRecord.checked(box.read_text(f"{run_dir}/{contract.STATUS_FILE}"))
    launch, launch_problems = LaunchRecord.checked(
        box.read_text(f"{run_dir}/{contract.LAUNCH_FILE}")
    )
    metrics_tail = box.run(
        f"tail -n 1 {shlex.quote(run_dir)}/{contract.METRICS_FILE} 2>/dev/null", check=False
    ).stdout
    gpus = box.run(NVIDIA_QUERY, check=False)
    stopped_by_user = box.exists(f"{run_dir}/{contract.STOPPED_BY_USER}")
    state = describe_state(container, status, stopped_by_user, box.target.set_up_by_cloud_init)
    return RunSnapshot(
        run_id=run_id,
        state=uploads_waiting(box, run_id) if state == STATE_UPLOAD_PENDING else state,
        status=status,
        last_metrics=json_or_empty(metrics_tail.strip()),
        gpus=gpus.stdout.strip().splitlines() if gpus.exited == 0 else [],
        launch=launch,
        box=box_snapshot(box),
        now=time.time(),
        others=tuple(_reachable_snapshot(other) for other in others),
        live=container is not None and container.running,
        runs=run_statuses(box),
        problems=_per_file(
            (contract.STATUS_FILE, status_problems), (contract.LAUNCH_FILE, launch_problems)
        ),
        address=box.address,
    )


def _per_file(*found: tuple[str, list[str]]) -> tuple[str, ...]:
    """One line per file with problems, naming it: `status.json: eta_s is NaN, ...`."""
    return tuple(f"{name}: {'; '.join(problems)}" for name, problems in found if problems)


def run_statuses(box: Box) -> dict[str, RunRecord]:
    """The status of each run on the box, read in one round trip."""
    runs = f"{box.root}/{contract.RUNS_DIR}"
    script = RUN_STATUSES.format(status=contract.STATUS_FILE)
    found = box.run(f"bash -c {shlex.quote(script)} {shlex.quote(runs)}", check=False)
    statuses = {}
    for line in found.stdout.splitlines():
        run_id, _, encoded = line.partition(" ")
        try:
            statuses[run_id] = RunRecord.parse(base64.b64decode(encoded, validate=True))
        except ValueError:  # not base64: a line this script did not write
            continue
    return statuses


def _reachable_snapshot(box: Box) -> BoxSnapshot | None:
    try:
        return box_snapshot(box)
    except Exit:
        return None


def box_snapshot(box: Box) -> BoxSnapshot:
    # state.json links to the watchdog's state on /run (box/setup-box.sh).
    records = f"{box.root}/{contract.WATCHDOG_DIR}"
    script = RECORDS.format(boots=contract.BOOTS_FILE, stops=contract.STOPS_FILE)
    found = box.run(f"bash -c {shlex.quote(script)} {shlex.quote(records)}", check=False)
    boots, stops, current = [*found.stdout.split("---\n"), "", "", ""][:3]
    stop_records = cost.records(stops)
    try:
        uptime = tuple(cost.uptimes(cost.records(boots), stop_records, _current_boot(current)))
        problems: tuple[str, ...] = ()
    except Exception as error:  # the box's records: a hostile one costs its up time, no more
        uptime = ()
        problems = (f"{contract.BOOTS_FILE}, {contract.STOPS_FILE}: {type(error).__name__}",)
    return BoxSnapshot(
        watchdog=json_or_empty(box.read_text(f"{records}/state.json")),
        last_stop=stop_records[-1] if stop_records else {},
        uptime=uptime,
        problems=problems,
    )


def _current_boot(text: str) -> tuple[str, float] | None:
    lines = text.split()
    try:
        return lines[0], float(lines[1])
    except (IndexError, ValueError):
        return None


def clock(unix_s: float, now: float) -> str:
    """HH:MM in local time, with the date when it is not today."""
    moment = time.localtime(unix_s)
    same_day = time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d", time.localtime(now))
    return time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", moment)


def watchdog_line(state: dict, now: float) -> str | None:
    """The box's idle watchdog (box/watchdog.py) in a line, when it runs."""
    if not state:
        return None
    if state.get("stop_failures"):
        since = state.get("stop_requested_at")
        return (
            f"watchdog:   STILL BILLED: stopping the box failed {state['stop_failures']} "
            f"time(s) (last: {state.get('stop_error')}); it retries by itself"
            + (f", trying since {clock(since, now)}" if isinstance(since, (int, float)) else "")
            + "; stop it by hand (`az vm deallocate` / `aws ec2 stop-instances`) if it persists"
        )
    if state.get("busy_reasons"):
        return f"watchdog:   box busy ({', '.join(state['busy_reasons'])})"
    if isinstance(state.get("stop_at"), (int, float)):
        left_minutes = max(state["stop_at"] - now, 0) / 60
        return f"watchdog:   box idle; it stops itself (and its bill) in {left_minutes:.0f} min"
    return None


def lease_lines(state: dict, now: float) -> list[str]:
    """Leases the watchdog honoured at its last look: `fab hold`, a `fab train` start-up."""
    lines = []
    for lease in (state.get("signals") or {}).get("leases") or []:
        until = lease.get("until")
        if not isinstance(until, (int, float)) or until <= now:
            continue
        when = clock(until, now)
        if lease.get("name") == contract.HOLD_LEASE:
            lines.append(f"hold:       box held up until {when} (`fab hold 0` ends it)")
        else:
            lines.append(f"lease:      {lease.get('reason') or lease.get('name')}, until {when}")
    return lines


def last_stop_line(record: dict, now: float) -> str | None:
    """Why the box last stopped, as the box recorded it (box/stop_records.py)."""
    at, summary = record.get(contract.RECORD_AT), record.get(contract.STOP_SUMMARY)
    if not isinstance(at, (int, float)) or not summary:
        return None
    return f"last stop:  {clock(at, now)} {summary}"


def box_lines(snap: BoxSnapshot, now: float) -> list[str]:
    """The box's guard rails in lines, each made safe to print (`printable`: what the
    watchdog recorded is the box's to write)."""
    lines = [
        *_shown("watchdog", lambda: [watchdog_line(snap.watchdog, now)]),
        *_shown("leases", lambda: lease_lines(snap.watchdog, now)),
        *_shown("last stop", lambda: [last_stop_line(snap.last_stop, now)]),
        *[f"unread:     {problem}" for problem in snap.problems],
    ]
    return [printable(line) for line in lines if line]


def _shown(what: str, build: Callable[[], list[str | None]]) -> list[str | None]:
    """`build()`'s lines; where a record it reads holds what no line can say (a time no
    clock shows, a list where a word goes), one line that says `what` is left out:
    one record never hides the rest of the view."""
    try:
        return build()
    except Exception as error:  # the box's and the run's files: anything at all
        return [f"{what}: not shown, its record cannot be read ({type(error).__name__})"]


def cost_lines(
    snap: RunSnapshot, hourly_price_usd: float, spot: bool, unbilled: str | None = None
) -> list[str]:
    """What the run's boxes billed while its trainer ran and, while it runs, to its ETA;
    `unbilled`: why the target's boxes cost nothing (`guard_rails.unbilled_note`), said
    beside the $0.00 that `fab runs` shows too."""
    spent = snap.cost(hourly_price_usd)
    if unbilled and (spent is None or spent.hourly_price_usd <= 0):
        return [f"cost:       {money(0.0)} ({unbilled})"]
    if spent is None:
        return ["cost:       unknown (no launch record: `fab train` did not start this run)"]
    if spent.hourly_price_usd <= 0:
        return ["cost:       unknown (its launch record holds no hourly price)"]
    kind = "spot" if spot else "on-demand"
    hours = ", ".join(f"box {n} {duration(s)}" for n, s in enumerate(spent.box_seconds))
    so_far = "so far" if snap.state == STATE_RUNNING else "in all (the run is not running)"
    lines = [
        f"cost:       {money(spent.usd)} {so_far}: up {hours} while its trainer ran, at "
        f"{money(spent.hourly_price_usd)}/h {kind} a box"
    ]
    eta = snap.status.eta_s
    if snap.state == STATE_RUNNING and eta is not None:
        boxes = len(spent.box_seconds)
        projected = spent.usd + eta / SECONDS_PER_HOUR * spent.hourly_price_usd * boxes
        lines.append(f"projected:  {money(projected)} for the whole run (ETA {duration(eta)})")
    return lines


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def render(
    snap: RunSnapshot, hourly_price_usd: float, spot: bool, unbilled: str | None = None
) -> str:
    """The run's lines, then the box's: each a line, made safe to print (`printable`);
    `unbilled`: why the target's boxes cost nothing (`cost_lines`)."""
    lines = [
        f"run:        {snap.run_id}",
        f"state:      {snap.state}",
        *_shown("progress", lambda: _progress_lines(snap)),
    ]
    if snap.last_metrics:
        lines += _shown("last log", lambda: [f"last log:   {log_sentence(snap.last_metrics)}"])
    lines += _shown("gpu", lambda: _gpu_lines(snap.gpus, snap.address))
    lines += _shown("cost", lambda: cost_lines(snap, hourly_price_usd, spot, unbilled))
    lines += [f"unread:     {problem}" for problem in snap.problems]
    run_lines = [printable(line) for line in lines if line]
    return "\n".join([*run_lines, *box_lines(snap.box, snap.now)])


def _progress_lines(snap: RunSnapshot) -> list[str]:
    s = snap.status
    # An ETA is a running run's: a stopped one's last estimate would read as a promise.
    eta = s.eta_s if snap.live and snap.state == STATE_RUNNING else None
    lines = [
        f"progress:   epoch {_fmt(s.epoch, 'd')}, step {_fmt(s.step, 'd')}"
        f" / {_fmt(s.total_steps, 'd')}",
        f"train loss: {_fmt(s.train_loss, '.4f')}   val MAE: {_fmt(s.val_mae, '.2f')} mg/dL",
        f"speed:      {_fmt(s.windows_per_s, ',.0f')} windows/s"
        + (f"   ETA: {duration(eta)}" if eta is not None else ""),
    ]
    if s.updated_at is not None:
        lines.append(f"updated:    {duration(snap.now - s.updated_at)} ago")
    if s.recoveries:
        lines.append(
            f"recovered:  {s.recoveries} time(s) after a stop it did not ask for "
            f"(eviction, host failure, a daily stop); {duration(s.time_lost_s or 0)} lost"
        )
    return lines


def _gpu_lines(gpus: list[str], address: str) -> list[str]:
    lines = []
    for gpu in gpus:
        index, name, util, used, total = (part.strip() for part in gpu.split(","))
        lines.append(f"gpu {index}:      {name}: {util}% busy, {used}/{total} MiB")
    return lines or [f"gpu:        none (no nvidia-smi on {address})"]
