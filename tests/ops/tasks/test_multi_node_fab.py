"""`fab train`, `status`, `logs`, `stop` on a stack of two boxes: box 0 reached
directly, box 1 only through it (real sshds, tests/ops/conftest.py), each box with a
`docker` stand-in on its PATH that keeps its containers in a file and records every
call: what each box is told to run, precisely, and in which order."""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.run.look import OTHER_BOX_WAIT_SECONDS
from tests.fixtures.sshd import start_sshd
from tests.ops.conftest import LocalBox, TwoBoxes, make_local_box, start_two_boxes

# A box's docker CLI: `run --detach` makes a running container, `stop` ends it with
# exit 75 (the trainer's checkpointed stop), `inspect`/`ps`/`logs` report them.
BOX_DOCKER = """#!{python}
import json, sys, time
from pathlib import Path
here = Path({here!r})
state_file = here / "containers.json"
containers = json.loads(state_file.read_text()) if state_file.exists() else {{}}
args = sys.argv[1:]
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps({{"argv": args, "at": time.time()}}) + "\\n")
def save():
    state_file.write_text(json.dumps(containers))
if args[0] == "run" and "--detach" in args:
    name = args[args.index("--name") + 1]
    run_id = args[args.index("--label") + 1].split("=", 1)[1]
    containers[name] = {{"run_id": run_id, "running": True, "exit": 0}}
    save()
    print("c0ffee")
elif args[0] == "run":
    print("dataset verified: 4 files")
elif args[0] == "inspect":
    found = containers.get(args[-1])
    if found is None:
        sys.exit(1)
    state = {{"Running": found["running"], "Restarting": False, "ExitCode": found["exit"]}}
    print(json.dumps([{{"State": state, "RestartCount": 0}}]))
elif args[0] == "ps":
    everyone = "--all" in args
    print("\\n".join(c["run_id"] for c in containers.values() if everyone or c["running"]))
elif args[0] == "stop":
    containers[args[-1]].update(running=False, exit=75)
    save()
elif args[0] == "logs":
    print(f"log of {{args[-1]}} on box {box}")
"""


@dataclass
class Stack:
    """Two boxes with a docker stand-in each; `fab` pointed at the stack."""

    boxes: TwoBoxes
    bins: list[Path]

    @property
    def fab(self):
        return self.boxes.stack.fab

    def calls(self, node: int) -> list[dict]:
        log = self.bins[node] / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def started(self, node: int) -> list[dict]:
        """The trainer containers box `node` was told to start."""
        return [c for c in self.calls(node) if c["argv"][:2] == ["run", "--detach"]]


def _box_docker(directory: Path, node: int) -> Path:
    directory.mkdir()
    script = directory / "docker"
    script.write_text(BOX_DOCKER.format(python=sys.executable, here=str(directory), box=node))
    script.chmod(0o755)
    return directory


def _path(bin_dir: Path) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"}


@pytest.fixture
def stack(tmp_path: Path, recording_tool) -> Stack:
    recording_tool("docker")  # the laptop's: the image counts as built
    bins = [_box_docker(tmp_path / f"box-{node}-bin", node) for node in (0, 1)]
    server = start_sshd(tmp_path / "sshd-box-0", _path(bins[0]))
    box_0: LocalBox = make_local_box(server, tmp_path)
    boxes = start_two_boxes(box_0, tmp_path, _path(bins[1]))
    _store_dataset(box_0, "tiny")
    yield Stack(boxes, bins)
    boxes.box_1.stop()
    server.stop()


def _store_dataset(box: LocalBox, name: str) -> None:
    """What `fab train` looks for in storage first: the dataset's manifest (the boxes'
    docker stand-ins fake its fetch)."""
    storage = json.loads(box.target_file.read_text())["storageUri"].removeprefix("file://")
    folder = Path(storage) / "datasets" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text('{"files": {}}\n')


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_fab_train_status_logs_stop_on_two_boxes(stack: Stack) -> None:
    _ok(stack.fab("train", "--dataset", "tiny", "--run", "r2", "--max-steps", "5",
                  "--image-name", "glucose-training:t"))  # fmt: skip
    _assert_started_box_0_then_box_1_each_with_its_part(stack)
    _assert_status_is_rank_0s_with_a_line_per_other_box(stack)
    assert _ok(stack.fab("logs", "--run", "r2", "--node", "1")).strip() == (
        "log of glucose-train-r2 on box 1"
    )
    assert _ok(stack.fab("logs", "--run", "r2")).strip() == "log of glucose-train-r2 on box 0"
    _assert_stop_marks_every_box_then_stops_box_0_first(stack)


def _assert_started_box_0_then_box_1_each_with_its_part(stack: Stack) -> None:
    (box_0,), (box_1,) = stack.started(0), stack.started(1)
    assert box_0["at"] < box_1["at"]  # box 0 serves the rendezvous
    for node, call in enumerate((box_0, box_1)):
        argv = call["argv"]
        assert _value(argv, "--network") == "host"
        assert [a for a in argv if a.startswith("--add-host=")] == [
            "--add-host=glucose-node-00:127.0.0.1",
            "--add-host=glucose-node-01:127.0.0.2",
        ]
        torchrun = argv[argv.index("glucose-training:t") + 1 :]
        assert torchrun[:2] == ["launch", "--"]
        assert _value(torchrun, "--nnodes") == "2" and _value(torchrun, "--nproc-per-node") == "1"
        assert _value(torchrun, "--rdzv-endpoint") == "127.0.0.1:29400"
        assert _value(torchrun, "--rdzv-id") == "r2"
        assert _value(torchrun, "--local-addr") == f"glucose-node-0{node}"
        assert _value(torchrun, "--rdzv-conf") == f"is_host={'true' if node == 0 else 'false'}"
        assert torchrun[-2:] == ["--max-steps", "5"]
        assert "--gpus" not in argv  # a CPU stack: gloo
    # Every box caches the dataset (every rank reads it) and keeps the launch record (its
    # resume unit reads the run's deadline there); box 0's is the run's.
    for node in (0, 1):
        assert [c for c in stack.calls(node) if c["argv"][:2] == ["run", "--rm"]]
    roots = stack.boxes.roots
    record = json.loads((roots[0] / "runs" / "r2" / "launch.json").read_text())
    assert (record["boxes"], record["world_size"]) == (2, 2)
    other = json.loads((roots[1] / "runs" / "r2" / "launch.json").read_text())
    assert other["deadline"] == record["deadline"]
    for root in roots:  # the start-up leases are gone once the trainers run
        assert list((root / "leases").iterdir()) == []


def _assert_status_is_rank_0s_with_a_line_per_other_box(stack: Stack) -> None:
    roots = stack.boxes.roots
    status = {"state": "running", "step": 40, "total_steps": 100, "updated_at": 1}
    (roots[0] / "runs" / "r2" / "status.json").write_text(json.dumps(status))
    (roots[1] / "runs" / "r2" / "heartbeat.json").write_text('{"step": 40, "updated_at": 1}')
    out = _ok(stack.fab("status", "--run", "r2"))
    assert "step 40 / 100" in out
    node_line = next(line for line in out.splitlines() if line.startswith("node 1:"))
    assert "running, step 40 (" in node_line and "127.0.0.2" in node_line
    assert "via 127.0.0.1" in node_line


def _assert_stop_marks_every_box_then_stops_box_0_first(stack: Stack) -> None:
    out = _ok(stack.fab("stop", "--run", "r2"))
    assert "run r2 stopped (exit 75)" in out
    stops = [[c for c in stack.calls(node) if c["argv"][0] == "stop"] for node in (0, 1)]
    assert [len(s) for s in stops] == [1, 1] and stops[0][0]["at"] < stops[1][0]["at"]
    for root in stack.boxes.roots:
        marker = root / "runs" / "r2" / "STOPPED_BY_USER"
        assert marker.exists() and marker.stat().st_mtime < stops[0][0]["at"]


def test_fab_hold_holds_every_box_and_hold_0_releases_them(stack: Stack) -> None:
    _ok(stack.fab("hold", "2h"))
    leases = [root / "leases" / "hold.json" for root in stack.boxes.roots]
    assert [json.loads(lease.read_text())["minutes"] for lease in leases] == [120, 120]
    _ok(stack.fab("hold", "0"))
    assert not any(lease.exists() for lease in leases)


@pytest.mark.e2e
def test_a_box_that_is_down_holds_up_neither_status_nor_the_stop_of_box_0(stack: Stack) -> None:
    _ok(stack.fab("train", "--dataset", "tiny", "--run", "r3", "--image-name", "img:t"))
    stack.boxes.box_1.stop()  # box 1 evicted: nothing answers at its address
    stack.boxes.stack.env["GLUCOSE_BOOT_WAIT_SECONDS"] = "600"  # as on a laptop
    # Each returns after a short wait for box 1, not the 10-minute boot wait.
    within = 3 * OTHER_BOX_WAIT_SECONDS
    status = _ok(stack.fab("status", "--run", "r3", timeout=within))
    assert re.search(r"node 1: +unreachable: box \S+@127\.0\.0\.2:\d+ via 127\.0\.0\.1", status)
    stopped = stack.fab("stop", "--run", "r3", timeout=within)
    assert "run r3 stopped (exit 75)" in _ok(stopped)
    assert "its part of the run ends with box 0's" in stopped.stderr
    assert [c for c in stack.calls(0) if c["argv"][0] == "stop"]
    assert (stack.boxes.roots[0] / "runs" / "r3" / "STOPPED_BY_USER").exists()


def test_stop_of_a_waiting_run_with_a_box_down_says_which_boxes_got_the_record(
    stack: Stack,
) -> None:
    _ok(stack.fab("train", "--dataset", "tiny", "--run", "r4", "--image-name", "img:t"))
    for node in (0, 1):  # both parts exited 75: the resume units would start them again
        state_file = stack.bins[node] / "containers.json"
        containers = json.loads(state_file.read_text())
        containers["glucose-train-r4"].update(running=False, exit=75)
        state_file.write_text(json.dumps(containers))
    stack.boxes.box_1.stop()  # box 1 evicted

    stopped = stack.fab("stop", "--run", "r4", timeout=3 * OTHER_BOX_WAIT_SECONDS)

    assert "run r4 was not running (exited 75" in _ok(stopped)
    assert re.search(r"stop recorded on box 0 \(\S+@127\.0\.0\.1:\d+\):", stopped.stderr)
    assert re.search(
        r"box 1: stop NOT recorded \(unreachable: box \S+@127\.0\.0\.2", stopped.stderr
    )
    assert (stack.boxes.roots[0] / "runs" / "r4" / "STOPPED_BY_USER").exists()


def test_one_box_of_two_gpus_runs_torchrun_with_docker_s_own_network(tmp_path, recording_tool):
    recording_tool("docker")
    bin_dir = _box_docker(tmp_path / "box-bin", 0)
    server = start_sshd(tmp_path / "sshd", _path(bin_dir))
    try:
        box = make_local_box(server, tmp_path)
        box.write_target(gpuCount=2)
        _store_dataset(box, "tiny")
        _ok(box.fab("train", "--dataset", "tiny", "--run", "g2", "--image-name", "img:t"))
    finally:
        server.stop()
    calls = [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]
    (argv,) = [c["argv"] for c in calls if c["argv"][:2] == ["run", "--detach"]]
    assert "--network" not in argv and _value(argv, "--gpus") == "all"
    torchrun = argv[argv.index("img:t") + 1 :]
    assert torchrun[:5] == ["launch", "--", "--nproc-per-node", "2", "--standalone"]
    assert shlex.join(torchrun).count("-m trainer train") == 1
