"""Training windows per second on a GPU: measured where we have it, estimated otherwise.

Measured rows come from `ops/measured_throughput.csv`, which `python -m trainer bench
--record` appends to on a real box. Without one, the estimate is the model's FLOPs
per training window against the GPU's datasheet peak at a stated efficiency. Plain
arithmetic and the standard library: `fab plan` must start without torch.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ops.catalog import GpuSpec
from trainer.throughput_record import RECORD_FIELDS

MEASURED_CSV = Path(__file__).with_name("measured_throughput.csv")
# The CSV's columns are the trainer's (`bench --record` writes the rows).
MEASURED_COLUMNS = RECORD_FIELDS

# ResNet34-1D as trainer/model.py builds it: the torchvision ResNet34 mapped to 1-D.
RESNET34_BLOCKS = (3, 4, 6, 3)
RESNET_WIDTHS = (64, 128, 256, 512)
BLOCK_KERNEL = 3
STEM_KERNEL = 7

# Backward costs about twice the forward (gradients w.r.t. activations and weights).
TRAIN_FLOPS_PER_FORWARD_FLOP = 3

# An assumption, not a measurement: the fraction of the datasheet tensor peak a
# training step sustains. Large 2-D conv nets reach roughly 20-30% on A100/H100; our
# 1-D convolutions are thin in the early layers and the model is small enough for
# kernel-launch overhead to show, so we assume half the trainer's 30% design target.
# A measured row replaces it for its GPU.
ESTIMATED_PEAK_FRACTION = 0.15
# DDP all-reduces 29 MB of fp32 gradients every step; a small model's steps are short,
# so communication weighs more than for a large one.
MULTI_GPU_SCALING_EFFICIENCY = 0.8

Precision = Literal["bf16", "fp16"]


def _conv_out(length: int, kernel: int, stride: int, padding: int) -> int:
    return (length + 2 * padding - kernel) // stride + 1


def forward_flops_per_window(window_length: int) -> int:
    """Forward FLOPs (2 x multiply-accumulates) of ResNet34-1D for one window.

    Convolutions and the linear head only: batch norm, ReLU and pooling add well
    under 1% and are memory-bound work that the efficiency factor already covers.
    """
    if window_length < 32:
        raise ValueError(f"window length {window_length} is below the model's minimum of 32")
    length = _conv_out(window_length, STEM_KERNEL, 2, STEM_KERNEL // 2)
    macs = 1 * RESNET_WIDTHS[0] * STEM_KERNEL * length
    length = _conv_out(length, 3, 2, 1)  # max pool
    channels = RESNET_WIDTHS[0]
    for stage, (blocks, width) in enumerate(zip(RESNET34_BLOCKS, RESNET_WIDTHS, strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out = _conv_out(length, BLOCK_KERNEL, stride, BLOCK_KERNEL // 2)
            macs += channels * width * BLOCK_KERNEL * out + width * width * BLOCK_KERNEL * out
            if stride != 1 or channels != width:
                macs += channels * width * out  # 1x1 projection shortcut
            channels, length = width, out
    macs += channels * 1  # linear head to one glucose value
    return 2 * macs


def train_flops_per_window(window_length: int) -> int:
    """FLOPs of one training pass (forward + backward) over one window."""
    return TRAIN_FLOPS_PER_FORWARD_FLOP * forward_flops_per_window(window_length)


def training_precision(gpu: GpuSpec) -> Precision:
    """What `--precision auto` picks: bf16 where the GPU has it, fp16 (V100, T4) otherwise."""
    return "bf16" if gpu.bf16_tflops > 0 else "fp16"


def _peak_tflops(gpu: GpuSpec, precision: Precision) -> float:
    return gpu.bf16_tflops if precision == "bf16" else gpu.fp16_tflops


def _multi_gpu_factor(gpu_count: int) -> float:
    return 1.0 if gpu_count == 1 else gpu_count * MULTI_GPU_SCALING_EFFICIENCY


@dataclass(frozen=True)
class MeasuredThroughput:
    """One row of measured_throughput.csv."""

    date: str
    gpu: str  # the catalog's GPU model or the device name torch reports
    gpu_count: int
    precision: str
    batch_size: int
    window_length: int
    train_windows_per_s: float
    pipeline_windows_per_s: float
    torch_version: str


@dataclass(frozen=True)
class Throughput:
    """Training windows/s of one box, and where the number comes from."""

    windows_per_s: float
    precision: Precision
    source: Literal["measured", "estimated"]
    detail: str


def load_measured(path: Path = MEASURED_CSV) -> tuple[MeasuredThroughput, ...]:
    """The measured rows; a missing file means none, a malformed one is an error."""
    if not path.exists():
        return ()
    with path.open(newline="") as f:
        reader = csv.DictReader(row for row in f if not row.startswith("#"))
        if tuple(reader.fieldnames or ()) != MEASURED_COLUMNS:
            raise ValueError(
                f"{path}: header is {reader.fieldnames}, expected {list(MEASURED_COLUMNS)}; "
                "fix the header or re-record with `python -m trainer bench --record`"
            )
        rows = []
        for line, raw in enumerate(reader, start=2):
            try:
                rows.append(
                    MeasuredThroughput(
                        date=raw["date"],
                        gpu=raw["gpu"],
                        gpu_count=int(raw["gpu_count"]),
                        precision=raw["precision"],
                        batch_size=int(raw["batch_size"]),
                        window_length=int(raw["window_length"]),
                        train_windows_per_s=float(raw["train_windows_per_s"]),
                        pipeline_windows_per_s=float(raw["pipeline_windows_per_s"]),
                        torch_version=raw["torch_version"],
                    )
                )
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line}: unreadable row ({e}); fix or delete it") from e
    return tuple(rows)


# Device names that do not spell the catalog's memory size (`torch.cuda.get_device_name`).
_DEVICE_ALIASES = {"H100 94GB": ("H100", "NVL")}


def gpu_matches(recorded: str, gpu_model: str) -> bool:
    """Whether a recorded GPU name ("NVIDIA A100-SXM4-80GB") is the catalog's model."""
    if recorded.strip().lower() == gpu_model.lower():
        return True
    tokens = set(re.split(r"[^a-z0-9]+", recorded.lower()))
    wanted = _DEVICE_ALIASES.get(gpu_model, tuple(gpu_model.split()))
    return all(w.lower() in tokens for w in wanted)


def estimate(gpu: GpuSpec, gpu_count: int, window_length: int) -> Throughput:
    """Windows/s from FLOPs per window, datasheet peak and the stated efficiencies."""
    precision = training_precision(gpu)
    flops_per_s = _peak_tflops(gpu, precision) * 1e12 * ESTIMATED_PEAK_FRACTION
    per_gpu = flops_per_s / train_flops_per_window(window_length)
    return Throughput(
        windows_per_s=per_gpu * _multi_gpu_factor(gpu_count),
        precision=precision,
        source="estimated",
        detail=f"{ESTIMATED_PEAK_FRACTION:.0%} of {precision} peak",
    )


def throughput(
    gpu: GpuSpec,
    gpu_count: int,
    window_length: int,
    measured: tuple[MeasuredThroughput, ...] = (),
) -> Throughput:
    """The newest measurement for this GPU, precision and window length, else the estimate.

    A one-GPU measurement stands in for a multi-GPU box, scaled like the estimate.
    """
    precision = training_precision(gpu)
    rows = sorted(
        (
            r
            for r in measured
            if gpu_matches(r.gpu, gpu.model)
            and r.window_length == window_length
            and r.precision == precision
        ),
        key=lambda r: r.date,
    )
    exact = [r for r in rows if r.gpu_count == gpu_count]
    if exact:
        row = exact[-1]
        return Throughput(row.train_windows_per_s, precision, "measured", f"{row.date}")
    single = [r for r in rows if r.gpu_count == 1]
    if single:
        row = single[-1]
        return Throughput(
            row.train_windows_per_s * _multi_gpu_factor(gpu_count),
            precision,
            "measured",
            f"{row.date}, 1 GPU x{gpu_count} at {MULTI_GPU_SCALING_EFFICIENCY:.0%}",
        )
    return estimate(gpu, gpu_count, window_length)
