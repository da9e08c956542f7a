"""Training windows per second on a box of GPUs at the batch the trainer takes: measured
where we have it, modelled from the measurements otherwise, never beyond what the GPUs'
datasheets allow.

Measured rows come from `ops/plan/measured_throughput.csv` (`python -m trainer bench
--record` appends them on a real box), each naming the step it timed: `graph` (the
whole step replayed as one CUDA graph) or `eager` (launched kernel by kernel).

- The captured step is the GPU's own work: a fixed time a step (the graph's launch, the
  optimizer over every parameter) plus a time per window. A GPU's graph rows at two
  batch sizes give both (`StepCost`), so its speed at any batch follows. A GPU without
  them is modelled (`StepModel`): the fixed time the measured GPUs took, and a time per
  window of its datasheet compute plus memory traffic (`ops.plan.workload`) times the
  factor the measured GPUs needed (medians over them). With no GPU measured at two
  batches, the estimate is the share of peak the measured GPUs sustained, or an assumed
  one while none is.
- The eager step (the trainer's fallback: `--no-graph`,
  a failed capture) has the host issue some 850 kernels while the GPU runs them: a step
  takes the longer of the two, not their sum (`HostBoundCost`). Its rows say how long
  the host takes (about the same at every batch while it is the bottleneck); the GPU's
  work is the captured step's. A line through host-bound rows would give a fraction of
  the GPU's real cost a window and, extrapolated, an eager step faster than the captured.
- A box of N GPUs (torchrun, one rank per GPU) runs N times one GPU's step at the
  per-rank batch the trainer takes, each keeping the share of its time the gradients'
  all-reduce leaves it (`ddp_scaling`): one flat bucket after the backward pass (inside
  the graph of a captured step), nothing hiding it. So no box plans more than N of its
  one-GPU rows. The trainer's global batch is the same at any GPU count
  (`trainer.loop.defaults.global_batch`), so N GPUs each take 1/N of it: where that
  share is small a GPU's step is mostly its fixed cost (`Throughput.fixed_fraction`),
  and N GPUs train little faster than one (8 H100s at M1: 128 windows a GPU, ~1.4x).
- No box plans more than N times its GPU's roofline
  (`ops.plan.workload.roofline_windows_per_s`): a figure above it is capped, saying so.

Plain arithmetic and the standard library: `fab plan` must start without torch.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ops.plan.scaling import ddp_scaling
from ops.plan.workload import (
    Precision,
    datasheet_window_s,
    peak_tflops,
    roofline_windows_per_s,
    train_flops_per_window,
    training_precision,
)
from stack.catalog import GPUS, GpuSpec
from trainer.bench.throughput_record import RECORD_FIELDS
from trainer.loop.defaults import per_rank_batch

MEASURED_CSV = Path(__file__).with_name("measured_throughput.csv")
# The CSV's columns are the trainer's (`bench --record` writes the rows).
MEASURED_COLUMNS = RECORD_FIELDS

# An assumption, not a measurement, used only while no GPU of the catalog has a measured
# captured row: the fraction of the datasheet tensor peak a training step sustains.
# Large 2-D conv nets reach roughly 20-30% on A100/H100; our 1-D convolutions are thin
# in the early layers and the model is small enough for kernel-launch overhead to show,
# so we assume half the trainer's 30% design target. Measured rows replace it: their own
# GPU's, and for the other GPUs the share of peak they sustained (`fitted_peak_fraction`).
ESTIMATED_PEAK_FRACTION = 0.15

# The per-GPU batch of a row costed without a dataset (a smallest GPU default).
GPU_BATCH = per_rank_batch("cuda", 0)

StepKind = Literal["graph", "eager"]
# Every GPU count replays the captured step by default (`trainer.loop.step`); the eager
# step is what a run forced off it takes.
DEFAULT_STEP: StepKind = "graph"
# What `fab plan` calls each step.
STEP_NAMES: dict[StepKind, str] = {"graph": "captured", "eager": "eager"}
Source = Literal["measured", "scaled from 1x measured", "modelled", "estimated"]
# A box of several GPUs whose one GPU was measured, not the box: `_on_gpus` scales it.
SCALED: Source = "scaled from 1x measured"
# Least known first: a figure built from two is as known as the less known of them.
SOURCES: tuple[Source, ...] = ("estimated", "modelled", SCALED, "measured")


@dataclass(frozen=True)
class Throughput:
    """Training windows/s of one box, where the number comes from, and the step it
    assumes."""

    windows_per_s: float
    precision: Precision
    source: Source
    detail: str
    step: StepKind = DEFAULT_STEP
    fixed_fraction: float | None = None
    """Of one GPU's step at its batch, the share that is its fixed cost (the graph's
    launch, the optimizer; an eager step's host launches); None where unknown."""


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


def _of_kind(row: MeasuredThroughput, kind: StepKind) -> bool:
    # A row's step reads "<graph|eager> <formulation>[ (how it was measured)]".
    return row.step.split(" ", 1)[0] == kind


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


def _median(values: list[float]) -> float:
    ordered, middle = sorted(values), len(values) // 2
    return (ordered[middle] + ordered[~middle]) / 2


def fitted_peak_fraction(
    measured: tuple[MeasuredThroughput, ...], window_length: int
) -> tuple[float, int] | None:
    """The median share of its datasheet peak (at the precision it ran) that each
    measured catalog GPU's newest one-GPU captured row sustained at `window_length`, and
    how many GPUs that is; None without such a row. Eager rows say how fast a host
    launches, not what a GPU sustains."""
    newest: dict[str, MeasuredThroughput] = {}
    for row in sorted(measured, key=lambda r: r.date):
        spec = next((g for g in GPUS.values() if gpu_matches(row.gpu, g.model)), None)
        usable = (
            row.gpu_count == 1 and row.window_length == window_length and _of_kind(row, "graph")
        )
        if spec is not None and usable and row.precision in ("bf16", "fp16"):
            newest[spec.model] = row
    fractions = sorted(
        row.train_windows_per_s
        * train_flops_per_window(window_length)
        / (peak_tflops(GPUS[model], row.precision) * 1e12)
        for model, row in newest.items()
    )
    if not fractions:
        return None
    return _median(fractions), len(fractions)


@dataclass(frozen=True)
class StepCost:
    """One GPU's captured step: `fixed_s` a step plus `window_s` a window; `step`: the
    measured rows' step it was fitted to."""

    fixed_s: float
    window_s: float
    step: str = ""

    def windows_per_s(self, batch: int) -> float:
        return batch / (self.fixed_s + batch * self.window_s)

    def fixed_fraction(self, batch: int) -> float:
        """Of a step of `batch` windows, the share that is the fixed cost."""
        return self.fixed_s / (self.fixed_s + batch * self.window_s)


def measured_cost(rows: list[MeasuredThroughput], batch: int = GPU_BATCH) -> StepCost | None:
    """The cost of the step fastest at `batch` among the rows' steps measured at two
    batch sizes or more (a line through the newest rows at its smallest and largest
    batch), as the trainer times its formulations and takes the fastest; None without
    such a step. `rows`: captured, oldest first (an eager row is bound by the host, and
    a line through such rows is no cost of the GPU's: `eager_cost`)."""
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
    """A GPU's captured step cost from its datasheet: the measured GPUs' fixed time a
    step, and `factor` times its compute-plus-memory time a window (medians over
    `gpus`)."""

    fixed_s: float
    factor: float
    gpus: int

    def cost(self, gpu: GpuSpec, window_length: int) -> StepCost:
        return StepCost(self.fixed_s, self.factor * datasheet_window_s(gpu, window_length))


def fit_step_model(
    measured: tuple[MeasuredThroughput, ...], window_length: int, batch: int = GPU_BATCH
) -> StepModel | None:
    """The model of the captured step at `batch` fitted to every catalog GPU measured
    captured at two batch sizes; None without."""
    costs = {}
    for model, gpu in GPUS.items():
        rows = _one_gpu(_gpu_rows(measured, gpu, window_length, "graph"))
        if (cost := measured_cost(rows, batch)) is not None:
            costs[model] = cost
    if not costs:
        return None
    return StepModel(
        fixed_s=_median([c.fixed_s for c in costs.values()]),
        factor=_median(
            [c.window_s / datasheet_window_s(GPUS[m], window_length) for m, c in costs.items()]
        ),
        gpus=len(costs),
    )


@dataclass(frozen=True)
class HostBoundCost:
    """One GPU's eager step in one formulation: the host issues its kernels one by one
    while the GPU runs them, so a step takes the longer of the two, never their sum.

    `rows`: the (batch, seconds) its measured steps took. The host's launches take
    about as long at every batch, so `host_s` is the shortest of them; the GPU's work
    is the captured step's, given to `step_s`. The rows bound the rest: a step of more
    windows never takes less time than one measured, and one of fewer never trains a
    window faster (a GPU's work is a fixed part and a part per window)."""

    rows: tuple[tuple[int, float], ...]
    step: str = ""

    @property
    def host_s(self) -> float:
        return min(seconds for _, seconds in self.rows)

    def step_s(self, batch: int, gpu_s: float) -> float:
        """Seconds a step of `batch` windows takes where the GPU's work is `gpu_s`."""
        measured = max(seconds * min(1.0, batch / size) for size, seconds in self.rows)
        return max(self.host_s, gpu_s, measured)


def _host_bound_costs(rows: list[MeasuredThroughput]) -> list[HostBoundCost]:
    """Each eager step's cost from its newest row at each batch (`rows` oldest first)."""
    costs = []
    for step in dict.fromkeys(r.step for r in rows):
        newest = {
            r.batch_size: r.batch_size / r.train_windows_per_s for r in rows if r.step == step
        }
        costs.append(HostBoundCost(tuple(newest.items()), step))
    return costs


def eager_cost(rows: list[MeasuredThroughput], batch: int, gpu_s: float) -> HostBoundCost | None:
    """The eager step fastest at `batch` among one GPU's eager `rows` (oldest first),
    where its GPU's work takes `gpu_s`, as the trainer times its formulations and takes
    the fastest; None without rows."""
    costs = _host_bound_costs(rows)
    return min(costs, key=lambda cost: cost.step_s(batch, gpu_s), default=None)


def fitted_host_s(
    measured: tuple[MeasuredThroughput, ...], window_length: int
) -> tuple[float, int] | None:
    """The host's time of an eager step for a GPU without eager rows: the median over
    the catalog GPUs measured eager of the shortest step each took, and how many GPUs
    that is; None without eager rows. The host, not the GPU, sets it while it binds."""
    floors = []
    for gpu in GPUS.values():
        rows = _one_gpu(_gpu_rows(measured, gpu, window_length, "eager"))
        if costs := _host_bound_costs(rows):
            floors.append(min(cost.host_s for cost in costs))
    return (_median(floors), len(floors)) if floors else None


def _captured(
    gpu: GpuSpec, window_length: int, measured: tuple[MeasuredThroughput, ...], batch: int
) -> Throughput:
    """One GPU's captured step at `batch`: its step cost from its own rows, else its
    newest row as it was measured, else the model (`_modelled`)."""
    rows = _one_gpu(_gpu_rows(measured, gpu, window_length, "graph"))
    cost = measured_cost(rows, batch)
    if cost is not None:
        said = _said(next(r for r in reversed(rows) if r.step == cost.step))
        detail = f"{said}, its step cost at batch {batch}"
        rate, fixed = cost.windows_per_s(batch), cost.fixed_fraction(batch)
        return Throughput(rate, training_precision(gpu), "measured", detail, fixed_fraction=fixed)
    if rows:
        row = rows[-1]
        return Throughput(row.train_windows_per_s, training_precision(gpu), "measured", _said(row))
    return _modelled(gpu, window_length, measured, batch)


def _modelled(
    gpu: GpuSpec, window_length: int, measured: tuple[MeasuredThroughput, ...], batch: int
) -> Throughput:
    """One GPU's captured step at `batch` from the GPUs measured: the model fitted to
    them (`fit_step_model`), else the share of peak they sustained, else
    `ESTIMATED_PEAK_FRACTION`."""
    precision = training_precision(gpu)
    model = fit_step_model(measured, window_length, batch)
    if model is not None:
        detail = (
            f"batch {batch}: {model.fixed_s * 1e3:.2f} ms a step + {model.factor:.2f} x "
            f"(compute + memory) a window, fitted to {model.gpus} measured GPU(s)"
        )
        cost = model.cost(gpu, window_length)
        fixed = cost.fixed_fraction(batch)
        return Throughput(
            cost.windows_per_s(batch), precision, "modelled", detail, fixed_fraction=fixed
        )
    fitted = fitted_peak_fraction(measured, window_length)
    fraction = fitted[0] if fitted else ESTIMATED_PEAK_FRACTION
    rate = peak_tflops(gpu, precision) * 1e12 * fraction / train_flops_per_window(window_length)
    basis = f"as {fitted[1]} measured GPU(s) sustained" if fitted else "assumed"
    return Throughput(rate, precision, "estimated", f"{fraction:.0%} of {precision} peak ({basis})")


def _eager(
    gpu: GpuSpec,
    window_length: int,
    measured: tuple[MeasuredThroughput, ...],
    batch: int,
    captured: Throughput,
) -> Throughput:
    """One GPU's eager step at `batch`: the longer of its host's launches (its own
    eager rows, else the other GPUs', else unknown) and its GPU's work (`captured`)."""
    gpu_s = batch / captured.windows_per_s
    rows = _one_gpu(_gpu_rows(measured, gpu, window_length, "eager"))
    if (own := eager_cost(rows, batch, gpu_s)) is not None:
        host_s, host, said = own.host_s, "measured", f"{own.step} rows"
        step_s = own.step_s(batch, gpu_s)
    elif (fitted := fitted_host_s(measured, window_length)) is not None:
        host_s, host, said = fitted[0], "modelled", f"as {fitted[1]} measured GPU(s)' eager rows"
        step_s = max(host_s, gpu_s)
    else:  # no host measured: the captured step bounds it
        host_s, host, said = 0.0, "estimated", "unmeasured"
        step_s = gpu_s
    detail = (
        f"eager, {step_s * 1e3:.1f} ms a step at batch {batch}: at least the host's "
        f"{host_s * 1e3:.1f} ms ({said}) and the GPU's {gpu_s * 1e3:.1f} ms "
        f"(captured: {captured.detail})"
    )
    source = min(captured.source, host, key=SOURCES.index)
    # The host's launches are the same at every batch: while they bind, a fixed cost.
    known = host_s or captured.fixed_fraction is not None
    fixed = max(host_s, gpu_s * (captured.fixed_fraction or 0.0)) / step_s if known else None
    return Throughput(batch / step_s, captured.precision, source, detail, "eager", fixed)


def _on_gpus(per_gpu: Throughput, batch: int, gpu_count: int, gpu_link: str | None) -> Throughput:
    """A box's GPUs, one rank each at `batch`: each at the share of one GPU's rate the
    gradients' all-reduce leaves it."""
    if gpu_count == 1:
        return per_gpu
    scaling = ddp_scaling(per_gpu.windows_per_s, batch, gpu_count, gpu_link)
    fixed = per_gpu.fixed_fraction
    share = f" (its fixed cost {fixed:.0%} of the step)" if fixed is not None else ""
    detail = (
        f"{per_gpu.detail}{share}, x{gpu_count} GPUs at {scaling.efficiency:.0%} (all-reduce "
        f"of one bucket over {scaling.link} after the backward pass)"
    )
    rate = per_gpu.windows_per_s * gpu_count * scaling.efficiency
    # Only one GPU was measured: the box's figure is that one scaled, not a measurement.
    source = SCALED if per_gpu.source == "measured" else per_gpu.source
    return replace(per_gpu, windows_per_s=rate, detail=detail, source=source)


def _under_roofline(
    box: Throughput, gpu: GpuSpec, gpu_count: int, window_length: int
) -> Throughput:
    """`box`, at most `gpu_count` times the GPU's roofline: above it, a datasheet
    figure, the traffic count or a row is wrong, and the row says it was capped."""
    bound = gpu_count * roofline_windows_per_s(gpu, window_length)
    if box.windows_per_s <= bound:
        return box
    detail = f"{box.detail}; capped at {gpu_count} x the {gpu.model}'s roofline"
    return replace(box, windows_per_s=bound, detail=detail)


def throughput(
    gpu: GpuSpec,
    gpu_count: int,
    window_length: int,
    measured: tuple[MeasuredThroughput, ...] = (),
    gpu_link: str | None = None,
    batch: int = GPU_BATCH,
    kind: StepKind = DEFAULT_STEP,
) -> Throughput:
    """Windows/s of a box of `gpu_count` GPUs (linked by `gpu_link`) at `batch` a GPU,
    stepping `kind`: its row at this GPU count, batch and step as measured; else
    one GPU's step on each (`_captured`, through `_eager` for an eager step) at the
    share the all-reduce leaves (`ddp_scaling`). Never above the GPUs' roofline."""
    rows = _gpu_rows(measured, gpu, window_length, kind)
    # The newest row of each formulation; the trainer takes the fastest.
    exact = {r.step: r for r in rows if r.gpu_count == gpu_count and r.batch_size == batch}
    if exact:
        row = max(exact.values(), key=lambda r: r.train_windows_per_s)
        precision = training_precision(gpu)
        box = Throughput(row.train_windows_per_s, precision, "measured", _said(row), kind)
    else:
        per_gpu = _captured(gpu, window_length, measured, batch)
        if kind == "eager":
            per_gpu = _eager(gpu, window_length, measured, batch, per_gpu)
        box = _on_gpus(per_gpu, batch, gpu_count, gpu_link)
    return _under_roofline(box, gpu, gpu_count, window_length)


def _said(row: MeasuredThroughput) -> str:
    return f"{row.date}, {row.step or 'step unrecorded'}, batch {row.batch_size}"
