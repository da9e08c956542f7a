"""`bench --time-to-quality`: the defaults reach the previous default's validation MAE
on fixed synthetic data, timed from the process's start (the tiny CPU size)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from trainer.bench.time_to_quality import TARGET_MAE, process_started_at, time_to_quality


def test_the_process_start_is_the_kernels_before_now():
    started = process_started_at()
    assert started <= time.time()
    assert time.time() - started < 24 * 3600  # this test session, not the boot


@pytest.mark.e2e  # ~35 s of CPU (2 min on the shared build machine): `make test` runs it
def test_the_tiny_default_run_reaches_the_previous_defaults_val_mae(tmp_path):
    threads = torch.get_num_threads()
    result = time_to_quality("tiny", None, tmp_path)
    torch.set_num_threads(threads)
    assert result["target_mae"] == TARGET_MAE["tiny"]
    assert result["reached"], result
    assert 0 < result["seconds_to_target"] <= result["wall_s"]
    assert result["batch_size"] == 256  # a CPU's default


@pytest.mark.e2e  # two gloo ranks under torchrun: ~1 min of CPU
def test_two_gloo_ranks_reach_the_target_one_rank_reaches(capfd):
    from trainer.__main__ import main

    assert main(["bench", "--time-to-quality", "--quick", "--nproc", "2", "--json"]) == 0
    printed = capfd.readouterr().out
    result = json.loads(printed[printed.rindex("\n{\n") :])
    assert result["world_size"] == 2
    assert result["batch_size"] == 256  # one CPU rank's: the same batches as one rank
    assert result["reached"], result
