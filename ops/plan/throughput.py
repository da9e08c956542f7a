"""Training windows per second on a GPU at the batch the trainer takes: measured where
we have it, modelled from the measurements otherwise.

Measured rows come from `ops/plan/measured_throughput.csv`, which `python -m trainer
bench --record` appends to on a real box, two rows a GPU at two batch sizes: a step
costs a fixed time (its launch, the optimizer over every parameter) plus a time per
window, and the two rows give both (`StepCost`), so the GPU's speed at any batch
follows. A GPU without rows is modelled (`StepModel`): the fixed time the measured GPUs
took, and a time per window of its datasheet's compute (FLOPs per window over the peak)
plus memory traffic (bytes per window over the bandwidth), times the factor the
measured GPUs needed to match (medians over them). With no GPU measured at two batches,
the estimate is the FLOPs against the peak at the share the measured GPUs sustained,
or at an assumed share while none is.

Every figure is of the step the run will take (`step_kind`): one GPU replays its whole
step as one CUDA graph; several GPUs (torchrun DDP) step eagerly, bound by the host's
kernel launches (`trainer.loop.step`: on an H100 the eager step ran at a fifth of the
captured one at batch 1024), so they are planned from the eager rows. They keep the
share of that per-GPU rate that `ddp_scaling` models: each step's compute against the
ring all-reduce of the fp32 gradients over the slowest link, partly hidden behind the
backward pass. Plain arithmetic and the standard library: `fab plan` must start
without torch.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stack.catalog import GPU_LINKS, GPUS, GpuSpec
from trainer.bench.throughput_record import RECORD_FIELDS
from trainer.loop.defaults import per_rank_batch, train_windows_of

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

# An assumption, not a measurement, used only while no GPU of the catalog has a measured
# row: the fraction of the datasheet tensor peak a training step sustains. Large 2-D
# conv nets reach roughly 20-30% on A100/H100; our 1-D convolutions are thin in the
# early layers and the model is small enough for kernel-launch overhead to show, so we
# assume half the trainer's 30% design target. Measured rows replace it: their own
# GPU's, and for the other GPUs the share of peak they sustained (`fitted_peak_fraction`).
ESTIMATED_PEAK_FRACTION = 0.15

# DDP, per optimizer step: every rank all-reduces the fp32 gradients of all
# parameters (autocast computes in bf16/fp16, the gradients stay fp32).
MODEL_PARAMETERS = 7_218_753  # ResNet34-1D (trainer/model.py; tests/trainer/test_model.py)
GRADIENT_BYTES = MODEL_PARAMETERS * 4  # 28.9 MB
DDP_BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb default: the gradients go in 2 buckets
# Per GPU and direction, from the datasheets: NVLink 2/3/4 = 6/12/18 links x 25 GB/s
# (V100 SXM2 / A100 SXM4 / H100 SXM5), the H100 NVL pair's bridge 600 GB/s both ways,
# PCIe x16 gen 3/4 = 16/32 GB/s.
LINK_GB_S = {
    "PCIe 3.0": 16.0,
    "PCIe 4.0": 32.0,
    "NVLink 2": 150.0,
    "NVLink 3": 300.0,
    "NVLink 4 bridge": 300.0,
    "NVLink 4": 450.0,
}
assert set(LINK_GB_S) == set(GPU_LINKS)
# nccl-tests' all-reduce bus bandwidth reaches about this share of the link rate at
# message sizes like our 25 MB buckets; assumed alike for Ethernet between boxes
# (NCCL's socket transport on plain VPC/VNet networking, no EFA or InfiniBand).
LINK_EFFICIENCY = 0.75
# A ring all-reduce over P ranks on N boxes is 2(P-1) steps in sequence; as in NCCL's
# own tuning model, 2(P-N) of them pay a hop inside a box, 2(N-1) one across the network.
HOP_LATENCY_S = {"box": 5e-6, "network": 50e-6}
# DDP starts a bucket's all-reduce when its gradients are ready. Backward runs from the
# head: the last stage's gradients (3/4 of the parameters) are ready first, then
# stages 3..1 and the stem. We assume half the backward pass is left to hide the
# all-reduce behind; the optimizer step waits for all of it.
OVERLAPPED_BACKWARD_FRACTION = 0.5
# Memory traffic of one training window, an assumption the fitted factor scales: each
# convolution's output (bf16) is written and read about this many times in a step:
# forward (convolution, batch norm, ReLU, the residual add) and backward (about twice).
ACTIVATION_ACCESSES = 15
ACTIVATION_BYTES = 2
# The per-GPU batch of a row costed without a dataset (a smallest GPU default).
GPU_BATCH = per_rank_batch("cuda", 0)

Precision = Literal["bf16", "fp16"]
StepKind = Literal["graph", "eager"]


def step_kind(gpu_count: int) -> StepKind:
    """The step a run on `gpu_count` GPUs takes: one GPU's is captured, DDP's is eager
    (`trainer.loop.step.eager_reason`)."""
    return "graph" if gpu_count == 1 else "eager"


def _of_kind(row: MeasuredThroughput, kind: StepKind) -> bool:
    # A row's step reads "<graph|eager> <formulation>[ (how it was measured)]".
    return row.step.split(" ", 1)[0] == kind


def _conv_out(length: int, kernel: int, stride: int, padding: int) -> int:
    return (length + 2 * padding - kernel) // stride + 1


def _conv_outputs(window_length: int) -> list[tuple[int, int, int, int]]:
    """(in channels, out channels, kernel, output length) of each convolution of
    ResNet34-1D, the 1x1 projection shortcuts included, in order."""
    if window_length < 32:
        raise ValueError(f"window length {window_length} is below the model's minimum of 32")
    length = _conv_out(window_length, STEM_KERNEL, 2, STEM_KERNEL // 2)
    convs = [(1, RESNET_WIDTHS[0], STEM_KERNEL, length)]
    length = _conv_out(length, 3, 2, 1)  # max pool
    channels = RESNET_WIDTHS[0]
    for stage, (blocks, width) in enumerate(zip(RESNET34_BLOCKS, RESNET_WIDTHS, strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out = _conv_out(length, BLOCK_KERNEL, stride, BLOCK_KERNEL // 2)
            convs += [(channels, width, BLOCK_KERNEL, out), (width, width, BLOCK_KERNEL, out)]
            if stride != 1 or channels != width:
                convs.append((channels, width, 1, out))  # 1x1 projection shortcut
            channels, length = width, out
    return convs


def forward_flops_per_window(window_length: int) -> int:
    """Forward FLOPs (2 x multiply-accumulates) of ResNet34-1D for one window.

    Convolutions and the linear head only: batch norm, ReLU and pooling add well
    under 1% and are memory-bound work that the efficiency factor already covers.
    """
    convs = _conv_outputs(window_length)
    macs = sum(cin * cout * kernel * out for cin, cout, kernel, out in convs)
    macs += RESNET_WIDTHS[-1] * 1  # linear head to one glucose value
    return 2 * macs


def train_bytes_per_window(window_length: int) -> int:
    """Bytes of activation memory traffic in one training step, per window."""
    elements = sum(cout * out for _, cout, _, out in _conv_outputs(window_length))
    return elements * ACTIVATION_ACCESSES * ACTIVATION_BYTES


def train_flops_per_window(window_length: int) -> int:
    """FLOPs of one training pass (forward + backward) over one window."""
    return TRAIN_FLOPS_PER_FORWARD_FLOP * forward_flops_per_window(window_length)


def training_precision(gpu: GpuSpec) -> Precision:
    """What `--precision auto` picks: bf16 where the GPU has it, fp16 (V100, T4) otherwise."""
    return "bf16" if gpu.bf16_tflops > 0 else "fp16"


def _peak_tflops(gpu: GpuSpec, precision: Precision) -> float:
    return gpu.bf16_tflops if precision == "bf16" else gpu.fp16_tflops


@dataclass(frozen=True)
class DdpScaling:
    """One DDP step on `ranks` GPUs: compute against the gradients' all-reduce."""

    ranks: int
    step_s: float  # one rank's forward + backward + optimizer at its batch
    all_reduce_s: float  # the ring all-reduce of GRADIENT_BYTES over the slowest link
    exposed_s: float  # the part of it the backward pass does not hide
    link: str  # what the slowest link is

    @property
    def efficiency(self) -> float:
        """The share of per-GPU throughput each GPU keeps."""
        return self.step_s / (self.step_s + self.exposed_s)


def ddp_scaling(
    per_gpu_windows_per_s: float,
    per_rank_batch: int,
    gpus_per_box: int,
    gpu_link: str | None,
    boxes: int = 1,
    network_gbit_s: float | None = None,
) -> DdpScaling:
    """How a DDP step of `boxes` x `gpus_per_box` GPUs spends its time.

    A ring all-reduce moves 2(P-1)/P of the gradients through every rank's link; the
    ring is as fast as its slowest: the GPUs' link inside one box, the network
    (`network_gbit_s`, Gb/s) between boxes.
    """
    ranks = gpus_per_box * boxes
    step_s = per_rank_batch / per_gpu_windows_per_s
    if ranks == 1:
        return DdpScaling(1, step_s, 0.0, 0.0, "none")
    if boxes > 1:
        if network_gbit_s is None:
            raise ValueError(f"{boxes} boxes: give the network's speed between them (Gb/s)")
        link, link_gb_s = f"{network_gbit_s:g} Gb/s network", network_gbit_s / 8
    elif gpu_link in LINK_GB_S:
        link, link_gb_s = gpu_link, LINK_GB_S[gpu_link]
    else:
        raise ValueError(f"{gpus_per_box} GPUs linked by {gpu_link!r}: expected one of {GPU_LINKS}")
    moved = 2 * (ranks - 1) / ranks * GRADIENT_BYTES
    hops_s = 2 * (ranks - boxes) * HOP_LATENCY_S["box"] + 2 * (boxes - 1) * HOP_LATENCY_S["network"]
    buckets = -(-GRADIENT_BYTES // DDP_BUCKET_BYTES)
    all_reduce_s = moved / (link_gb_s * 1e9 * LINK_EFFICIENCY) + buckets * hops_s
    backward_s = step_s * (TRAIN_FLOPS_PER_FORWARD_FLOP - 1) / TRAIN_FLOPS_PER_FORWARD_FLOP
    exposed_s = max(0.0, all_reduce_s - OVERLAPPED_BACKWARD_FRACTION * backward_s)
    return DdpScaling(ranks, step_s, all_reduce_s, exposed_s, link)


def ddp_assumptions() -> dict[str, Any]:
    """The scaling model's inputs, for `fab plan --json`."""
    return {
        "gradient_mb": GRADIENT_BYTES / 1e6,
        "link_gb_s": LINK_GB_S,
        "link_efficiency": LINK_EFFICIENCY,
        "hop_latency_us": {hop: seconds * 1e6 for hop, seconds in HOP_LATENCY_S.items()},
        "overlapped_backward_fraction": OVERLAPPED_BACKWARD_FRACTION,
    }


def _on_gpus(per_gpu: float, batch: int, gpu_count: int, gpu_link: str | None) -> tuple[float, str]:
    """Windows/s of a box's GPUs under DDP, and the words that say how it was scaled."""
    if gpu_count == 1:
        return per_gpu, ""
    scaling = ddp_scaling(per_gpu, batch, gpu_count, gpu_link)
    words = (
        f", x{gpu_count} GPUs at {scaling.efficiency:.0%} (DDP over {scaling.link}, eager steps)"
    )
    return per_gpu * gpu_count * scaling.efficiency, words


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
    pipeline_windows_per_s: float | None  # None: not measured with this row
    torch_version: str
    step: str  # what step produced it (`bench`: the formulation, captured or eager)


@dataclass(frozen=True)
class Throughput:
    """Training windows/s of one box, and where the number comes from."""

    windows_per_s: float
    precision: Precision
    source: Literal["measured", "modelled", "estimated"]
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
                        pipeline_windows_per_s=_optional_float(raw["pipeline_windows_per_s"]),
                        torch_version=raw["torch_version"],
                        step=raw["step"],
                    )
                )
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line}: unreadable row ({e}); fix or delete it") from e
    return tuple(rows)


def _optional_float(text: str) -> float | None:
    return float(text) if text.strip() else None


# Device names that do not spell the catalog's memory size (`torch.cuda.get_device_name`).
_DEVICE_ALIASES = {"H100 94GB": ("H100", "NVL")}


def gpu_matches(recorded: str, gpu_model: str) -> bool:
    """Whether a recorded GPU name ("NVIDIA A100-SXM4-80GB") is the catalog's model."""
    if recorded.strip().lower() == gpu_model.lower():
        return True
    tokens = set(re.split(r"[^a-z0-9]+", recorded.lower()))
    wanted = _DEVICE_ALIASES.get(gpu_model, tuple(gpu_model.split()))
    return all(w.lower() in tokens for w in wanted)


def fitted_peak_fraction(
    measured: tuple[MeasuredThroughput, ...], window_length: int, kind: StepKind = "graph"
) -> tuple[float, int] | None:
    """The median share of its datasheet peak (at the precision it ran) that each
    measured catalog GPU's newest one-GPU row of a `kind` step sustained at
    `window_length`, and how many GPUs that is; None without such a row."""
    newest: dict[str, MeasuredThroughput] = {}
    for row in sorted(measured, key=lambda r: r.date):
        spec = next((g for g in GPUS.values() if gpu_matches(row.gpu, g.model)), None)
        usable = row.gpu_count == 1 and row.window_length == window_length and _of_kind(row, kind)
        if spec is not None and usable and row.precision in ("bf16", "fp16"):
            newest[spec.model] = row
    fractions = sorted(
        row.train_windows_per_s
        * train_flops_per_window(window_length)
        / (_peak_tflops(GPUS[model], row.precision) * 1e12)
        for model, row in newest.items()
    )
    if not fractions:
        return None
    return _median(fractions), len(fractions)


@dataclass(frozen=True)
class StepCost:
    """One GPU's training step: `fixed_s` a step plus `window_s` a window; `step`: the
    measured rows' step it was fitted to."""

    fixed_s: float
    window_s: float
    step: str = ""

    def windows_per_s(self, batch: int) -> float:
        return batch / (self.fixed_s + batch * self.window_s)


def _roofline_s(gpu: GpuSpec, window_length: int) -> float:
    """A window's compute at the datasheet peak plus its memory traffic at the datasheet
    bandwidth, in seconds: what `StepModel.factor` scales."""
    peak = _peak_tflops(gpu, training_precision(gpu)) * 1e12
    return train_flops_per_window(window_length) / peak + train_bytes_per_window(window_length) / (
        gpu.memory_tb_s * 1e12
    )


def _gpu_rows(
    measured: tuple[MeasuredThroughput, ...], gpu: GpuSpec, window_length: int, kind: StepKind
) -> list[MeasuredThroughput]:
    """The GPU's rows of a `kind` step at `window_length` and its training precision, at
    any GPU count, oldest first."""
    precision = training_precision(gpu)
    return sorted(
        (
            r
            for r in measured
            if gpu_matches(r.gpu, gpu.model)
            and r.window_length == window_length
            and r.precision == precision
            and _of_kind(r, kind)
        ),
        key=lambda r: r.date,
    )


def _one_gpu(rows: list[MeasuredThroughput]) -> list[MeasuredThroughput]:
    return [r for r in rows if r.gpu_count == 1]


def measured_cost(rows: list[MeasuredThroughput], batch: int = GPU_BATCH) -> StepCost | None:
    """The cost of the step fastest at `batch` among the rows' steps measured at two
    batch sizes or more (a line through the newest rows at its smallest and largest
    batch), as the trainer times its formulations and takes the fastest; None without
    such a step. `rows` oldest first."""
    costs = []
    for step in dict.fromkeys(r.step for r in rows):
        newest = {r.batch_size: r for r in rows if r.step == step}
        if len(newest) >= 2:
            costs.append(_line(newest[min(newest)], newest[max(newest)]))
    return max(costs, key=lambda cost: cost.windows_per_s(batch), default=None)


def _line(small: MeasuredThroughput, large: MeasuredThroughput) -> StepCost:
    small_s = small.batch_size / small.train_windows_per_s
    large_s = large.batch_size / large.train_windows_per_s
    window_s = (large_s - small_s) / (large.batch_size - small.batch_size)
    return StepCost(max(small_s - small.batch_size * window_s, 0.0), window_s, small.step)


@dataclass(frozen=True)
class StepModel:
    """A GPU's step cost from its datasheet: the measured GPUs' fixed time a step, and
    `factor` times its compute-plus-memory time a window (medians over `gpus`)."""

    fixed_s: float
    factor: float
    gpus: int

    def cost(self, gpu: GpuSpec, window_length: int) -> StepCost:
        return StepCost(self.fixed_s, self.factor * _roofline_s(gpu, window_length))


def _median(values: list[float]) -> float:
    ordered, middle = sorted(values), len(values) // 2
    return (ordered[middle] + ordered[~middle]) / 2


def fit_step_model(
    measured: tuple[MeasuredThroughput, ...],
    window_length: int,
    kind: StepKind = "graph",
    batch: int = GPU_BATCH,
) -> StepModel | None:
    """The model of a `kind` step at `batch` fitted to every catalog GPU measured at two
    batch sizes; None without."""
    costs = {
        model: cost
        for model, gpu in GPUS.items()
        if (cost := measured_cost(_one_gpu(_gpu_rows(measured, gpu, window_length, kind)), batch))
        is not None
    }
    if not costs:
        return None
    return StepModel(
        fixed_s=_median([c.fixed_s for c in costs.values()]),
        factor=_median(
            [c.window_s / _roofline_s(GPUS[m], window_length) for m, c in costs.items()]
        ),
        gpus=len(costs),
    )


def estimate(
    gpu: GpuSpec,
    gpu_count: int,
    window_length: int,
    gpu_link: str | None = None,
    measured: tuple[MeasuredThroughput, ...] = (),
    batch: int = GPU_BATCH,
) -> Throughput:
    """Windows/s at `batch` a GPU: modelled (`fit_step_model`) when a GPU was measured at
    two batch sizes, else from FLOPs per window and datasheet peak at the share of peak
    the `measured` GPUs sustained (else `ESTIMATED_PEAK_FRACTION`); and DDP's scaling.
    Each from the rows of the step `gpu_count` GPUs take (`step_kind`)."""
    precision, kind = training_precision(gpu), step_kind(gpu_count)
    model = fit_step_model(measured, window_length, kind, batch)
    if model is not None:
        per_gpu = model.cost(gpu, window_length).windows_per_s(batch)
        windows_per_s, scaled = _on_gpus(per_gpu, batch, gpu_count, gpu_link)
        detail = (
            f"batch {batch}: {model.fixed_s * 1e3:.2f} ms a step + {model.factor:.2f} x "
            f"(compute + memory) a window, fitted to {model.gpus} measured GPU(s){scaled}"
        )
        return Throughput(windows_per_s, precision, "modelled", detail)
    fitted = fitted_peak_fraction(measured, window_length, kind)
    fraction = fitted[0] if fitted else ESTIMATED_PEAK_FRACTION
    flops_per_s = _peak_tflops(gpu, precision) * 1e12 * fraction
    per_gpu = flops_per_s / train_flops_per_window(window_length)
    windows_per_s, scaled = _on_gpus(per_gpu, batch, gpu_count, gpu_link)
    basis = f"as {fitted[1]} measured GPU(s) sustained" if fitted else "assumed"
    return Throughput(
        windows_per_s=windows_per_s,
        precision=precision,
        source="estimated",
        detail=f"{fraction:.0%} of {precision} peak ({basis}){scaled}",
    )


def planned_batch(windows: int, gpus: int) -> int:
    """The per-GPU batch `train` takes for a dataset of `windows` over `gpus` ranks (the
    trainer's own rule, `trainer.loop.defaults`)."""
    return per_rank_batch("cuda", train_windows_of(windows), gpus)


def throughput(
    gpu: GpuSpec,
    gpu_count: int,
    window_length: int,
    measured: tuple[MeasuredThroughput, ...] = (),
    gpu_link: str | None = None,
    batch: int = GPU_BATCH,
) -> Throughput:
    """Windows/s of the box at `batch` a GPU, from the rows of the step it takes
    (`step_kind`): its own measurements (the newest row at this GPU count and batch;
    else its one-GPU step cost at this batch, else its newest one-GPU row as it was
    measured), else the model (`estimate`).

    A one-GPU measurement of the eager step stands in for a multi-GPU box (linked by
    `gpu_link`), scaled by `ddp_scaling` at the batch.
    """
    precision = training_precision(gpu)
    rows = _gpu_rows(measured, gpu, window_length, step_kind(gpu_count))
    exact = [r for r in rows if r.gpu_count == gpu_count and r.batch_size == batch]
    if exact:
        row = exact[-1]
        return Throughput(row.train_windows_per_s, precision, "measured", _said(row))
    single = _one_gpu(rows)
    cost = measured_cost(single, batch)
    if cost is not None:
        windows_per_s, scaled = _on_gpus(cost.windows_per_s(batch), batch, gpu_count, gpu_link)
        said = _said(next(r for r in reversed(single) if r.step == cost.step))
        detail = f"{said}, its step cost at batch {batch}{scaled}"
        return Throughput(windows_per_s, precision, "measured", detail)
    if single:
        row = single[-1]
        windows_per_s, scaled = _on_gpus(
            row.train_windows_per_s, row.batch_size, gpu_count, gpu_link
        )
        return Throughput(windows_per_s, precision, "measured", f"{_said(row)}{scaled}")
    return estimate(gpu, gpu_count, window_length, gpu_link, measured, batch)


def _said(row: MeasuredThroughput) -> str:
    return f"{row.date}, {row.step or 'step unrecorded'}, batch {row.batch_size}"
