"""Data-parallel training under torchrun on CPU (gloo): two ranks on this machine, two
"nodes" meeting over c10d on 127.0.0.1, gradients of every model formulation, the
flat-bucket step against DDP's, and a 2-rank run against a 1-rank run of the same
global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO, TESTS_DIR
from tests.trainer.conftest import TINY_WINDOW_LENGTH
from tests.trainer.ddp_process import TORCHRUN, free_port, torchrun
from tests.trainer.trainer_process import output_of, start_training, wait_for_exit
from trainer.checkpoints import checkpoint_file
from trainer.config import DataConfig, ModelConfig, OptimConfig, RunConfig, SynthConfig, TrainConfig
from trainer.data.synth import synthesize
from trainer.loop.evaluate import EVAL_BATCH_SIZE, evaluate_checkpoint
from trainer.loop.train import train
from trainer.model import FORMULATIONS, build_model

pytestmark = pytest.mark.e2e

# Val and test are one case each: 1100 windows make two evaluation batches, one per rank.
SHARDED_EVAL_WINDOWS_PER_CASE = EVAL_BATCH_SIZE + 76
# 8 cases of 96 windows: 6 train cases, 18 steps of 32 an epoch. At a low learning
# rate four epochs land within a few mg/dL of each other at 1 and 2 ranks (seeds 0-2
# differed by 0.3-2.3 mg/dL of best val MAE, against a ~40 mg/dL constant baseline).
EQUIVALENCE = ("--batch-size", "32", "--epochs", "4", "--lr", "5e-4", "--patience", "100")
# BatchNorm normalises over each rank's 16 windows at 2 ranks, over 32 at 1: the runs
# differ by that and by dropout masks, not by a rounding error.
VAL_MAE_TOLERANCE_OF_BASELINE = 0.10


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval-data")
    config = SynthConfig(out, 5, SHARDED_EVAL_WINDOWS_PER_CASE, TINY_WINDOW_LENGTH, 0)
    return synthesize(config)


@pytest.fixture(scope="module")
def two_rank_run(eval_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ddp") / "two-ranks"
    process = torchrun(eval_data, run_dir, "--batch-size", "32", "--max-steps", "3")
    assert wait_for_exit(process, run_dir) == 0, output_of(run_dir)
    return run_dir


def test_two_ranks_say_and_record_world_size_and_batches(two_rank_run: Path) -> None:
    said = "data parallel: world size 2 (gloo), per-rank batch 16, global batch 32"
    assert said in output_of(two_rank_run)
    config = json.loads((two_rank_run / "config.json").read_text())["train"]
    assert (config["world_size"], config["per_rank_batch_size"], config["batch_size"]) == (
        2,
        16,
        32,
    )
    summary = json.loads((two_rank_run / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert (summary["per_rank_batch_size"], summary["global_batch_size"]) == (16, 32)


def test_ddp_metrics_are_those_of_a_single_process_evaluation(
    two_rank_run: Path, eval_data: Path
) -> None:
    summary = json.loads((two_rank_run / "summary.json").read_text())
    # --max-steps ends the run before an epoch does: the final evaluation is last.pt's.
    assert not (two_rank_run / "checkpoints" / "best.pt").exists()
    last = str(two_rank_run / "checkpoints" / "last.pt")
    for split in ("val", "test"):
        single = evaluate_checkpoint(eval_data, last, split)
        assert single["n"] > EVAL_BATCH_SIZE  # so each rank evaluated a share
        assert {key: single[key] for key in summary[split]} == summary[split]


def test_ddp_checkpoint_loads_into_a_single_process_model(two_rank_run: Path) -> None:
    state = checkpoint_file.load(two_rank_run / "checkpoints" / "last.pt")
    model = build_model(ModelConfig(arch="resnet18"))
    assert not [key for key in state["model"] if key.startswith("module.")]
    model.load_state_dict(state["model"])  # strict: every key, no prefix


def _two_ranks_of(script: str) -> subprocess.CompletedProcess:
    path = TESTS_DIR / "trainer" / script
    command = [sys.executable, *TORCHRUN, "--standalone", "--nproc-per-node", "2", str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


def test_all_reduced_gradients_match_one_process_for_every_model_formulation() -> None:
    result = _two_ranks_of("ddp_gradients.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"all-reduced gradients match for {sorted(FORMULATIONS)}" in result.stdout


def test_two_ranks_through_the_flat_bucket_train_ddps_weights_bitwise() -> None:
    result = _two_ranks_of("dp_against_ddp.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("the bucket step trains DDP's weights bitwise") == 2


def test_two_ranks_reach_one_rank_val_mae_at_the_same_global_batch(tmp_path: Path) -> None:
    data = synthesize(SynthConfig(tmp_path / "data", 8, 96, TINY_WINDOW_LENGTH, 0))
    two = tmp_path / "two-ranks"
    process = torchrun(data, two, *EQUIVALENCE)
    one = RunConfig(
        data=DataConfig(data),
        train=TrainConfig(run_dir=tmp_path / "one-rank", epochs=4, batch_size=32, patience=100),
        model=ModelConfig(arch="resnet18"),
        optim=OptimConfig(lr=5e-4),
    )
    assert train(one) == 0
    assert wait_for_exit(process, two) == 0, output_of(two)
    val_one = json.loads((tmp_path / "one-rank" / "summary.json").read_text())["val"]
    val_two = json.loads((two / "summary.json").read_text())["val"]
    baseline = val_one["baseline"]["mae"]
    assert val_two["baseline"] == val_one["baseline"]  # the same split and labels
    assert val_two["mae"] < baseline and val_one["mae"] < baseline
    assert abs(val_two["mae"] - val_one["mae"]) <= VAL_MAE_TOLERANCE_OF_BASELINE * baseline


def test_two_ranks_left_to_the_default_take_the_global_batch_one_rank_takes(
    tiny_data: Path, tmp_path: Path
) -> None:
    # The rule is on the global batch (the steps an epoch the evidence asks for), not
    # a rank's: two gloo ranks took 2 x 256 before.
    one, two = tmp_path / "one-rank", tmp_path / "two-ranks"
    processes = {
        one: start_training(tiny_data, one, "--max-steps", "1"),
        two: torchrun(tiny_data, two, "--max-steps", "1"),
    }
    for run_dir, process in processes.items():
        assert wait_for_exit(process, run_dir) == 0, output_of(run_dir)
    batches = [json.loads((run_dir / "config.json").read_text())["train"] for run_dir in (one, two)]
    assert [b["batch_size"] for b in batches] == [256, 256]
    assert [b["per_rank_batch_size"] for b in batches] == [256, 128]


def _saved_steps(run_dir: Path) -> list[int]:
    steps = (int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*.pt"))
    return sorted(steps)


def test_two_ranks_save_at_the_steps_one_process_saves_at(tiny_data: Path, tmp_path: Path) -> None:
    # 18 steps an epoch: three saves before the epoch's end, all of them kept.
    flags = ("--batch-size", "8", "--checkpoint-every-steps", "6", "--max-steps", "14")
    one, two = tmp_path / "one-rank", tmp_path / "two-ranks"
    processes = {one: start_training(tiny_data, one, *flags), two: torchrun(tiny_data, two, *flags)}
    for run_dir, process in processes.items():
        assert wait_for_exit(process, run_dir) == 0, output_of(run_dir)
    assert _saved_steps(two) == _saved_steps(one) == [6, 12, 14]


def test_two_nodes_meet_over_c10d_rank_0_writes_the_run_the_other_its_heartbeat(
    tiny_data: Path, tmp_path: Path
) -> None:
    # One rank per "node", each with its own run dir. Rank 0 goes to the node whose
    # --local-addr sorts first (ops.run.distributed names boxes so), started last.
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = {"127.0.0.2": tmp_path / "node-b", "127.0.0.1": tmp_path / "node-a"}
    flags = ("--batch-size", "16", "--max-steps", "3", "--checkpoint-uri", _uri(tmp_path))
    launchers = []
    for address, node in nodes.items():
        rendezvous = ("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d")
        rendezvous += ("--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes")
        rendezvous += ("--local-addr", address, "--rdzv-conf", f"is_host={address == '127.0.0.1'}")
        launchers.append(torchrun(tiny_data, node, *flags, launcher=rendezvous))
    for launcher, node in zip(launchers, nodes.values(), strict=True):
        assert wait_for_exit(launcher, node) == 0, output_of(node)
    rank_0, other = tmp_path / "node-a", tmp_path / "node-b"
    assert json.loads((rank_0 / "summary.json").read_text())["world_size"] == 2
    assert (tmp_path / "store" / "summary.json").is_file()  # uploads: rank 0's
    # The other node's rank writes nothing but its box's heartbeat.
    assert [path.name for path in other.iterdir()] == ["heartbeat.json"]
    heartbeat = json.loads((other / "heartbeat.json").read_text())
    assert (heartbeat["state"], heartbeat["exit_code"], heartbeat["step"]) == ("finished", 0, 3)


def _uri(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()
