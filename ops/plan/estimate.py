"""What a training run costs and how long it takes on every size in the catalog.

`make_plan` is pure arithmetic over what it is given (sizes, prices, measured
throughput), so tests pass a small fixed catalog; `ops/tasks/plan.py` gathers the real
inputs and renders the result. Its prices are `ops.plan.pricing`'s (the catalog's
snapshot, or live); the one price of a box the stack outputs and `fab status` count
with is `stack.catalog.VmSize.hourly_price_usd`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

from ops.plan.batches import (
    DATASET_BYTES_PER_SAMPLE,
    MEASURED_BEST_GLOBAL_BATCH,
    Batches,
    batches,
    planned_batch,
)
from ops.plan.pricing import HourlyPrice, snapshot_price
from ops.plan.scaling import MODEL_PARAMETERS, ddp_assumptions
from ops.plan.throughput import (
    ESTIMATED_PEAK_FRACTION,
    STEP_NAMES,
    MeasuredThroughput,
    StepKind,
    Throughput,
    throughput,
)
from ops.plan.workload import train_flops_per_window
from stack import offerings
from stack.catalog import CLOUDS, VmSize

# The seeds' dataset sizes, in windows.
MILESTONE_WINDOWS = {"M1": 600_000, "M2": 2_400_000, "M3": 12_000_000}

# Billed before the first step: boot, cloud-init, pulling the CUDA image, syncing data.
SETUP_HOURS = 0.25

# A GPU whose step is at least this share fixed cost trains little faster with more GPUs.
MOSTLY_FIXED = 0.5

# A checkpoint holds fp32 weights plus AdamW's two fp32 moments: 12 bytes a parameter.
CHECKPOINT_BYTES_PER_PARAMETER = 4 + 8
KEPT_CHECKPOINTS = 3  # last, best, and the previous last kept as the fallback
RESULTS_EXTRA_GB = 0.05  # metrics.jsonl, TensorBoard events, plots, report
STORAGE_MONTHS = 1.0  # the bucket lives until `pulumi destroy`; a month bounds it

# Object storage and internet egress list prices, USD per GB, as published in 2025:
# Azure Blob Hot LRS (East US, first 50 TB) and internet egress (first 10 TB, zone 1);
# S3 Standard (us-east-1, first 50 TB) and EC2 internet egress (first 10 TB). The
# monthly free egress allowances (100 GB on both) are ignored: this errs high.
STORAGE_PRICE_DATE = "2025"
STORAGE_USD_PER_GB_MONTH = {"azure": 0.0184, "aws": 0.023}
EGRESS_USD_PER_GB = {"azure": 0.087, "aws": 0.09}

GB = 1e9


def dataset_size(meta: dict) -> tuple[int, int]:
    """(windows, window length) of a dataset from its meta.json (prepare-vitaldb's and
    synth's record both; older synth sets give cases x windows per case)."""
    try:
        windows = meta.get("windows") or meta["cases"] * meta["windows_per_case"]
        return int(windows), int(meta["window_length"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            "its meta.json states no window count (windows, window_length); "
            "pass --windows N instead"
        ) from None


def stored_dataset_size(uri: str) -> tuple[int, int]:
    """(windows, window length) of the dataset at `uri`, from its meta.json in storage;
    StorageError, OSError or ValueError when it cannot say."""
    from trainer.storage import open_store

    return dataset_size(json.loads(open_store(uri).read_bytes("meta.json")))


@dataclass(frozen=True)
class PlanRequest:
    """One question for `fab plan`: this many windows, this many epochs, where."""

    windows: int
    epochs: int
    window_length: int = 100
    cloud: str = "all"
    region: str | None = None
    spot: bool = False
    deadline_hours: float | None = None
    dataset: str = ""
    """The prepared dataset whose real window count `windows` is, if any (for the notes)."""
    sweep_trials: int = 0
    """A sweep of this many trials, each a run of `epochs` on one GPU (`fab sweep`: one
    trial per GPU, a box's GPUs each running one); 0: one run over every GPU."""
    graph: bool = True
    """The captured step, every GPU count's default; False: the eager step a run forced
    off it takes (`train --no-graph`, a failed capture)."""

    def __post_init__(self) -> None:
        problems = []
        if self.windows <= 0:
            problems.append(f"--windows is {self.windows}, expected a positive count")
        if self.epochs <= 0:
            problems.append(f"--epochs is {self.epochs}, expected a positive count")
        if self.window_length < 32:
            problems.append(f"--window-length is {self.window_length}, the model needs >= 32")
        if self.cloud not in (*CLOUDS, "all"):
            problems.append(f"--cloud is {self.cloud!r}, expected one of azure, aws, all")
        if self.sweep_trials < 0:
            problems.append(f"--sweep is {self.sweep_trials}, expected a number of trials")
        if self.deadline_hours is not None and not self.deadline_hours > 0:
            problems.append(f"--deadline is {self.deadline_hours}, expected hours > 0")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def step(self) -> StepKind:
        return "graph" if self.graph else "eager"

    @property
    def window_passes(self) -> int:
        """Every window counts as trained each epoch: the train split is smaller and
        validation is forward-only, so this errs on the long side."""
        return self.windows * self.epochs


@dataclass(frozen=True)
class PlanRow:
    """One size's answer. Dollar figures are for the whole run."""

    cloud: str
    size: str
    gpu: str
    gpu_count: int
    precision: str
    windows_per_s: float
    throughput_source: str
    """"measured" (this GPU count measured), "scaled from 1x measured" (one GPU measured,
    the box's GPUs at the all-reduce's share), "modelled" (fitted to measured GPUs) or
    "estimated" (a share of the datasheet peak)."""
    throughput_detail: str
    step: str  # the step the windows/s assume: "captured" (one CUDA graph) or "eager"
    per_gpu_batch: int  # windows a GPU a step: its share of `global_batch`
    global_batch: int  # windows a step over every GPU, as `train` takes it for the data
    batch_departs: str  # why the global batch is not the rule's for the data ("": it is)
    fixed_fraction: float | None  # of a GPU's step, its fixed cost (None: unknown)
    over_one_gpu: float | None  # windows/s over one GPU's of the same GPU (None: one GPU)
    hours: float
    on_demand_usd: float | None  # None: no reference prices the size (the catalog's `unpriced`)
    spot_usd: float | None  # None: no spot figure for this size (spot is volatile anyway)
    usd_per_million_window_passes: float | None
    storage_egress_usd: float
    total_usd: float | None  # compute at the chosen price basis + storage and egress
    price_region: str
    price_source: str
    within_deadline: bool
    pick: bool = False


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    price_basis: str  # "spot" or "on-demand"
    rows: tuple[PlanRow, ...]  # cheapest first
    excluded_retired: tuple[str, ...]
    notes: tuple[str, ...]
    assumptions: dict = field(default_factory=dict)
    snapshot_dates: tuple[str, ...] = ()
    """The dates of the catalog snapshot's prices that rows use (none when all are live)."""
    price_sources: tuple[str, ...] = ()
    """Each dated reference the snapshot's prices of the rows come from, and whose."""
    unpriced: tuple[str, ...] = ()
    """Why each row without dollars has none (where its price was looked for)."""

    def to_json(self) -> dict:
        """Machine-readable form, what `fab plan --json` prints."""
        return {
            "request": asdict(self.request),
            "price_basis": self.price_basis,
            "rows": [asdict(r) for r in self.rows],
            "excluded_retired": list(self.excluded_retired),
            "notes": list(self.notes),
            "price_sources": list(self.price_sources),
            "unpriced": list(self.unpriced),
            "assumptions": self.assumptions,
        }


def checkpoint_gb() -> float:
    """Size of one checkpoint (weights + AdamW state), GB."""
    return MODEL_PARAMETERS * CHECKPOINT_BYTES_PER_PARAMETER / GB


def storage_egress_usd(cloud: str, windows: int, window_length: int, runs: int = 1) -> float:
    """A month of storage for dataset and checkpoints (of every run of a sweep), plus
    downloading one run's results."""
    dataset_gb = windows * window_length * DATASET_BYTES_PER_SAMPLE / GB
    results_gb = KEPT_CHECKPOINTS * checkpoint_gb() + RESULTS_EXTRA_GB
    stored_gb = dataset_gb + runs * results_gb
    return (
        stored_gb * STORAGE_USD_PER_GB_MONTH[cloud] * STORAGE_MONTHS
        + results_gb * EGRESS_USD_PER_GB[cloud]
    )


def _compute_hours(
    request: PlanRequest, size: VmSize, run: Batches, measured
) -> tuple[float, Throughput]:
    """Hours of training on `size` and the throughput they rest on: one run over every
    GPU, or a sweep's trials one GPU each, as many at once as the box has GPUs."""
    length = request.window_length
    if not request.sweep_trials:
        tp = throughput(
            size.gpu, size.gpu_count, length, measured, size.gpu_link, run.per_gpu, request.step
        )
        return request.window_passes / tp.windows_per_s / 3600, tp
    tp = throughput(size.gpu, 1, length, measured, batch=run.per_gpu, kind=request.step)
    waves = math.ceil(request.sweep_trials / size.gpu_count)
    return waves * request.window_passes / tp.windows_per_s / 3600, tp


def _over_one_gpu(
    request: PlanRequest, size: VmSize, run: Batches, tp: Throughput, measured
) -> float | None:
    """The box's windows/s over one of its GPUs' alone at the global batch one GPU
    takes for the data; None for one GPU or a sweep."""
    if size.gpu_count == 1 or request.sweep_trials:
        return None
    one_batch = planned_batch(request.windows, 1, run.cap)
    one = throughput(
        size.gpu, 1, request.window_length, measured, batch=one_batch, kind=request.step
    )
    return tp.windows_per_s / one.windows_per_s


def _row(request: PlanRequest, size: VmSize, price: HourlyPrice, measured) -> PlanRow:
    gpus = 1 if request.sweep_trials else size.gpu_count  # a sweep's trial: one GPU
    run = batches(size.gpu, gpus, request.windows, request.window_length)
    compute_hours, tp = _compute_hours(request, size, run, measured)
    hours = SETUP_HOURS + compute_hours
    spot_hourly = price.spot_usd_per_hour
    basis_hourly = (
        spot_hourly if request.spot and spot_hourly is not None else price.on_demand_usd_per_hour
    )
    priced = basis_hourly is not None
    runs = max(request.sweep_trials, 1)
    extra = storage_egress_usd(size.cloud, request.windows, request.window_length, runs)
    return PlanRow(
        cloud=size.cloud,
        size=size.name,
        gpu=f"{size.gpu_count}x {size.gpu_model}",
        gpu_count=size.gpu_count,
        precision=tp.precision,
        windows_per_s=tp.windows_per_s,
        throughput_source=tp.source,
        throughput_detail=tp.detail,
        step=STEP_NAMES[tp.step],
        per_gpu_batch=run.per_gpu,
        global_batch=run.global_,
        batch_departs=run.departs,
        fixed_fraction=tp.fixed_fraction,
        over_one_gpu=_over_one_gpu(request, size, run, tp, measured),
        hours=hours,
        on_demand_usd=_times(hours, price.on_demand_usd_per_hour),
        spot_usd=_times(hours, spot_hourly),
        usd_per_million_window_passes=(
            basis_hourly / (tp.windows_per_s * 3600) * 1e6 if priced else None
        ),
        storage_egress_usd=extra,
        total_usd=hours * basis_hourly + extra if priced else None,
        price_region=price.region,
        price_source=price.source,
        within_deadline=request.deadline_hours is None or hours <= request.deadline_hours,
    )


def _times(hours: float, usd_per_hour: float | None) -> float | None:
    return None if usd_per_hour is None else hours * usd_per_hour


def _retired_note(size: VmSize) -> str:
    return f"{size.name} (retired {size.retired_on}; use {size.replacement})"


def select_sizes(request: PlanRequest, catalog_sizes: Iterable[VmSize]) -> list[VmSize]:
    """Sizes of the requested cloud offered in the requested region, retired ones included."""
    return [
        s
        for s in catalog_sizes
        if request.cloud in ("all", s.cloud) and request.region in (None, *s.regions)
    ]


def make_plan(
    request: PlanRequest,
    catalog_sizes: Iterable[VmSize],
    prices: Mapping[str, HourlyPrice] | None = None,
    measured: tuple[MeasuredThroughput, ...] = (),
) -> Plan:
    """Rows for every current size of the requested cloud and region, cheapest first.

    prices maps size names to live prices; sizes without one use the catalog snapshot.
    Raises ValueError when no size matches the cloud and region.
    """
    prices = prices or {}
    catalog_sizes = tuple(catalog_sizes)
    chosen = select_sizes(request, catalog_sizes)
    current = [s for s in chosen if s.status != "retired"]
    if not current:
        where = f" in region {request.region}" if request.region else ""
        clouds = "azure or aws" if request.cloud == "all" else request.cloud
        raise ValueError(
            f"the catalog has no current {clouds} size{where}; "
            "drop --region or pick another (stack/offerings.json lists the regions of each size)"
        )
    rows = [_row(request, s, prices.get(s.name) or snapshot_price(s), measured) for s in current]
    from_snapshot = [s for s in current if s.name not in prices]
    snapshot_dates = {s.price_date for s in from_snapshot if not s.unpriced}
    # Cheapest first; a row without dollars after every priced one, by its hours.
    rows.sort(key=lambda r: (r.total_usd is None, r.total_usd or 0.0, r.hours, r.size))
    rows = _mark_pick(rows)
    return Plan(
        request=request,
        price_basis="spot" if request.spot else "on-demand",
        rows=tuple(rows),
        excluded_retired=tuple(_retired_note(s) for s in chosen if s.status == "retired"),
        notes=tuple(
            _notes(request, rows) + _fabric(current) + _unknown_regions(request, catalog_sizes)
        ),
        assumptions=_assumptions(request),
        snapshot_dates=tuple(sorted(snapshot_dates)),
        price_sources=_price_sources(from_snapshot),
        unpriced=tuple(str(s.unpriced) for s in from_snapshot if s.unpriced),
    )


def _price_sources(sizes: list[VmSize]) -> tuple[str, ...]:
    """One line per dated reference of the snapshot prices used: the reference most of
    a cloud's sizes share is named by its cloud, any other by the sizes it prices."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for size in sizes:
        if not size.unpriced:
            groups.setdefault((size.cloud, size.price_date, size.price_source), []).append(
                size.name
            )
    widest = {}
    for (cloud, _, _), names in sorted(groups.items(), key=lambda g: -len(g[1])):
        widest.setdefault(cloud, names)
    return tuple(
        f"{cloud if widest[cloud] is names else ', '.join(names)} {date}: {source}"
        for (cloud, date, source), names in groups.items()
    )


def _unknown_regions(request: PlanRequest, catalog_sizes: Iterable[VmSize]) -> list[str]:
    """The sizes a --region leaves out only because no reference says where they sell."""
    unknown = [
        s.name
        for s in catalog_sizes
        if request.region
        and request.cloud in ("all", s.cloud)
        and s.status != "retired"
        and not s.regions_known
    ]
    if not unknown:
        return []
    return [
        f"not shown in {request.region}: {', '.join(unknown)}, whose regions the offerings "
        "snapshot does not list (stack/offerings.json; `python -m stack.refresh_offerings`)"
    ]


def _mark_pick(rows: list[PlanRow]) -> list[PlanRow]:
    """Mark the cheapest row that meets the deadline (rows arrive cheapest first)."""
    for i, row in enumerate(rows):
        if row.within_deadline and row.total_usd is not None:
            return [*rows[:i], replace(row, pick=True), *rows[i + 1 :]]
    return rows


def _notes(request: PlanRequest, rows: list[PlanRow]) -> list[str]:
    notes = []
    if request.dataset:
        notes.append(f"{request.windows:,} windows counted in dataset {request.dataset}")
    if request.deadline_hours is not None and not any(r.pick for r in rows):
        fastest = min(rows, key=lambda r: r.hours)
        notes.append(
            f"no size finishes within {request.deadline_hours:g} h; the fastest, "
            f"{fastest.size}, needs {fastest.hours:.1f} h"
        )
    if request.spot and any(r.spot_usd is None for r in rows):
        notes.append("sizes without a spot figure are costed at on-demand (the spot price cap)")
    if request.spot:
        notes.append("spot prices are volatile and spot runs can be evicted; resume adds time")
    if request.sweep_trials:
        notes.append(
            f"a sweep of {request.sweep_trials} trials, each {request.epochs} epochs on one GPU, "
            "as many at once as the size has GPUs (`fab sweep`); the windows/s column is one "
            "GPU's. Two trials sharing one GPU is not assumed (unmeasured on a GPU)"
        )
    elif any(r.gpu_count > 1 for r in rows):
        notes.append(
            "multi-GPU rows: torchrun over every GPU (`fab train` runs it so) at the "
            "trainer's global batch for the data, the same as one GPU's, each GPU taking "
            "its share (`--wide`'s batch column: the global batch, a GPU's share), each GPU's step "
            "all-reducing the gradients in one bucket after its backward pass (nothing "
            "hides it): N GPUs plan at most N of their one-GPU rate at that share "
            "(docs/distributed.md)"
        )
        notes.extend(_mostly_fixed(rows))
    notes.extend(_batch_notes(rows))
    if not request.graph:
        notes.append(
            "every row at the eager step (`train --no-graph`): a step takes the longer of "
            "the host's kernel launches, measured on the GPUs that have eager rows, and "
            "the GPU's work, its captured step's"
        )
    if request.region and any(r.price_region != request.region for r in rows):
        notes.append(
            f"snapshot prices are from each size's catalog price region, not {request.region}; "
            "--live fetches that region's prices"
        )
    return notes


def _fabric(sizes: list[VmSize]) -> list[str]:
    """What a run over several boxes of these sizes talks over (every row is one box)."""
    efa = [s.name for s in sizes if s.fabric == "efa"]
    ib = [s.name for s in sizes if s.fabric == "infiniband"]
    notes = []
    if efa:
        notes.append(
            f"{', '.join(efa)}: a run over several boxes (nodeCount > 1) leaves their EFA "
            "unused and all-reduces over TCP sockets: EFA needs the aws-ofi-nccl plugin and "
            "libfabric in the image and EFA interfaces at launch, which neither has yet "
            "(docs/distributed.md)"
        )
    if ib:
        notes.append(
            f"{', '.join(ib)}: between boxes NCCL may use their InfiniBand (left on), but "
            "takes it only where the image has the verbs libraries and the container the "
            "HCA, which they do not yet: TCP sockets (docs/distributed.md)"
        )
    return notes


def _mostly_fixed(rows: list[PlanRow]) -> list[str]:
    """Multi-GPU rows whose GPUs' steps are mostly their fixed cost at their share: more
    GPUs, little more speed, at their full price."""
    slow = [
        r
        for r in rows
        if r.gpu_count > 1
        and r.over_one_gpu is not None
        and r.fixed_fraction is not None
        and r.fixed_fraction >= MOSTLY_FIXED
    ]
    if not slow:
        return []
    said = "; ".join(
        f"{r.size} {r.over_one_gpu:.1f}x ({r.per_gpu_batch} windows a GPU, "
        f"{r.fixed_fraction:.0%} fixed)"
        for r in sorted(slow, key=lambda r: (r.over_one_gpu / r.gpu_count, r.size))
    )
    return [
        "at this data's global batch a GPU's share is small and its step mostly its "
        "fixed cost (the graph's launch, the optimizer over 7.2 M parameters): these "
        "boxes train at only this many times one of their GPUs' windows/s, at every "
        f"GPU's price: {said}"
    ]


def _batch_notes(rows: list[PlanRow]) -> list[str]:
    """Rows whose global batch departs from the rule (marked `!` in the batch column),
    and a rule's batch beyond the one measured best."""
    notes = []
    departs = [r for r in rows if r.batch_departs]
    if departs:
        notes.append(
            "global batch below the rule's for the data (`!` in --wide's batch column), "
            "where a GPU's memory holds less beside the data: "
            + "; ".join(f"{r.size} {r.batch_departs}" for r in departs)
        )
    beyond = sorted({r.global_batch for r in rows if r.global_batch > MEASURED_BEST_GLOBAL_BATCH})
    if beyond:
        notes.append(
            f"a global batch of {', '.join(map(str, beyond))} keeps the 1600 steps an epoch "
            f"that batch {MEASURED_BEST_GLOBAL_BATCH} had where it was measured best (M2's "
            "size, one seed): beyond it the rule is extrapolated, not measured "
            "(docs/trainer.md, `python -m trainer bench --noise-scale`)"
        )
    return notes


def _assumptions(request: PlanRequest) -> dict:
    return {
        "train_gflop_per_window": train_flops_per_window(request.window_length) / 1e9,
        "estimated_peak_fraction": ESTIMATED_PEAK_FRACTION,
        "one_gpu_batch": planned_batch(request.windows, 1),
        "ddp": ddp_assumptions(),
        "setup_hours": SETUP_HOURS,
        "checkpoint_gb": round(checkpoint_gb(), 4),
        "kept_checkpoints": KEPT_CHECKPOINTS,
        "storage_usd_per_gb_month": STORAGE_USD_PER_GB_MONTH,
        "egress_usd_per_gb": EGRESS_USD_PER_GB,
        "storage_egress_price_date": STORAGE_PRICE_DATE,
        "storage_months": STORAGE_MONTHS,
        # Which regions sell which size: each cloud's dated reference (stack.offerings).
        "offerings": {cloud: offerings.of(cloud).label for cloud in CLOUDS},
    }
