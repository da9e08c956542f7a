"""A fake box for the real watchdog and resume programs.

Fake `docker`, `nvidia-smi`, `shutdown` and `aws` go first on PATH: one Python
script (FAKE_TOOL) linked under each name, reading and recording into one JSON
file. A fake /proc holds sshd session titles, a file holds the boot id, and the
clock is $GLUCOSE_WATCHDOG_NOW. The programs themselves run unchanged from
pulumi/infra/box/ in a subprocess, as systemd runs them on the VM.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

BOX_DIR = Path(__file__).resolve().parents[2] / "pulumi" / "infra" / "box"
RUN_ID_LABEL = "glucose-training.run-id"
FAKE_TOOLS = ("docker", "nvidia-smi", "shutdown", "aws")

FAKE_TOOL = """\
import json, os, sys
path = os.environ["FAKE_BOX_STATE"]
with open(path) as handle:
    box = json.load(handle)
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
box["calls"].append([tool, *args])
status = 0
if tool == "nvidia-smi":
    if box["gpu"] is None:
        print("NVIDIA-SMI has failed: couldn't communicate with the driver", file=sys.stderr)
        status = 9
    else:
        print("\\n".join(str(percent) for percent in box["gpu"]))
elif tool == "docker" and not box["docker_up"]:
    print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", file=sys.stderr)
    status = 1
elif tool == "docker" and args[0] == "info":
    print("27.3.1")
elif tool == "docker" and args[0] == "ps":
    label = args[args.index("--filter") + 1].split("=", 1)[1]
    for item in box["containers"]:
        if label in item["Config"]["Labels"] and ("-a" in args or item["State"]["Running"]):
            print(item["Id"])
elif tool == "docker" and args[0] == "inspect":
    print(json.dumps([item for item in box["containers"] if item["Id"] in args[1:]]))
elif tool == "docker" and args[0] == "start":
    for item in box["containers"]:
        if item["Id"] == args[1]:
            item["State"]["Running"] = True
with open(path, "w") as handle:
    json.dump(box, handle)
sys.exit(status)
"""


def docker_time(unix_s: float) -> str:
    """docker's own format: RFC 3339 with nanoseconds."""
    moment = datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


class FakeBox:
    def __init__(self, root: Path, *, cloud: str = "aws", metadata_url: str = "", **config):
        self.root = root
        self.bin_dir = root / "bin"
        self.proc_dir = root / "proc"
        self.box_root = root / "box"
        self.state_file = root / "fake-tools.json"
        self.config_file = root / "watchdog.json"
        self.boot_id_file = root / "boot_id"
        self._pids = itertools.count(4000)
        for directory in (self.bin_dir, self.proc_dir, self.box_root / "runs"):
            directory.mkdir(parents=True)
        tool = self.bin_dir / "fake-tool"
        tool.write_text(f"#!{sys.executable} -S\n{FAKE_TOOL}")
        tool.chmod(0o755)
        for name in FAKE_TOOLS:
            (self.bin_dir / name).symlink_to(tool)
        self._save({"calls": [], "gpu": [0], "containers": [], "docker_up": True})
        self.boot_id_file.write_text("boot-1\n")
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
        }
        self.config_file.write_text(json.dumps(settings | config))

    def _load(self) -> dict:
        return json.loads(self.state_file.read_text())

    def _save(self, tools: dict) -> None:
        self.state_file.write_text(json.dumps(tools))

    def set_gpu(self, *percent: int | None) -> None:
        """Utilisation per GPU; `set_gpu(None)` makes nvidia-smi fail like a missing driver."""
        tools = self._load()
        tools["gpu"] = None if percent == (None,) else list(percent)
        self._save(tools)

    def set_docker_up(self, up: bool) -> None:
        tools = self._load()
        tools["docker_up"] = up
        self._save(tools)

    def add_trainer(
        self, run_id: str, *, running: bool, created_at: float, exit_code: int = 0
    ) -> str:
        tools = self._load()
        container_id = f"{len(tools['containers']) + 1:064x}"
        tools["containers"].append(
            {
                "Id": container_id,
                "Name": f"/glucose-train-{run_id}",
                "Created": docker_time(created_at),
                "State": {
                    "Running": running,
                    "ExitCode": exit_code,
                    "StartedAt": docker_time(created_at + 1),
                },
                "Config": {"Labels": {RUN_ID_LABEL: run_id}},
            }
        )
        self._save(tools)
        (self.box_root / "runs" / run_id).mkdir(exist_ok=True)
        return container_id

    def write_status(self, run_id: str, **fields) -> None:
        """The trainer's runs/<run_id>/status.json (ARCHITECTURE.md keys)."""
        status = {"run_id": run_id, "state": "running", "last_checkpoint_at": None} | fields
        run_dir = self.box_root / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "status.json").write_text(json.dumps(status))

    def add_process(self, title: str) -> str:
        """A process in the fake /proc whose cmdline is `title` as sshd sets it."""
        pid = str(next(self._pids))
        (self.proc_dir / pid).mkdir()
        (self.proc_dir / pid / "cmdline").write_bytes(title.encode() + b"\0")
        return pid

    def reboot(self, boot_id: str) -> None:
        self.boot_id_file.write_text(boot_id + "\n")

    def calls(self, tool: str) -> list[list[str]]:
        return [call[1:] for call in self._load()["calls"] if call[0] == tool]

    def containers(self) -> list[dict]:
        return self._load()["containers"]

    def watchdog_state(self) -> dict:
        return json.loads((self.box_root / "watchdog" / "state.json").read_text())

    def run(
        self,
        program: str,
        *,
        now: float | None = None,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run pulumi/infra/box/<program> once, as its systemd unit would."""
        env = {
            **(env or {}),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_BOX_STATE": str(self.state_file),
            "GLUCOSE_WATCHDOG_CONFIG": str(self.config_file),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if now is not None:
            env["GLUCOSE_WATCHDOG_NOW"] = str(now)
        return subprocess.run(
            # -S: no site-packages, which also proves the box programs need none.
            [python, "-S", str(BOX_DIR / program)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def tick(self, now: float) -> subprocess.CompletedProcess:
        """One watchdog run at time `now`; fails the test if the program itself fails."""
        done = self.run("watchdog.py", now=now)
        assert done.returncode == 0, done.stderr
        return done
