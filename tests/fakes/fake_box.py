"""A fake box for the real watchdog, resume and stop-record programs.

Fake `docker`, `nvidia-smi`, `shutdown`, `aws` and `systemctl` go first on PATH: one
Python script (FAKE_TOOL) linked under each name, reading and recording into one
JSON file. A fake /proc holds processes and the boot time, a fake utmp the login records sshd
would write, a file the boot id; the wall clock is $GLUCOSE_WATCHDOG_NOW, and the boot's
own clock ($GLUCOSE_WATCHDOG_UPTIME) follows it (`step_clock` makes them part).
The programs themselves run unchanged from box/ in a subprocess, as
systemd runs them on the VM.
"""

from __future__ import annotations

import datetime
import glob
import itertools
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tests.paths import BOX_DIR

RUN_ID_LABEL = "glucose-training.run-id"
PREPARE_LABEL = "glucose-training.prepare"
SWEEP_LABEL = "glucose-training.sweep"
FAKE_TOOLS = ("docker", "nvidia-smi", "shutdown", "aws", "systemctl")
# Long before the tests' clocks (1.8e9): the box has been up all along.
BOOT_TIME = 1_700_000_000.0
# glibc's struct utmp (box/ssh_sessions.py reads the same layout).
UTMP_RECORD = struct.Struct("=hxxi32s4s32s256shhiii4i20s")
USER_PROCESS, DEAD_PROCESS = 7, 8
# What a hostile container can write into its run dir: 60 KB (under the 64 KB the box
# reads), nested 30,000 deep (past the recursion limit of Python's JSON parser).
DEEPLY_NESTED_JSON = '{"step": 5, "x": ' + "[" * 30_000 + "]" * 30_000 + "}"

FAKE_TOOL = """\
import json, os, sys, time
path = os.environ["FAKE_BOX_STATE"]
with open(path) as handle:
    box = json.load(handle)
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
box["calls"].append([tool, *args])
status = 0
if tool in box["hang"]:
    time.sleep(600)
if tool == "nvidia-smi":
    if box["gpu"] is None:
        print("NVIDIA-SMI has failed: couldn't communicate with the driver", file=sys.stderr)
        status = 9
    else:
        print("\\n".join(str(percent) for percent in box["gpu"]))
elif tool == "shutdown":
    status = box["shutdown_status"]
elif tool == "systemctl":
    print("\\n".join(box["systemd_jobs"]))
elif tool == "docker" and not box["docker_up"]:
    print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", file=sys.stderr)
    status = 1
elif tool == "docker" and args[0] == "info":
    print("27.3.1")
elif tool == "docker" and args[0] == "ps":
    label = args[args.index("--filter") + 1].split("=", 1)[1] if "--filter" in args else None
    for item in box["containers"]:
        labelled = label is None or label in item["Config"]["Labels"]
        if labelled and ("-a" in args or item["State"]["Running"]):
            print(item["Id"])
elif tool == "docker" and args[0] == "inspect":
    print(json.dumps([item for item in box["containers"] if item["Id"] in args[1:]]))
elif tool == "docker" and args[0] == "start":
    # StartedAt as docker writes it, at the caller's clock.
    now = float(os.environ.get("GLUCOSE_WATCHDOG_NOW") or time.time())
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".000000123Z"
    for item in box["containers"]:
        if item["Id"] == args[1]:
            item["State"].update(Running=True, StartedAt=started)
            run = item.pop("RunsOnStart", None)  # what the container does, then exits
            if run is not None:
                for written, text in run["writes"].items():
                    with open(written, "w") as handle:
                        handle.write(text)
                item["State"].update(Running=False, ExitCode=run["exit_code"], FinishedAt=started)
with open(path, "w") as handle:
    json.dump(box, handle)
sys.exit(status)
"""


def python_3(minor: int) -> str | None:
    """A python3.<minor> interpreter, if this machine has one."""
    candidates = [
        shutil.which(f"python3.{minor}"),
        *glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python"),
    ]
    for python in filter(None, candidates):
        # pyenv's shims exist even where they refuse to run.
        probe = [python, "-c", f"import sys; assert sys.version_info[:2] == (3, {minor})"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return python
    return None


def box_python() -> str | None:
    """Ubuntu 22.04's python3.10, the oldest python3 the box programs run on
    (box/contract.py MIN_PYTHON), if here."""
    return python_3(10)


def docker_time(unix_s: float) -> str:
    """docker's own format: RFC 3339 with nanoseconds; its zero time for 0."""
    if not unix_s:
        return "0001-01-01T00:00:00Z"
    moment = datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def utmp_record(kind: int, pid: int, tty: str, user: str, host: str = "203.0.113.7") -> bytes:
    fields = (kind, pid, tty.encode(), tty[-4:].encode(), user.encode(), host.encode())
    return UTMP_RECORD.pack(*fields, 0, 0, 0, 0, 0, 0, 0, 0, 0, b"")


class FakeBox:
    def __init__(self, root: Path, *, cloud: str = "aws", metadata_url: str = "", **config):
        self.root = root
        self.bin_dir = root / "bin"
        self.proc_dir = root / "proc"
        self.box_root = root / "box"
        self.state_file = root / "fake-tools.json"
        self.config_file = root / "watchdog.json"
        self.boot_id_file = root / "boot_id"
        self.utmp_file = root / "utmp"
        self._pids = itertools.count(4000)
        for directory in (self.bin_dir, self.proc_dir, self.box_root / "runs"):
            directory.mkdir(parents=True)
        tool = self.bin_dir / "fake-tool"
        tool.write_text(f"#!{sys.executable} -S\n{FAKE_TOOL}")
        tool.chmod(0o755)
        for name in FAKE_TOOLS:
            (self.bin_dir / name).symlink_to(tool)
        self._save(
            {
                "calls": [],
                "gpu": [0],
                "containers": [],
                "docker_up": True,
                "hang": [],
                "shutdown_status": 0,
                "systemd_jobs": [],
            }
        )
        self.reboot("boot-1", at=BOOT_TIME)
        self.utmp_file.write_bytes(b"")
        settings = {
            "cloud": cloud,
            "idle_shutdown_minutes": 3,
            "hung_trainer_minutes": 10,
            "box_root": str(self.box_root),
            "imds_url": metadata_url or "http://127.0.0.1:9",
            "arm_url": metadata_url or "http://127.0.0.1:9",
            "http_timeout_seconds": 5,
            "proc_root": str(self.proc_dir),
            "boot_id_path": str(self.boot_id_file),
            "utmp_path": str(self.utmp_file),
            "state_path": str(root / "run" / "watchdog-state.json"),
            "resume_state_path": str(root / "run" / "resume-state.json"),
        }
        self.settings = settings | config
        self.config_file.write_text(json.dumps(self.settings))

    def _load(self) -> dict:
        return json.loads(self.state_file.read_text())

    def _save(self, tools: dict) -> None:
        self.state_file.write_text(json.dumps(tools))

    def _set(self, key: str, value) -> None:
        tools = self._load()
        tools[key] = value
        self._save(tools)

    def set_gpu(self, *percent: int | None) -> None:
        """Utilisation per GPU; `set_gpu(None)` makes nvidia-smi fail like a missing driver."""
        self._set("gpu", None if percent == (None,) else list(percent))

    def set_docker_up(self, up: bool) -> None:
        self._set("docker_up", up)

    def hang(self, tool: str) -> None:
        """Make a fake tool hang, like nvidia-smi with a GPU fallen off the bus."""
        self._set("hang", [*self._load()["hang"], tool])

    def set_shutdown_status(self, status: int) -> None:
        self._set("shutdown_status", status)

    def set_systemd_jobs(self, *jobs: str) -> None:
        self._set("systemd_jobs", list(jobs))

    def add_trainer(
        self, run_id: str, *, name: str | None = None, label: str | None = None, **container
    ) -> str:
        """A trainer container (`container`: _add_container's state and times)."""
        container_id = self._add_container(
            name or f"glucose-train-{run_id}", {RUN_ID_LABEL: label or run_id}, **container
        )
        (self.box_root / "runs" / run_id).mkdir(exist_ok=True)
        return container_id

    def add_preparation(self, name: str, *, created_at: float, running: bool = True) -> str:
        """`fab prepare-data`'s container, preparing into BOX_ROOT/datasets/<name>."""
        (self.box_root / "datasets" / name).mkdir(parents=True, exist_ok=True)
        labels = {PREPARE_LABEL: name}
        return self._add_container(
            f"glucose-prepare-{name}", labels, running=running, created_at=created_at
        )

    def add_sweep(self, sweep_id: str, *, created_at: float, **container) -> str:
        """`fab sweep`'s driver container, its folder BOX_ROOT/sweeps/<id>."""
        (self.box_root / "sweeps" / sweep_id).mkdir(parents=True, exist_ok=True)
        labels = {SWEEP_LABEL: sweep_id}
        return self._add_container(
            f"glucose-sweep-{sweep_id}", labels, created_at=created_at, **container
        )

    def write_sweep_status(self, sweep_id: str, **fields) -> None:
        """The driver's sweeps/<id>/status.json (a run's keys)."""
        folder = self.box_root / "sweeps" / sweep_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "status.json").write_text(json.dumps({"state": "running", **fields}))

    def write_preparation_heartbeat(self, name: str, **fields) -> None:
        """prepare-vitaldb's datasets/<name>/.prepare/heartbeat.json."""
        work = self.box_root / "datasets" / name / ".prepare"
        work.mkdir(parents=True, exist_ok=True)
        (work / "heartbeat.json").write_text(json.dumps(fields))

    def _add_container(
        self,
        name: str,
        labels: dict,
        *,
        running: bool,
        created_at: float,
        exit_code: int = 0,
        started_at: float | None = None,
        finished_at: float = 0.0,
        restarting: bool = False,
        restart_count: int = 0,
    ) -> str:
        tools = self._load()
        container_id = f"{len(tools['containers']) + 1:064x}"
        tools["containers"].append(
            {
                "Id": container_id,
                "Name": f"/{name}",
                "Created": docker_time(created_at),
                "RestartCount": restart_count,
                "State": {
                    "Running": running or restarting,
                    "Restarting": restarting,
                    "ExitCode": exit_code,
                    "StartedAt": docker_time(created_at + 1 if started_at is None else started_at),
                    "FinishedAt": docker_time(finished_at),
                },
                "Config": {"Labels": labels},
            }
        )
        self._save(tools)
        return container_id

    def exit_container(self, container_id: str, *, exit_code: int, at: float) -> None:
        tools = self._load()
        for item in tools["containers"]:
            if item["Id"] == container_id:
                item["State"].update(Running=False, ExitCode=exit_code, FinishedAt=docker_time(at))
        self._save(tools)

    def runs_on_start(self, container_id: str, *, exit_code: int, writes: dict) -> None:
        """At its next `docker start` the container writes `writes` (path -> text) and
        exits `exit_code` at once, as a container that only uploads and ends does."""
        tools = self._load()
        for item in tools["containers"]:
            if item["Id"] == container_id:
                item["RunsOnStart"] = {
                    "exit_code": exit_code,
                    "writes": {str(k): v for k, v in writes.items()},
                }
        self._save(tools)

    def restart_by_docker(self, container_id: str, *, at: float) -> None:
        """docker's restart policy started the container again: fresh StartedAt, count + 1."""
        tools = self._load()
        for item in tools["containers"]:
            if item["Id"] == container_id:
                item["State"]["StartedAt"] = docker_time(at)
                item["RestartCount"] += 1
        self._save(tools)

    def write_status(self, run_id: str, **fields) -> None:
        """The trainer's runs/<run_id>/status.json (ARCHITECTURE.md keys)."""
        status = {"run_id": run_id, "state": "running", "last_checkpoint_at": None} | fields
        run_dir = self.box_root / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "status.json").write_text(json.dumps(status))

    def write_lease(self, name: str, **lease) -> None:
        """BOX_ROOT/leases/<name>.json as `fab train` / `fab hold` write it."""
        leases = self.box_root / "leases"
        leases.mkdir(exist_ok=True)
        (leases / f"{name}.json").write_text(json.dumps(lease))

    def _add_pid(self, comm: str, parent: int = 1, cmdline: str = "") -> int:
        pid = next(self._pids)
        entry = self.proc_dir / str(pid)
        entry.mkdir()
        (entry / "comm").write_text(comm + "\n")
        (entry / "stat").write_text(f"{pid} ({comm}) S {parent} {pid} {pid} 0 -1\n")
        (entry / "cmdline").write_bytes((cmdline or comm).encode() + b"\0")
        return pid

    def add_process(self, title: str) -> int:
        """A process whose cmdline is `title` (e.g. one that merely calls itself sshd)."""
        return self._add_pid(title.split()[0].rstrip(":"), cmdline=title)

    def add_session(self, user: str, tty: str = "pts/0") -> int:
        """A terminal session as sshd makes one: its process, a shell, a utmp record."""
        sshd = self._add_pid("sshd", cmdline=f"sshd: {user}@{tty}")
        shell = self._add_pid("bash", parent=sshd)
        with self.utmp_file.open("ab") as utmp:
            utmp.write(utmp_record(USER_PROCESS, shell, tty, user))
        return shell

    def end_session(self, pid: int) -> None:
        """sshd at logout: the record turns DEAD_PROCESS."""
        data = bytearray(self.utmp_file.read_bytes())
        for offset in range(0, len(data), UTMP_RECORD.size):
            record = UTMP_RECORD.unpack_from(data, offset)
            if record[1] == pid:
                struct.pack_into("=h", data, offset, DEAD_PROCESS)
        self.utmp_file.write_bytes(bytes(data))

    def reboot(self, boot_id: str, *, at: float | None = None) -> None:
        self.boot_id_file.write_text(boot_id + "\n")
        if at is not None:
            (self.proc_dir / "stat").write_text(f"cpu  1 2 3 4\nbtime {int(at)}\n")
            self._booted_at, self._clock_step = at, 0.0

    def step_clock(self, seconds: float) -> None:
        """The wall clock jumps by `seconds` (NTP, a person), the boot's own does not:
        from now on the uptime is `now - seconds` since the boot."""
        self._clock_step += seconds

    def calls(self, tool: str) -> list[list[str]]:
        return [call[1:] for call in self._load()["calls"] if call[0] == tool]

    def containers(self) -> list[dict]:
        return self._load()["containers"]

    @property
    def state_path(self) -> Path:
        return Path(self.settings["state_path"])

    def watchdog_state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def stops(self) -> list[dict]:
        path = self.box_root / "watchdog" / "stops.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def run(
        self,
        program: str,
        *args: str,
        now: float | None = None,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        timeout_seconds: float = 300,
    ) -> subprocess.CompletedProcess:
        """Run box/<program> once, as its systemd unit would: `python3 -m box.<program>`
        (its unit's TimeoutStartSec, 300 s, unless `timeout_seconds` says less)."""
        return subprocess.run(
            self._command(program, args, python),
            cwd=BOX_DIR.parent,
            env=self._env(now, env),
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
            check=False,
        )

    def start(self, program: str, *args: str, now: float | None = None) -> subprocess.Popen:
        """Start box/<program> as `run` does and leave it running: the test ends it (as
        systemd ends a unit at its TimeoutStartSec)."""
        return subprocess.Popen(
            self._command(program, args, sys.executable),
            cwd=BOX_DIR.parent,
            env=self._env(now, None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def _command(program: str, args: tuple[str, ...], python: str) -> list[str]:
        # -S: no site-packages, which also proves the box programs need none.
        return [python, "-S", "-m", f"box.{Path(program).stem}", *args]

    def _env(self, now: float | None, env: dict[str, str] | None) -> dict[str, str]:
        env = {
            **(env or {}),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_BOX_STATE": str(self.state_file),
            "GLUCOSE_WATCHDOG_CONFIG": str(self.config_file),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if now is not None:
            env["GLUCOSE_WATCHDOG_NOW"] = str(now)
            env["GLUCOSE_WATCHDOG_UPTIME"] = str(now - self._clock_step - self._booted_at)
        return env

    def tick(self, now: float) -> subprocess.CompletedProcess:
        """One watchdog run at time `now`; fails the test if the program itself fails."""
        done = self.run("watchdog.py", now=now)
        assert done.returncode == 0, done.stderr
        return done

    def explain(self, now: float) -> dict:
        done = self.run("watchdog.py", "--explain", now=now)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ticks_until_stop(self, start: float, *, minutes: int, between=None) -> float | None:
        """Tick once a minute from `start`; the time of the first stop request, or None.

        `between(now)` runs before each tick (to change the box as time goes on).
        """
        for minute in range(minutes + 1):
            now = start + minute * 60
            if between is not None:
                between(now)
            self.tick(now)
            if self.calls("shutdown") or self._stop_requested():
                return now
        return None

    def _stop_requested(self) -> bool:
        """An Azure deallocate leaves no shutdown call: the state says it was asked."""
        try:
            return bool(self.watchdog_state().get("stop_requested_at"))
        except OSError:
            return False


def box_with_s3(
    root: Path, moto, metadata_url: str, region: str = "us-east-1", **config
) -> tuple[FakeBox, str]:
    """(box, bucket): an AWS box whose settings name a fresh bucket of `moto` (an
    S3Emulator) as the stack's storage, its role's keys from the metadata service at
    `metadata_url`; `config`: more settings."""
    bucket = moto.create_bucket(prefix="")[len("s3://") :]
    box = FakeBox(
        root,
        metadata_url=metadata_url,
        docker_wait_seconds=1,
        storage_uri=f"s3://{bucket}",
        storage_region=region,
        storage_endpoint=moto.endpoint_url,
        **config,
    )
    return box, bucket
