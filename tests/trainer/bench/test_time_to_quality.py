"""`bench --time-to-quality`: the defaults against the previous default, both trained in
the same test on the same machine, data and seeds; never against a number measured on
another machine's kernels."""

from __future__ import annotations

import json
import time

import pytest
import torch

from trainer.bench.time_to_quality import process_started_at, time_to_quality, verdict
from trainer.loop.defaults import CPU_BATCH
from trainer.reports.progress import read_metrics

SEEDS = (0, 1, 2)


def test_the_process_start_is_the_kernels_before_now():
    started = process_started_at()
    assert started <= time.time()
    assert time.time() - started < 24 * 3600  # this test session, not the boot


def _seed(seed: int, default: float, reference: float, baseline: float = 34.0) -> dict:
    return {
        "seed": seed,
        "best_val_mae": default,
        "baseline_val_mae": baseline,
        "reference": {"best_val_mae": reference},
    }


def test_the_verdict_calls_a_default_within_the_seeds_spread_as_good():
    # The small size's three seeds on an AMD EPYC: the default, the reference.
    judged = verdict([_seed(0, 27.2, 17.1), _seed(1, 18.3, 13.9), _seed(2, 16.2, 17.4)])
    assert (judged["default_median_mae"], judged["reference_median_mae"]) == (18.3, 17.1)
    assert judged["as_good"] and judged["learning_is_real"]


def test_the_verdict_calls_a_default_far_past_the_seeds_spread_worse():
    # The same seeds with the default's learning rate x10.
    judged = verdict([_seed(0, 28.5, 17.1), _seed(1, 43.6, 13.9), _seed(2, 40.6, 17.4)])
    assert not judged["as_good"]


def test_the_verdict_takes_a_worst_seed_at_four_fifths_of_the_constant_for_learning():
    # The small size under ATen's portable kernels (ATEN_CPU_CAPABILITY=default).
    judged = verdict(
        [_seed(0, 18.3, 27.3, baseline=34.0), _seed(1, 15.4, 15.3), _seed(2, 17.5, 17.8)]
    )
    assert judged["learning_is_real"] and judged["as_good"]


def test_the_verdict_says_when_the_reference_hardly_beats_the_constant():
    judged = verdict([_seed(0, 38.3, 33.5, baseline=33.8), _seed(1, 30.0, 20.0)])
    assert not judged["learning_is_real"]


@pytest.mark.e2e  # 6 runs of ~20 s of CPU (a few minutes on the shared build machine)
def test_the_default_is_as_good_as_the_previous_default_at_the_median_of_three_seeds(tmp_path):
    threads = torch.get_num_threads()
    results = [time_to_quality("small", None, tmp_path, seed=seed) for seed in SEEDS]
    torch.set_num_threads(threads)
    judged = verdict(results)
    assert judged["learning_is_real"], f"the small size no longer tells settings apart: {judged}"
    assert judged["as_good"], json.dumps({"verdict": judged, "runs": results}, indent=1)
    for result in results:
        assert result["target_source"] == "the reference, in this run"
        assert result["target_mae"] == result["reference"]["best_val_mae"]
        assert result["batch_size"] == result["reference"]["batch_size"] == 256  # a CPU's


@pytest.mark.e2e  # two gloo ranks under torchrun, then the one-process reference: ~1 min
def test_two_gloo_ranks_train_at_one_ranks_batch_against_a_one_process_reference(tmp_path):
    threads = torch.get_num_threads()
    result = time_to_quality("tiny", None, tmp_path, nproc=2)
    torch.set_num_threads(threads)
    assert (result["world_size"], result["reference"]["world_size"]) == (2, 1)
    assert result["batch_size"] == CPU_BATCH  # the batches one rank takes
    assert result["target_mae"] == result["reference"]["best_val_mae"]
    # On 600 training windows no model beats the constant on validation, so the tiny
    # size proves the wiring and that the ranks learn: their training loss falls.
    losses = [r["loss"] for r in read_metrics(tmp_path / "default-seed0") if r["kind"] == "train"]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
