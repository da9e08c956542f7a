"""Days of one AWS spot box in minutes: the cloud's stops, the box's own programs, a run.

The parts a long run meets, each as real as this machine allows:

- the cloud's stops are the schedules moto's EventBridge Scheduler holds, as `fab
  train` left them (ops.cloud.aws), fired the way Scheduler fires the two forms the
  stack uses (`schedule_fires`); EC2's persistent spot request starts an interrupted
  box again when capacity returns, and nothing starts a box stopped on purpose;
- the box runs its programs unchanged on a FakeBox, on the simulated clock: the boot
  record at each boot, the resume unit at boot and while the trainer is down, the idle
  watchdog, the stop record at each OS shutdown;
- the trainer is a stand-in that advances one step per simulated minute while its
  container runs, checkpoints every CHECKPOINT_STEPS (and on a spot notice or SIGTERM,
  as the real one does), starts from its last checkpoint, and counts its recoveries
  with the trainer's own `RunRecord.after_restart`.

The world ticks once a minute while anything may change, and every STEADY_TICK while
the trainer runs and the box is busy (the watchdog keeps its countdown across gaps up
to 10 minutes), and never past the next event.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from box.contract import RunRecord
from tests.fakes.fake_box import FakeBox

MINUTE = 60.0
HOUR = 3600.0
STEADY_TICK = 9 * MINUTE
BOOT_SECONDS = MINUTE  # power on -> the boot's units ran
SHUTDOWN_SECONDS = 30.0  # `shutdown -h now` -> EC2 says stopped
CHECKPOINT_STEPS = 30
EXIT_STOPPED = 75


def schedule_fires(schedule: dict, start: float, end: float) -> list[float]:
    """When EventBridge Scheduler runs `schedule` in [start, end): `at(...)` once, or
    `cron(M H * * ? *)` every day in its zone, from its StartDate on."""
    expression = schedule["ScheduleExpression"]
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    if expression.startswith("at("):
        at = datetime.datetime.strptime(expression[3:-1], "%Y-%m-%dT%H:%M:%S")
        fire = at.replace(tzinfo=zone).timestamp()
        return [fire] if start <= fire < end else []
    minute, hour = (int(part) for part in expression[5:-1].split()[:2])
    begins = schedule.get("StartDate")
    fires = []
    day = datetime.datetime.fromtimestamp(start, zone).date()
    while (fire := _at(day, hour, minute, zone)) < end:
        if fire >= start and (begins is None or fire >= begins.timestamp()):
            fires.append(fire)
        day += datetime.timedelta(days=1)
    return fires


def _at(day: datetime.date, hour: int, minute: int, zone: ZoneInfo) -> float:
    return datetime.datetime.combine(day, datetime.time(hour, minute), zone).timestamp()


@dataclass
class Eviction:
    at: float
    capacity_back_at: float


@dataclass
class StandInRun:
    """The run on the box: its container, its steps and its last checkpoint."""

    run_id: str
    total_steps: int
    container: str = ""
    step: int = 0
    checkpoint: int = 0
    checkpoint_base: int = 0
    """The step this start began at."""
    running_since: float | None = None
    """Simulated time the stand-in last (re)started, None while its container is down."""
    finished_at: float | None = None


@dataclass
class LongRunWorld:
    box: FakeBox
    run: StandInRun
    schedules: list[dict]
    evictions: list[Eviction] = field(default_factory=list)
    up_since: float | None = None
    billed: list[tuple[float, float]] = field(default_factory=list)
    """When EC2 billed the box: (power on, power off)."""
    stops: list[tuple[float, str]] = field(default_factory=list)
    """(when, by what) of every power off."""
    boots: int = 0
    interrupted: bool = False

    # -- the cloud --------------------------------------------------------------------

    def power_on(self, now: float) -> None:
        self.boots += 1
        self.up_since = now
        self.box.reboot(f"boot-{self.boots}", at=now)
        self._program("boot_record.py", now + BOOT_SECONDS)
        self._program("resume.py", now + BOOT_SECONDS)
        self._see_container(now + BOOT_SECONDS)

    def power_off(self, now: float, by: str) -> None:
        """The OS shuts down: docker stops the trainer (it checkpoints on the signal, as
        it does on a spot notice), then the stop record's unit runs."""
        if self.run.running_since is not None:
            self._advance(now)
            self.run.checkpoint = self.run.step
            state = "preempted" if by == "spot interruption" else "stopped"
            self._write_status(state, now, exit_code=EXIT_STOPPED)
            self.box.exit_container(self.run.container, exit_code=EXIT_STOPPED, at=now)
            self.run.running_since = None
        self._program("stop_records.py", now)
        self.billed.append((self.up_since, now + SHUTDOWN_SECONDS))
        self.stops.append((now, by))
        self.up_since = None

    # -- the run ----------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if self.run.running_since is None or self.run.finished_at is not None:
            return
        elapsed = int((now - self.run.running_since) // MINUTE)
        self.run.step = min(self.run.total_steps, self.run.checkpoint_base + elapsed)
        self.run.checkpoint = max(
            self.run.checkpoint, self.run.step - self.run.step % CHECKPOINT_STEPS
        )
        if self.run.step >= self.run.total_steps:
            self.run.finished_at = now
            self.run.running_since = None
            self._write_status("finished", now, exit_code=0)
            self.box.exit_container(self.run.container, exit_code=0, at=now)
        else:
            self._write_status("running", now)

    def _see_container(self, now: float) -> None:
        """A container the resume unit started again: the stand-in resumes from its
        checkpoint and counts the restart as the trainer does."""
        if not self.run.container:
            return
        running = next(c for c in self.box.containers() if c["Id"] == self.run.container)
        if running["State"]["Running"] and self.run.running_since is None:
            carried = self._record().after_restart(now)
            self.run.running_since = now
            self.run.checkpoint_base = self.run.checkpoint
            self.run.step = self.run.checkpoint
            self._write_status("running", now, **carried)

    def _record(self) -> RunRecord:
        return RunRecord.read(self.box.box_root / "runs" / self.run.run_id)

    def _write_status(self, state: str, now: float, **more) -> None:
        record = self._record()
        self.box.write_status(
            self.run.run_id,
            state=state,
            step=self.run.step,
            total_steps=self.run.total_steps,
            updated_at=now,
            recoveries=more.pop("recoveries", record.recoveries),
            time_lost_s=more.pop("time_lost_s", record.time_lost_s),
            **more,
        )

    def start(self, now: float, deadline: float) -> None:
        """What `fab train` leaves on the box: launch.json with the deadline, a running
        container (the box is up and busy with the start-up lease until then)."""
        run_dir = self.box.box_root / "runs" / self.run.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        launch = {"run_id": self.run.run_id, "started_at": now, "deadline": deadline}
        (run_dir / "launch.json").write_text(json.dumps(launch | {"hourly_price_usd": 1.0}))
        self.run.container = self.box.add_trainer(
            self.run.run_id, running=True, created_at=now - 1, started_at=now
        )
        self.run.running_since = now
        self.run.checkpoint_base = 0
        self._write_status("running", now)

    # -- time -------------------------------------------------------------------------

    def run_until(self, start: float, end: float) -> None:
        """Live from `start` (box up, run started) to `end`, with no one at the keyboard."""
        fires = sorted(f for s in self.schedules for f in schedule_fires(s, start, end))
        events = sorted(
            [(at, "scheduled stop") for at in fires]
            + [(e.at, "spot interruption") for e in self.evictions]
            + [(e.capacity_back_at, "capacity back") for e in self.evictions]
        )
        now = start
        while now < end:
            while events and events[0][0] <= now:
                self._event(*events.pop(0))
            if self.up_since is not None:
                self._look(now)
            steady = self.up_since is not None and self.run.running_since is not None
            step = STEADY_TICK if steady else MINUTE
            now = min(now + step, events[0][0] if events else end, end)

    def _event(self, at: float, what: str) -> None:
        if what == "capacity back":
            if self.up_since is None and self.interrupted:
                self.interrupted = False
                self.power_on(at)
            return
        if self.up_since is None:
            return
        self.interrupted = what == "spot interruption"
        self.power_off(at, what)

    def _look(self, now: float) -> None:
        """What happens on a box that is up at `now`: the run moves, the resume unit
        (while the trainer is down) and the watchdog look."""
        self._advance(now)
        if self.run.running_since is None:
            self._program("resume.py", now)
            self._see_container(now)
        shutdowns = len(self.box.calls("shutdown"))
        self._program("watchdog.py", now)
        if len(self.box.calls("shutdown")) > shutdowns:
            self.power_off(now, "idle watchdog")

    def _program(self, name: str, now: float) -> None:
        done = self.box.run(name, now=now)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
