"""summary.json: what a finished run says of itself (`box.contract.RunSummary`, which
`fab runs`, the box's notice of the run's end and a sweep's choice read).

Torch-free: the trainer hands it plain values (the best checkpoint's place, the splits'
metrics, what the run settled on), and it adds what the run dir and the box's records
say of time and money.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from box.contract import RunSummary
from trainer.config import RunConfig
from trainer.reports.cost import box_run_cost
from trainer.reports.progress import process_spans, read_metrics


@dataclass(frozen=True)
class Outcome:
    """How the run ended, as the trainer saw it: the plain values summary.json keeps."""

    best_epoch: int
    best_step: int
    steps: int
    epochs: int
    parameters: int
    device: str
    precision: str
    gpu_memory_gib: float | None
    data: dict[str, Any]
    """`trainer.reports.report.data_identity` of the dataset."""
    val: dict[str, Any]
    test: dict[str, Any] | None
    """None for a sweep's trial (`--skip-test`)."""


def run_summary(
    config: RunConfig, outcome: Outcome, status: dict[str, Any], wall_s: float, writes: bool
) -> RunSummary:
    """The summary of a run settled as `config`; `status`: rank 0's status.json fields (its
    count of recoveries), `wall_s`: this process's time, `writes`: this is rank 0, which
    alone wrote the run's records of time."""
    tc, run_dir = config.train, Path(config.train.run_dir)
    return RunSummary(
        run_id=tc.run_id,
        name=tc.name,
        best_epoch=outcome.best_epoch,
        best_step=outcome.best_step,
        steps=outcome.steps,
        epochs=outcome.epochs,
        parameters=outcome.parameters,
        device=outcome.device,
        precision=outcome.precision,
        **_wall_time(run_dir, wall_s, writes),
        data=outcome.data,
        world_size=tc.world_size,
        per_rank_batch_size=tc.per_rank_batch_size,
        global_batch_size=tc.batch_size,
        lr=config.optim.lr,
        formulation=tc.formulation,
        gpu_memory_gib=outcome.gpu_memory_gib,
        recoveries=status.get("recoveries") or 0,
        time_lost_s=status.get("time_lost_s") or 0.0,
        **_cost(run_dir),
        val=outcome.val,
        test=outcome.test,
    )


def _cost(run_dir: Path) -> dict[str, Any]:
    """`cost_usd` and how it was counted, from the box's records (null off a box)."""
    cost = box_run_cost(run_dir, time.time())
    return {
        "cost_usd": round(cost.usd, 2) if cost else None,
        "cost": cost.as_dict() if cost else None,
    }


def _wall_time(run_dir: Path, this_process_s: float, writes: bool) -> dict[str, Any]:
    """`wall_s`, summed over the run's processes, and `processes`: what each start took
    (metrics.jsonl's start records; only rank 0 writes them)."""
    processes = process_spans(read_metrics(run_dir), time.time()) if writes else []
    total_s = sum(span["wall_s"] for span in processes) if processes else this_process_s
    return {"wall_s": total_s, "processes": processes}
