"""trainer.loop.distributed without a process group: rank info from torchrun's environment,
the one-rank world, how a split is sharded for evaluation; and the pieces of the loop
that depend on the rank (batch parts, dropout seeds, the stop vote's codes)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.trainer.gloo_ranks import run_ranks
from trainer.config import DataConfig, RunConfig, TrainConfig, UserError
from trainer.data.dataset import load_dataset
from trainer.data.pipeline import Normalisation, WindowPipeline, micro_batch_seed
from trainer.loop.distributed import Group, RankInfo
from trainer.loop.preemption import StopSignal


def test_without_torchrun_the_world_is_one_rank():
    info = RankInfo.from_env({})
    assert (info.rank, info.local_rank, info.world_size, info.is_main) == (0, 0, 1, True)


def test_rank_info_is_read_from_torchruns_environment():
    info = RankInfo.from_env({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    assert (info.rank, info.local_rank, info.world_size, info.is_main) == (5, 1, 8, False)


@pytest.mark.parametrize(
    "environ",
    [
        {"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},
        {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},
        {"RANK": "0", "LOCAL_RANK": "-1", "WORLD_SIZE": "2"},
    ],
)
def test_a_broken_torchrun_environment_is_one_line_naming_the_launcher(environ):
    with pytest.raises(UserError, match=r"python -m torch\.distributed\.run"):
        RankInfo.from_env(environ)


def test_one_rank_group_passes_everything_through():
    group = Group()
    model = torch.nn.Linear(2, 1)
    state = {"model": model.state_dict()}
    assert group.gradients(model) is None and not group.data_parallel
    assert group.agree(2, 0) == (2, 0)
    assert group.broadcast_state(state) is state
    rows = np.arange(5.0)
    assert group.all_gather_rows(rows) is rows
    assert group.shard(5, 2) == (0, 5)
    group.close()


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("rows", [0, 1, 1000, 1024, 2049, 5000])
def test_evaluation_shards_are_whole_batches_covering_the_split_in_order(world_size, rows):
    batch = 1024
    shards = [Group(RankInfo(r, r, world_size)).shard(rows, batch) for r in range(world_size)]
    assert shards[0][0] == 0 and shards[-1][1] == rows
    for (_, stop), (start, _) in itertools.pairwise(shards):
        assert stop == start and (start % batch == 0 or start == rows)


def test_a_global_batch_that_does_not_divide_gives_shares_differing_by_one():
    # A run saved at 4096 resumed on 3 GPUs: it exited 2 before.
    config = RunConfig(DataConfig("d"), TrainConfig(run_dir="r", batch_size=4096))
    train = config.with_world_size(3).to_dict()["train"]
    assert (train["batch_size"], train["world_size"], train["per_rank_batch_size"]) == (
        4096,
        3,
        1366,
    )
    shares = [len(part) for part in torch.arange(4096).tensor_split(3)]
    assert shares == [1366, 1365, 1365]
    eight = RunConfig(DataConfig("d"), TrainConfig(run_dir="r", batch_size=256)).with_world_size(8)
    assert eight.to_dict()["train"]["per_rank_batch_size"] == 32


def test_a_global_batch_smaller_than_the_ranks_is_refused():
    config = RunConfig(DataConfig("d"), TrainConfig(run_dir="r", batch_size=4))
    with pytest.raises(UserError, match=r"--batch-size 4 is smaller than WORLD_SIZE 8"):
        config.with_world_size(8)


def _pipelines(tiny_data, batch_size: int, world_size: int) -> list[WindowPipeline]:
    dataset = load_dataset(tiny_data)
    norm = Normalisation.from_train(dataset, [0, 1, 2])
    return [
        WindowPipeline(dataset, [0, 1, 2], norm, torch.device("cpu"), batch_size, r, world_size)
        for r in range(world_size)
    ]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_take_disjoint_parts_of_each_global_batch_of_one_permutation(tiny_data, world_size):
    one = _pipelines(tiny_data, 30, 1)[0]
    ranks = _pipelines(tiny_data, 30, world_size)
    order = one.permutation(seed=0, epoch=1)  # 144 windows: 4 batches of 30, one of 24
    assert [r.steps_per_epoch for r in ranks] == [one.steps_per_epoch] * world_size
    for step in range(one.steps_per_epoch):
        parts = [r.batch(r.permutation(0, 1), step)[1] for r in ranks]
        assert [len(p) for p in parts] == [one.windows_in_batch(step) // world_size] * world_size
        assert torch.equal(torch.cat(parts), one.batch(order, step)[1])


def test_a_short_last_batch_leaves_trailing_ranks_fewer_windows_or_none(tiny_data):
    ranks = _pipelines(tiny_data, 142, 4)  # 144 windows: a last batch of 2
    order = ranks[0].permutation(0, 0)
    assert ranks[0].windows_in_batch(1) == 2
    assert [len(r.batch(order, 1)[0]) for r in ranks] == [1, 1, 0, 0]


def test_dropout_seeds_differ_by_rank_and_position_and_fit_torch():
    seeds = {
        micro_batch_seed(seed, epoch, micro, rank)
        for seed in (0, 2**40)
        for epoch in (0, 1)
        for micro in (0, 1)
        for rank in range(4)
    }
    assert len(seeds) == 32
    for seed in seeds:
        torch.manual_seed(seed)


def test_stop_codes_say_what_asked_and_another_ranks_code_is_adopted():
    stop = StopSignal(watch_notices=False)
    assert stop.code == 0
    stop.adopt(0)
    assert not stop.requested
    stop.adopt(2)
    assert (stop.requested, stop.state, stop.code) == (True, "preempted", 2)
    assert stop.reason == "a spot notice on another rank"
    own = StopSignal(watch_notices=False)
    own.request("SIGTERM")
    own.adopt(2)  # its own reason stands
    assert (own.reason, own.state, own.code) == ("SIGTERM", "stopped", 1)


def test_under_torchrun_one_rank_is_launched_and_alone_it_is_not():
    assert RankInfo.from_env({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}).launched
    assert not RankInfo.from_env({}).launched


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield Group(RankInfo(0, 0, 1, launched=True))
    dist.destroy_process_group()


def test_every_gradient_is_a_view_into_one_bucket_with_its_parameters_strides(one_rank_group):
    from trainer.config import ModelConfig
    from trainer.model import build_model

    model = build_model(ModelConfig("resnet18"), "cpu", "nhwc")  # channels-last weights
    gradients = one_rank_group.gradients(model)
    parameters = list(model.parameters())
    assert gradients.bucket.numel() == sum(p.numel() for p in parameters)
    for parameter in parameters:
        assert parameter.grad.untyped_storage().data_ptr() == gradients.bucket.data_ptr()
        assert parameter.grad.stride() == parameter.stride()
    gradients.bucket.copy_(torch.arange(gradients.bucket.numel(), dtype=torch.float32))
    covered = torch.cat([p.grad.flatten() for p in parameters]).sort().values
    assert torch.equal(covered, gradients.bucket)  # every element once, no overlap


def test_a_one_rank_all_reduce_leaves_the_gradients_as_they_were(one_rank_group):
    model = torch.nn.Linear(3, 2)
    gradients = one_rank_group.gradients(model)
    gradients.bucket.normal_()
    before = [p.grad.clone() for p in model.parameters()]
    gradients.all_reduce()
    assert all(torch.equal(p.grad, b) for p, b in zip(model.parameters(), before, strict=True))


def test_torchruns_local_world_size_says_when_the_ranks_span_boxes():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}
    assert RankInfo.from_env({**env, "LOCAL_WORLD_SIZE": "2"}).spans_boxes
    assert not RankInfo.from_env({**env, "LOCAL_WORLD_SIZE": "4"}).spans_boxes
    assert not RankInfo.from_env(env).spans_boxes  # started by hand: one box


CASES = {  # (precision, ranks on a box of 2): whether the bucket travels in bf16
    ("bf16", 1): True,
    ("bf16", 2): False,
    ("fp32", 1): False,
    ("fp16", 1): False,
}


def _all_reduces_in_bf16(group: Group) -> list[bool]:
    return [
        Group(dataclasses.replace(group.info, local_world_size=local))
        .gradients(torch.nn.Linear(3, 1), precision)
        .bf16
        for precision, local in CASES
    ]


def test_the_gradients_travel_in_bf16_only_between_boxes_of_a_bf16_run(tmp_path):
    expected = list(CASES.values())
    assert run_ranks(_all_reduces_in_bf16, 2, tmp_path) == [expected, expected]
