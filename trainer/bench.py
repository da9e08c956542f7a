"""`python -m trainer bench`: windows/s of our input pipeline and training step, beside
a seeds-style baseline (per-sample Dataset + DataLoader, batch 64, fp32, `.item()`
every step) measured in the same run on the same data, so other load on the machine
hits both alike.

Also states the FLOPs of one training window and the windows/s that would mean 30%
of an H100's dense bf16 peak: the figure a GPU run must feed without being input-bound.
"""

from __future__ import annotations

import csv
import datetime as dt
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

from trainer.config import ModelConfig
from trainer.data import Dataset, Normalisation, WindowPipeline
from trainer.device import DeviceChoice, choose_device
from trainer.model import build_model

WINDOW_LENGTH = 100
BASELINE_BATCH_SIZE = 64
CPU_BATCH_SIZE = 256  # measured best on 2 cores: larger batches gain little, cost memory
GPU_BATCH_SIZE = 1024
H100_BF16_DENSE_PEAK_FLOPS = 989e12
TARGET_PEAK_FRACTION = 0.30
RECORD_FIELDS = (
    "date",
    "gpu",
    "gpu_count",
    "precision",
    "batch_size",
    "window_length",
    "train_windows_per_s",
    "pipeline_windows_per_s",
    "torch_version",
)


class SeedsStyleDataset(TorchDataset):
    """What the seeds' trainer does: one Python call and two tensors per window."""

    def __init__(self, windows: np.ndarray, labels: np.ndarray) -> None:
        self.windows, self.labels = windows, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.tensor(self.windows[index], dtype=torch.float32).unsqueeze(0)
        return window, torch.tensor(self.labels[index], dtype=torch.float32)


def _rate(run: Callable[[], int], budget_s: float, max_rounds: int) -> float:
    """Windows/s of `run` (returns windows done) over up to `budget_s` or `max_rounds`."""
    done, start = 0, time.perf_counter()
    for _ in range(max_rounds):
        done += run()
        if time.perf_counter() - start >= budget_s:
            break
    return done / (time.perf_counter() - start)


def _synthetic(windows: int) -> Dataset:
    rng = np.random.default_rng(0)
    data = rng.normal(size=(windows, WINDOW_LENGTH)).astype(np.float32)
    glucose = rng.uniform(70, 250, windows).astype(np.float32)
    case_id = np.arange(windows, dtype=np.int32) % 16
    return Dataset(Path("<bench>"), data, glucose, case_id, {}, "bench")


def pipeline_rates(dataset: Dataset, choice: DeviceChoice, batch: int, budget_s: float):
    """(ours, baseline) windows/s of delivering shuffled batches, no model."""
    norm = Normalisation(0.0, 1.0, 150.0, 50.0, 150.0)
    ours = WindowPipeline(dataset, list(range(16)), norm, choice.device, batch)
    epoch = iter(range(10**9))

    def our_epoch() -> int:
        order = ours.permutation(0, next(epoch))
        for step in range(ours.steps_per_epoch):
            ours.batch(order, step)
        if choice.device.type == "cuda":
            torch.cuda.synchronize()
        return len(ours)

    loader = DataLoader(
        SeedsStyleDataset(dataset.windows, dataset.glucose),
        batch_size=BASELINE_BATCH_SIZE,
        shuffle=True,
    )

    def baseline_epoch() -> int:
        return sum(x.shape[0] for x, _ in loader)

    return _rate(our_epoch, budget_s, 10_000), _rate(baseline_epoch, budget_s, 100)


def _timed_steps(
    step: Callable[[], int], choice: DeviceChoice, budget_s: float, max_steps: int
) -> float:
    """Windows/s over steps run until `budget_s` or `max_steps`, after two warm-up steps."""
    for _ in range(2):  # warm-up: allocator, oneDNN/cuDNN kernel choice
        step()
    _sync(choice)
    done, start = 0, time.perf_counter()
    for _ in range(max_steps):
        done += step()
        if time.perf_counter() - start >= budget_s:
            break
    _sync(choice)  # the GPU may still be working through queued steps
    return done / (time.perf_counter() - start)


def _model_and_optimizer(choice: DeviceChoice):
    torch.manual_seed(0)
    model = build_model(ModelConfig("resnet34")).to(choice.device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def our_train_rate(
    pipeline: WindowPipeline, choice: DeviceChoice, budget_s: float, max_steps: int
) -> float:
    """Our step: batches indexed from the resident tensor, autocast, no host sync."""
    model, optimizer = _model_and_optimizer(choice)
    order = pipeline.permutation(0, 0)
    position = iter(range(10**9))

    def step() -> int:
        x, y = pipeline.batch(order, next(position) % pipeline.steps_per_epoch)
        with choice.autocast():
            loss = F.smooth_l1_loss(model(x).float(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return x.shape[0]

    return _timed_steps(step, choice, budget_s, max_steps)


def baseline_train_rate(
    dataset: Dataset, choice: DeviceChoice, budget_s: float, max_steps: int
) -> float:
    """The seeds' step: DataLoader batches of 64, fp32, `loss.item()` every step."""
    model, optimizer = _model_and_optimizer(choice)
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

    return _timed_steps(step, choice, budget_s, max_steps)


def _sync(choice: DeviceChoice) -> None:
    if choice.device.type == "cuda":
        torch.cuda.synchronize()


def train_flops_per_window() -> float:
    """FLOPs of forward + backward for one window (counted on CPU, batch 2)."""
    model = build_model(ModelConfig("resnet34")).train()
    x = torch.randn(2, 1, WINDOW_LENGTH)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops() / 2


def _device_name(choice: DeviceChoice) -> tuple[str, int]:
    if choice.device.type == "cuda":
        return torch.cuda.get_device_name(choice.device), torch.cuda.device_count()
    return "cpu", 0


def append_record(path: Path, result: dict[str, Any]) -> None:
    """Append one row to a measured-throughput CSV (header when the file is new)."""
    new = not path.exists() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RECORD_FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(result)


def measure(quick: bool, batch_size: int | None) -> dict[str, Any]:
    """Every number the bench reports, as one dict."""
    choice = choose_device("auto")
    batch = batch_size or (GPU_BATCH_SIZE if choice.device.type == "cuda" else CPU_BATCH_SIZE)
    windows = 4 * batch if quick else 32 * batch
    budget_s, max_steps = (0.5, 1) if quick else (20.0, 10_000)
    dataset = _synthetic(max(windows, 4 * BASELINE_BATCH_SIZE))
    pipeline, baseline_pipeline = pipeline_rates(dataset, choice, batch, 0.2 if quick else 3.0)
    norm = Normalisation(0.0, 1.0, 150.0, 50.0, 150.0)
    train_pipeline = WindowPipeline(dataset, list(range(16)), norm, choice.device, batch)
    train = our_train_rate(train_pipeline, choice, budget_s, max_steps)
    baseline_train = baseline_train_rate(dataset, choice, budget_s, max_steps)
    flops = train_flops_per_window()
    gpu, gpu_count = _device_name(choice)
    return {
        "pipeline_windows_per_s": pipeline,
        "train_windows_per_s": train,
        "baseline_pipeline_windows_per_s": baseline_pipeline,
        "baseline_train_windows_per_s": baseline_train,
        "pipeline_speedup": pipeline / baseline_pipeline,
        "train_speedup": train / baseline_train,
        "train_flops_per_window": flops,
        "h100_30pct_peak_windows_per_s": TARGET_PEAK_FRACTION * H100_BF16_DENSE_PEAK_FLOPS / flops,
        "device": choice.description,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": gpu,
        "gpu_count": gpu_count,
        "precision": choice.precision,
        "batch_size": batch,
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
    )
    print(
        f"ResNet34-1D: {result['train_flops_per_window'] / 1e9:.3f} GFLOP per training window; "
        f"30% of an H100's bf16 dense peak = "
        f"{result['h100_30pct_peak_windows_per_s']:,.0f} windows/s"
    )


def run_bench(json_output: bool, record: Path | None, quick: bool, batch_size: int | None) -> int:
    result = measure(quick, batch_size)
    if json_output:
        print(json.dumps(result, indent=2))
    else:
        _print_text(result)
    if record is not None:
        append_record(Path(record), result)
    return 0
