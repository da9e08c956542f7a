"""`python -m trainer launch`: torchrun in the container, exiting as one trainer would
(0 finished, 75 stopped, 2 user error), on a box with rank 0 and on a box without.
Real torchrun on CPU (gloo); the exit-code mapping itself first, as a table."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from box.contract import (
    EXIT_BOXES_AWAY,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_STOPPED,
    EXIT_UNWRITABLE,
    EXIT_USER_ERROR,
    RunRecord,
)
from tests.trainer.ddp_process import free_port, launcher, worker_pid
from tests.trainer.trainer_process import output_of, status_of, wait_for_exit, wait_for_step
from trainer.__main__ import main
from trainer.loop.launcher import box_record, exit_code, interface_holding, socket_interfaces

NOW = 1_800_000_000.0
# A parent that reports which signals reached it, over one worker that exits with
# argv[1] through the trainer's own `release_agent`; argv[2] names the launcher's pid
# the worker is told ("self": this parent's, as `launch` sets it).
PARENT = """
import os, signal, subprocess, sys
got = []
for name in ("SIGTERM", "SIGUSR1", "SIGUSR2"):
    signal.signal(getattr(signal, name), lambda *_, name=name: got.append(name))
env = dict(os.environ, TORCHELASTIC_RUN_ID="r")
env["GLUCOSE_LAUNCHER_PID"] = str(os.getpid()) if sys.argv[2] == "self" else sys.argv[2]
code = sys.argv[1]
worker = "from trainer.loop.launcher import release_agent; release_agent(" + code + ")"
subprocess.run([sys.executable, "-c", worker], env=env, check=True)
print(got)
"""
LONG_RUN = ("--batch-size", "8", "--epochs", "50")


@pytest.mark.parametrize(
    ("record", "torchrun_code", "signalled", "released", "expected"),
    [
        ({"state": "finished", "exit_code": 0}, EXIT_FINISHED, False, None, EXIT_FINISHED),
        (
            {"state": "finished-upload-pending", "exit_code": 0},
            EXIT_FINISHED,
            False,
            None,
            EXIT_FINISHED,
        ),
        # torchrun calls a worker's 75 a failure; the run says it stopped.
        ({"state": "stopped", "exit_code": 75}, EXIT_FAILED, True, None, EXIT_STOPPED),
        ({"state": "preempted", "exit_code": 75}, EXIT_FAILED, False, None, EXIT_STOPPED),
        ({"state": "failed", "exit_code": 2}, EXIT_FAILED, False, EXIT_USER_ERROR, EXIT_USER_ERROR),
        ({"state": "failed", "exit_code": 74}, EXIT_FAILED, False, None, EXIT_UNWRITABLE),
        ({"state": "failed", "exit_code": 1}, EXIT_FAILED, False, None, EXIT_FAILED),
        # A run dir it cannot write holds no record: the rank's signal says 74.
        ({}, EXIT_FAILED, False, EXIT_UNWRITABLE, EXIT_UNWRITABLE),
        ({"state": "running"}, EXIT_FAILED, False, EXIT_UNWRITABLE, EXIT_UNWRITABLE),
        # Another rank's 2 ended torchrun before local rank 0 wrote its record.
        ({}, EXIT_FAILED, False, EXIT_USER_ERROR, EXIT_USER_ERROR),
        # Stopped from outside before the run recorded an ending (a peer already gone).
        ({"state": "failed", "exit_code": 1}, EXIT_FAILED, True, None, EXIT_STOPPED),
        ({}, EXIT_FAILED, True, None, EXIT_STOPPED),
        ({}, EXIT_FAILED, False, None, EXIT_FAILED),  # restarts ran out
        # The boxes never met (another box evicted): start again later.
        ({}, EXIT_BOXES_AWAY, False, None, EXIT_BOXES_AWAY),
        ({"state": "running"}, EXIT_BOXES_AWAY, False, None, EXIT_BOXES_AWAY),
    ],
)
def test_the_runs_record_decides_the_exit_code(
    record, torchrun_code, signalled, released, expected
):
    assert exit_code(RunRecord.from_dict(record), torchrun_code, signalled, released) == expected


def test_only_a_record_written_since_the_launch_counts(tmp_path: Path):
    (tmp_path / "status.json").write_text(json.dumps({"state": "stopped", "updated_at": NOW - 1}))
    assert box_record(tmp_path, since=NOW) == RunRecord()  # an earlier launch's ending
    heartbeat = {"state": "finished", "exit_code": 0, "updated_at": NOW + 5}
    (tmp_path / "heartbeat.json").write_text(json.dumps(heartbeat))
    assert box_record(tmp_path, since=NOW) == RunRecord.from_dict(heartbeat)


@pytest.mark.parametrize("when", ["Infinity", "1e999", "9" * 400])
def test_a_record_of_no_time_is_no_record_of_this_launch(tmp_path: Path, when: str):
    """An earlier launch's `finished` whose updated_at is no finite number (a hostile or
    garbled file) does not decide how this launch ended."""
    (tmp_path / "status.json").write_text(f'{{"state": "finished", "updated_at": {when}}}')
    record = box_record(tmp_path, since=NOW)
    assert record == RunRecord()
    assert exit_code(record, EXIT_FAILED, signalled=False) == EXIT_FAILED


def test_an_exit_code_that_is_no_whole_number_is_not_the_containers(tmp_path: Path):
    (tmp_path / "status.json").write_text(
        json.dumps({"state": "failed", "exit_code": 2.0, "updated_at": NOW + 1})
    )
    code = exit_code(box_record(tmp_path, since=NOW), EXIT_FAILED, signalled=False)
    assert code == EXIT_FAILED and isinstance(code, int)


TRAIN = ["-m", "trainer", "train", "--data", "DATA", "--run-dir", "/nonexistent/run"]


@pytest.mark.parametrize(
    ("torchrun_args", "says"),
    [
        (["--nproc-per-node", "2", *TRAIN, "--bogus"], "unrecognized arguments: --bogus"),
        (["--nproc-per-nodes", "2", *TRAIN], "unrecognized arguments: --nproc-per-nodes"),
        (["--nproc-per-node", "2", "-m", "trainer", "evaluate"], "the trainer's `train` command"),
        (["--nproc-per-node", "3", *TRAIN, "--batch-size", "2"], "smaller than WORLD_SIZE 3"),
    ],
)
def test_bad_flags_are_exit_2_before_any_rank_starts(torchrun_args, says, tiny_data, capsys):
    argv = ["launch", "--", *(str(tiny_data) if a == "DATA" else a for a in torchrun_args)]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own exit for a flag it does not know
        code = exit_.code
    assert code == EXIT_USER_ERROR
    assert says in capsys.readouterr().err
    assert not Path("/nonexistent/run").exists()


@pytest.mark.e2e
def test_a_finished_run_exits_0(tiny_data: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    process = launcher(tiny_data, run_dir, "--batch-size", "8", "--max-steps", "2")
    assert wait_for_exit(process, run_dir) == EXIT_FINISHED, output_of(run_dir)
    assert status_of(run_dir)["state"] == "finished"


@pytest.mark.e2e
def test_a_box_whose_other_box_never_comes_exits_69_to_be_started_again(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    alone = (
        "--nproc-per-node", "1", "--nnodes", "2", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "away",
        "--rdzv-conf", "is_host=true,join_timeout=3",
    )  # fmt: skip
    process = launcher(tiny_data, run_dir, "--max-steps", "2", torchrun=alone)
    assert wait_for_exit(process, run_dir) == EXIT_BOXES_AWAY, output_of(run_dir)
    assert "the run's boxes did not meet" in output_of(run_dir)


@pytest.mark.e2e
def test_sigterm_to_the_container_stops_every_rank_exit_75(tiny_data: Path, tmp_path: Path):
    # `docker stop` signals the container's first process, the launcher.
    run_dir = tmp_path / "run"
    process = launcher(tiny_data, run_dir, *LONG_RUN)
    wait_for_step(run_dir, 2, process)
    process.send_signal(signal.SIGTERM)
    assert wait_for_exit(process, run_dir) == EXIT_STOPPED, output_of(run_dir)
    status = status_of(run_dir)
    assert (status["state"], status["exit_code"]) == ("stopped", EXIT_STOPPED)
    assert len(list((run_dir / "checkpoints").glob("step-*.pt"))) == 1


@pytest.mark.e2e
def test_a_rank_that_stops_ends_torchrun_without_a_restart_exit_75(tiny_data, tmp_path):
    # A spot notice or a SIGTERM seen by one rank: torchrun would count the ranks'
    # exit 75 as a failure and restart them; they tell it to end instead.
    run_dir = tmp_path / "run"
    process = launcher(tiny_data, run_dir, *LONG_RUN)
    wait_for_step(run_dir, 2, process)
    os.kill(worker_pid(process, 1), signal.SIGTERM)
    assert wait_for_exit(process, run_dir) == EXIT_STOPPED, output_of(run_dir)
    assert "resume:" not in output_of(run_dir)  # no second start of the ranks
    assert status_of(run_dir)["state"] == "stopped"


def _parent_of_a_worker_ending(code: int, launcher_pid: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PARENT, str(code), launcher_pid],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("code", "signal_name"),
    [(EXIT_STOPPED, "SIGTERM"), (EXIT_USER_ERROR, "SIGUSR1"), (EXIT_UNWRITABLE, "SIGUSR2")],
)
def test_a_worker_ending_on_a_final_code_stops_its_launcher_saying_which(code, signal_name):
    # In a container the launcher is PID 1: its pid, not "a parent above init", names it.
    assert _parent_of_a_worker_ending(code, "self") == f"['{signal_name}']"


def test_a_worker_leaves_a_parent_that_is_not_its_launcher_alone():
    assert _parent_of_a_worker_ending(EXIT_STOPPED, "1") == "[]"


def test_a_worker_that_failed_leaves_torchrun_to_restart_the_group():
    assert _parent_of_a_worker_ending(EXIT_FAILED, "self") == "[]"


@pytest.mark.e2e
def test_a_user_error_in_every_rank_is_exit_2_without_restarts(tmp_path: Path):
    run_dir = tmp_path / "run"
    started = time.monotonic()
    process = launcher(tmp_path / "no-such-dataset", run_dir, "--batch-size", "8")
    assert wait_for_exit(process, run_dir) == EXIT_USER_ERROR, output_of(run_dir)
    assert output_of(run_dir).count("device: ") == 1  # rank 0 started once: no restart
    assert status_of(run_dir)["exit_code"] == EXIT_USER_ERROR
    print(f"user error under torchrun: {time.monotonic() - started:.0f} s")


@pytest.mark.e2e
def test_two_boxes_stop_together_and_each_container_exits_75(tiny_data: Path, tmp_path: Path):
    """Box 0 (rank 0) and box 1 meet over c10d on 127.0.0.1 as `fab train` launches them
    (ops.run.distributed, node names as local addresses); `docker stop` of box 0
    stops the run; box 1 learns it from its own rank's record, its heartbeat."""
    from ops.run.distributed import DistributedLaunch, node_name

    port = free_port()
    boxes = {node: tmp_path / f"box-{node}" / "run" for node in (1, 0)}  # box 1 first
    processes = {}
    for node, run_dir in boxes.items():
        run_dir.parent.mkdir()
        plan = DistributedLaunch("two-boxes", 1, ("127.0.0.1", "127.0.0.1"), node=node)
        args = plan.torchrun_args([])[:-2]  # without "-m trainer"
        args = [a.replace(":29400", f":{port}") for a in args]
        # The container's /etc/hosts maps the node names; here they are addresses.
        args[args.index(node_name(node))] = f"127.0.0.{node + 1}"
        processes[node] = launcher(tiny_data, run_dir, *LONG_RUN, torchrun=tuple(args))
    wait_for_step(boxes[0], 2, processes[0])
    heartbeat = boxes[1] / "heartbeat.json"
    deadline = time.monotonic() + 60
    while not heartbeat.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert re.search(r'"step": \d+', heartbeat.read_text())
    processes[0].send_signal(signal.SIGTERM)
    assert wait_for_exit(processes[0], boxes[0]) == EXIT_STOPPED, output_of(boxes[0])
    assert wait_for_exit(processes[1], boxes[1]) == EXIT_STOPPED, output_of(boxes[1])
    assert status_of(boxes[0])["state"] == "stopped"
    assert json.loads(heartbeat.read_text())["state"] == "stopped"
    assert sorted(path.name for path in boxes[1].iterdir()) == ["heartbeat.json"]


def test_nccl_and_gloo_talk_over_the_interface_holding_the_boxs_address():
    # `localhost` stands for a box's node name, which its container's /etc/hosts maps.
    assert interface_holding("127.0.0.1") == "lo"
    expected = {"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert socket_interfaces("localhost", {}) == expected


def test_one_box_or_interfaces_named_in_the_environment_are_left_alone():
    assert socket_interfaces(None, {}) == {}
    assert socket_interfaces("localhost", {"NCCL_SOCKET_IFNAME": "=eth1"}) == {}
    assert socket_interfaces("no-such-box.invalid", {}) == {}
