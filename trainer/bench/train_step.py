"""`python -m trainer bench`: windows/s of our input pipeline and training step, beside
a seeds-style baseline (per-sample Dataset + DataLoader, batch 64, fp32, `.item()`
every step, `nn.Conv1d`) measured in the same run on the same data, so other load on
the machine hits both alike. Our step is the trainer's (`trainer.loop.formulation`),
timed in every formulation of the network (`trainer.model`) at the trainer's
smallest default per-rank batch for the device; the one reported as ours is the one
`train` takes: gemm on a CPU, the fastest on a GPU. Our step is `train`'s own
(`trainer.loop.step`: replayed as one CUDA graph on a GPU), timed in rounds of
`STEPS_PER_ROUND` steps with one sync a round, as `train` syncs once a log interval;
with `--no-graph`, the eager step (a run's fallback; host-bound on a GPU).
The headline batch is the one `train` takes for the bench's data, which stands for an
M3-sized set (12 M windows, the size the boxes are for): 4096 on a GPU, where the
quality-measured batch rule (`trainer.loop.defaults`) lets a batch grow. The chosen
formulation is timed again at a `SECOND_BATCH_DIVISOR`th of it: `--record` stores both
rows, from which `fab plan` takes the GPU's fixed cost a step and its cost a window. On
a GPU it also reports the most GPU memory each took.

Also states the FLOPs of one training window and the windows/s that would mean 30%
of an H100's dense bf16 peak: the figure a GPU run must feed without being input-bound.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset
from torch.utils.flop_counter import FlopCounterMode

from trainer.bench.throughput_record import append_record
from trainer.config import ModelConfig
from trainer.data.dataset import Dataset
from trainer.data.pipeline import Normalisation, WindowPipeline
from trainer.loop.defaults import per_rank_batch, train_windows_of
from trainer.loop.device import DeviceChoice, choose_device
from trainer.loop.formulation import pick, timed_formulations, timed_step
from trainer.model import build_model, default_formulation

WINDOW_LENGTH = 100
BASELINE_BATCH_SIZE = 64
BENCH_CASES = 16
PIPELINE_EPOCHS_PER_ROUND = 20
# Our steps per timed round: the GPU syncs once a round, as `train` syncs once a log
# interval, not after every step (which hid the captured step's speed).
STEPS_PER_ROUND = 10
# The second batch, this many times smaller than the first: two points give a step's
# fixed cost and its cost a window, what `fab plan` models every GPU by.
SECOND_BATCH_DIVISOR = 4
# The data the headline batch is chosen for: an M3-sized set (ops/plan's milestones).
STANDS_FOR_WINDOWS = 12_000_000
FULL_BUDGETS_S = (3.0, 45.0)  # pipeline, training step: the bench takes ~1-2 minutes
H100_BF16_DENSE_PEAK_FLOPS = 989e12
TARGET_PEAK_FRACTION = 0.30


class SeedsStyleDataset(TorchDataset):
    """What the seeds' trainer does: one Python call and two tensors per window."""

    def __init__(self, windows: np.ndarray, labels: np.ndarray) -> None:
        self.windows, self.labels = windows, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.tensor(self.windows[index], dtype=torch.float32).unsqueeze(0)
        return window, torch.tensor(self.labels[index], dtype=torch.float32)


def _synthetic(windows: int) -> Dataset:
    rng = np.random.default_rng(0)
    data = rng.normal(size=(windows, WINDOW_LENGTH)).astype(np.float32)
    glucose = rng.uniform(70, 250, windows).astype(np.float32)
    case_id = np.arange(windows, dtype=np.int32) % BENCH_CASES
    return Dataset(Path("<bench>"), data, glucose, case_id, {}, "bench")


def our_pipeline(dataset: Dataset, choice: DeviceChoice, batch: int) -> WindowPipeline:
    norm = Normalisation(0.0, 1.0, 150.0, 50.0, 150.0)
    return WindowPipeline(dataset, list(range(BENCH_CASES)), norm, choice.device, batch)


def our_pipeline_epoch(pipeline: WindowPipeline, choice: DeviceChoice) -> Callable[[], int]:
    """One epoch of our batches: a permutation, then one index per batch."""
    epochs = itertools.count()

    def epoch() -> int:
        order = pipeline.permutation(0, next(epochs))
        for step in range(pipeline.steps_per_epoch):
            pipeline.batch(order, step)
        choice.synchronize()
        return len(pipeline)

    return epoch


def baseline_pipeline_epoch(dataset: Dataset) -> Callable[[], int]:
    """One epoch of the seeds' DataLoader over per-sample tensors."""
    loader = DataLoader(
        SeedsStyleDataset(dataset.windows, dataset.glucose),
        batch_size=BASELINE_BATCH_SIZE,
        shuffle=True,
    )
    return lambda: sum(x.shape[0] for x, _ in loader)


def _model(choice: DeviceChoice, formulation: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig("resnet34"), choice.device, formulation).train()


def our_train_step(
    pipeline: WindowPipeline, choice: DeviceChoice, formulation: str, graph: bool = True
) -> Callable[[], int]:
    """Our step as `train` takes it (`trainer.loop.step`, replayed as one CUDA graph on a
    GPU unless `graph` is off): batches indexed from the resident tensor, no host sync;
    the short last batch of the epoch eager, as in `train`."""
    torch.manual_seed(0)
    step = timed_step(ModelConfig("resnet34"), formulation, choice, graph)
    order = pipeline.permutation(0, 0)
    position = itertools.count()

    def one() -> int:
        micro = next(position) % pipeline.steps_per_epoch
        x, y = pipeline.batch(order, micro)
        step(x, y, 1 / x.shape[0], full=x.shape[0] == pipeline.batch_size)
        return x.shape[0]

    return one


def baseline_train_step(dataset: Dataset, choice: DeviceChoice) -> Callable[[], int]:
    """The seeds' step: DataLoader batches of 64, fp32, `loss.item()` every step."""
    model = _model(choice, "torch")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(
        SeedsStyleDataset(dataset.windows, dataset.glucose),
        batch_size=BASELINE_BATCH_SIZE,
        shuffle=True,
        drop_last=True,
    )
    batches = iter(loader)

    def step() -> int:
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        x, y = x.to(choice.device), y.to(choice.device)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()
        return x.shape[0]

    return step


def interleaved_rates(
    steps: dict[str, tuple[Callable[[], int], int]],
    choice: DeviceChoice,
    budget_s: float,
    warmup_steps: int,
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Windows/s of each named step, run in alternating rounds of `repeats` steps each,
    and the most GPU memory (GiB) in use while each warmed up (None on a CPU).

    Alternating makes load from other processes (a shared CI box) hit every contender
    alike, so the ratio stays meaningful even when the absolute numbers wobble.
    """
    memory = {}
    for name, (step, _) in steps.items():
        if choice.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(choice.device)
        for _ in range(warmup_steps):  # allocator, oneDNN/cuDNN kernel choice
            step()
        choice.synchronize()
        memory[name] = choice.peak_memory_gib()
    totals = {name: [0, 0.0] for name in steps}
    deadline = time.perf_counter() + budget_s
    while True:
        for name, (step, repeats) in steps.items():
            start = time.perf_counter()
            done = sum(step() for _ in range(repeats))
            choice.synchronize()  # the GPU may still be working through queued steps
            totals[name][0] += done
            totals[name][1] += time.perf_counter() - start
        if time.perf_counter() >= deadline:
            rates = {name: windows / seconds for name, (windows, seconds) in totals.items()}
            return rates, memory


def train_flops_per_window() -> float:
    """FLOPs of forward + backward for one window (counted on CPU, batch 2)."""
    model = build_model(ModelConfig("resnet34")).train()
    x = torch.randn(2, 1, WINDOW_LENGTH)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops() / 2


def _device_name(choice: DeviceChoice) -> tuple[str, int]:
    # The bench drives one GPU however many the box has: recording the box's count
    # would make `fab plan` read a one-GPU speed as a multi-GPU one.
    if choice.device.type == "cuda":
        return torch.cuda.get_device_name(choice.device), 1
    return "cpu", 0


def measure(quick: bool, batch_size: int | None, graph: bool = True) -> dict[str, Any]:
    """Every number the bench reports, as one dict; `graph`: our step captured on a GPU."""
    choice = choose_device("auto")
    batch = batch_size or per_rank_batch(choice.device.type, train_windows_of(STANDS_FOR_WINDOWS))
    if quick:  # one round of everything at a small batch: proves the wiring, not the speed
        batch, windows, budgets_s, warmup, steps = min(batch, 32), 512, (0.0, 0.0), 1, 1
    else:
        windows = max(16 * batch, 8192)
        budgets_s, warmup, steps = FULL_BUDGETS_S, 2, STEPS_PER_ROUND
    dataset = _synthetic(windows)
    pipeline = our_pipeline(dataset, choice, batch)
    formulations = timed_formulations(choice.device)
    pipe, _ = interleaved_rates(
        {
            "ours": (our_pipeline_epoch(pipeline, choice), PIPELINE_EPOCHS_PER_ROUND),
            "baseline": (baseline_pipeline_epoch(dataset), 1),
        },
        choice,
        budgets_s[0],
        warmup_steps=1,
    )
    baseline_repeats = max(1, steps * batch // BASELINE_BATCH_SIZE)
    train, memory = interleaved_rates(
        {
            **{
                name: (our_train_step(pipeline, choice, name, graph), steps)
                for name in formulations
            },
            "baseline": (baseline_train_step(dataset, choice), baseline_repeats),
        },
        choice,
        budgets_s[1],
        warmup_steps=warmup,
    )
    ours = {name: train[name] for name in formulations}
    # What `train --formulation auto` takes: gemm on a CPU, the fastest on a GPU.
    seconds_per_window = {name: 1 / rate for name, rate in ours.items()}
    cuda = choice.device.type == "cuda"
    chosen = pick(seconds_per_window, choice.device) if cuda else default_formulation(choice.device)
    second_batch = max(batch // SECOND_BATCH_DIVISOR, 2)
    second = our_pipeline(dataset, choice, second_batch)
    second_rate, _ = interleaved_rates(
        {"ours": (our_train_step(second, choice, chosen, graph), steps)},
        choice,
        budgets_s[1] / len(train),  # one contender's share of the first comparison
        warmup_steps=warmup,
    )
    flops = train_flops_per_window()
    gpu, gpu_count = _device_name(choice)
    return {
        "pipeline_windows_per_s": pipe["ours"],
        "train_windows_per_s": ours[chosen],
        "formulation": chosen,
        "formulations_windows_per_s": ours,
        "gpu_memory_gib": memory[chosen],
        "baseline_pipeline_windows_per_s": pipe["baseline"],
        "baseline_train_windows_per_s": train["baseline"],
        "pipeline_speedup": pipe["ours"] / pipe["baseline"],
        "train_speedup": ours[chosen] / train["baseline"],
        "train_flops_per_window": flops,
        "h100_30pct_peak_windows_per_s": TARGET_PEAK_FRACTION * H100_BF16_DENSE_PEAK_FLOPS / flops,
        "device": choice.description,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": gpu,
        "gpu_count": gpu_count,
        "precision": choice.precision,
        "batch_size": batch,
        "step": f"{'graph' if cuda and graph else 'eager'} {chosen}",
        "batches": {second_batch: second_rate["ours"], batch: ours[chosen]},
        "window_length": WINDOW_LENGTH,
        "torch_version": torch.__version__,
        "quick": quick,
    }


def _print_text(result: dict[str, Any]) -> None:
    print(
        f"device: {result['device']}; {result['precision']}, batch {result['batch_size']}, "
        f"L={result['window_length']}"
    )
    print(
        f"input pipeline: {result['pipeline_windows_per_s']:>14,.0f} windows/s   baseline "
        f"{result['baseline_pipeline_windows_per_s']:>10,.0f}   x{result['pipeline_speedup']:.1f}"
    )
    print(
        f"training step:  {result['train_windows_per_s']:>14,.0f} windows/s   baseline "
        f"{result['baseline_train_windows_per_s']:>10,.0f}   x{result['train_speedup']:.2f}"
        f"   ({result['formulation']})"
    )
    print(
        "formulations:   "
        + "   ".join(f"{n} {r:,.0f}" for n, r in result["formulations_windows_per_s"].items())
        + " windows/s"
    )
    print(
        f"step ({result['step']}):  "
        + "   ".join(f"batch {b} {r:,.0f}" for b, r in result["batches"].items())
        + " windows/s"
    )
    if result["gpu_memory_gib"] is not None:
        print(f"GPU memory:     {result['gpu_memory_gib']:.2f} GiB at batch {result['batch_size']}")
    print(
        f"ResNet34-1D: {result['train_flops_per_window'] / 1e9:.3f} GFLOP per training window; "
        f"30% of an H100's bf16 dense peak = "
        f"{result['h100_30pct_peak_windows_per_s']:,.0f} windows/s"
    )


def run_bench(
    json_output: bool, record: Path | None, quick: bool, batch_size: int | None, graph: bool = True
) -> int:
    result = measure(quick, batch_size, graph)
    if json_output:
        print(json.dumps(result, indent=2))
    else:
        _print_text(result)
    if record is not None:
        for batch, rate in result["batches"].items():
            append_record(
                Path(record), {**result, "batch_size": batch, "train_windows_per_s": rate}
            )
    return 0
