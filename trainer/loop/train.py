"""Train ResNet-1D on a dataset dir. Reads top to bottom, like nanoGPT's train.py:

config -> device -> data -> model/optimizer -> resume -> loop -> final evaluation.

Exact resume is a design constraint: the epoch order is a pure function of (seed,
epoch), the position inside an epoch is one integer (`Position.step_in_epoch`), and
everything else the loop depends on (weights, optimizer, schedule, scaler, best score,
patience) lives in the checkpoint dict; dropout is seeded per micro-batch from the
position. A run killed at any point and restarted from `last.pt` on CPU ends with
bit-identical weights, at the same world size too.

Under torchrun every rank runs this same file top to bottom (`trainer.loop.distributed`):
each trains on its part of every global batch, the step all-reducing the gradients
(`trainer.loop.gradient_sync`), all evaluate their share of a split, and only rank 0
writes (the others hold `trainer.loop.rank_outputs` instead).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.atomic_write import write_json_atomic
from trainer.checkpoints import checkpoint_file
from trainer.checkpoints.final_upload import finish_pending
from trainer.checkpoints.manager import CheckpointConfig, CheckpointManager
from trainer.checkpoints.resume import misfit
from trainer.checkpoints.uploader_lock import uploader_lock
from trainer.config import RunConfig, UserError
from trainer.data.dataset import load_dataset, split_cases
from trainer.data.pipeline import (
    FLOAT32_BYTES,
    GPU_RESIDENT_MAX_FRACTION,
    Normalisation,
    WindowPipeline,
    micro_batch_seed,
    norm_to_state,
)
from trainer.exit_codes import EXIT_OK, EXIT_STOPPED
from trainer.loop.defaults import (
    BatchCap,
    memory_batch_cap,
    parameter_groups,
    per_rank_batch,
    settle,
)
from trainer.loop.device import choose_device, use_deterministic_kernels
from trainer.loop.distributed import Group, RankInfo
from trainer.loop.evaluate import eval_forward, split_report
from trainer.loop.formulation import (
    fastest_formulation,
    resolve_formulation,
    timed_formulations,
)
from trainer.loop.preemption import StopSignal
from trainer.loop.rank_outputs import Heartbeat, QuietCheckpoints, QuietOutputs
from trainer.loop.run_ending import RunEnding
from trainer.loop.step import TrainStep, eager_reason
from trainer.model import build_model, count_parameters
from trainer.reports.cost import box_run_cost
from trainer.reports.progress import RunOutputs, process_spans, read_metrics
from trainer.reports.report import CONFIG_FILE, data_identity, write_report

COMPILE_CACHE = "compile-cache"  # in the run dir: torch.compile's code, kept for resumes


def train(config: RunConfig) -> int:
    """Run or resume training, as one rank of torchrun's world or alone; the process
    exit code (0 finished, 75 stopped).

    Every way out ends through `RunEnding` (on rank 0, the rank that writes):
    status.json says how, the outbox is flushed. Rank 0 uploads, so it holds the run
    dir's uploader lock throughout, taken before anything is written
    (`trainer.checkpoints.uploader_lock`: another uploader there is exit 75).
    """
    info = RankInfo.from_env()
    config = config.with_world_size(info.world_size)  # the global batch must split
    run_dir = Path(config.train.run_dir)
    _refuse_a_run_dir_under_a_file(run_dir)
    if info.world_size == 1:  # with several ranks all must take part: a resume re-finishes
        pending = finish_pending(run_dir, config.checkpoint_uri)
        if pending is not None:  # finished before; its last uploads are done now (or not)
            return pending
    uploads = info.is_main and config.checkpoint_uri is not None
    with uploader_lock(run_dir, "train") if uploads else contextlib.nullcontext():
        # Another box's local rank 0 keeps that box's heartbeat (trainer.loop.rank_outputs).
        heartbeat = Heartbeat(run_dir) if info.local_rank == 0 and not info.is_main else None
        ending = RunEnding(run_dir, config.train.run_id, writes=info.is_main, heartbeat=heartbeat)
        group = Group.start(info)
        try:
            code = _train(config, group, ending)
        except BaseException as error:
            ending.failed(error)
            group.close(clean=False)  # this rank may have failed alone: wait for nobody
            raise
        group.close()
        return code


def _refuse_a_run_dir_under_a_file(run_dir: Path) -> None:
    """A run dir at or under a regular file can never be made: a user error in one line
    before anything is written (mkdir's NotADirectoryError is no exit code's)."""
    existing = next((path for path in (run_dir, *run_dir.parents) if path.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UserError(
            f"--run-dir {run_dir}: {existing} is a file, not a directory; pass a directory "
            "path (it is made if missing)"
        )


def _train(config: RunConfig, group: Group, ending: RunEnding) -> int:
    started, started_at = time.monotonic(), time.time()
    run = Run(config, group)
    ending.checkpoints = run.checkpoints
    resumed = run.start()
    config = run.config  # settled: what config.json and every checkpoint record
    ending.store_matched = True
    pos = resumed or Position()
    # Only now: a refused resume must leave the run's own config.json as it was.
    if group.is_main:
        write_json_atomic(run.run_dir / "splits.json", run.splits.to_dict())
        write_json_atomic(run.run_dir / CONFIG_FILE, config.to_dict())
    if resumed is not None:
        epoch = pos.epoch + 1  # the one in progress, as the step lines count it
        run.say(f"resume: step {pos.step}, epoch {epoch}, batch {pos.step_in_epoch}")

    stop = StopSignal(watch_notices=group.info.local_rank == 0).install()  # one poller a box
    try:
        out = (
            RunOutputs(
                run.run_dir,
                config.train.run_id,
                run.total_steps,
                pos.step,
                resumed=resumed is not None,
                device=run.choice.device,
                log_every_steps=config.train.log_every_steps,
                uploads=run.checkpoints.uploads,
                started_at=started_at,
            )
            if group.is_main
            else QuietOutputs(ending.heartbeat)
        )
        ending.status = out.status
        try:
            while not _done(run, pos):
                outcome = train_epoch(run, pos, stop, out)
                if outcome == "stopped":
                    run.checkpoints.save_last(run.state(pos))
                    out.stopped(stop.reason, stop.state, pos.step, run.checkpoints.last_saved_at)
                    run.checkpoints.flush(stop.upload_seconds_left())
                    # torchrun stops the whole group at the first rank's exit 75: the
                    # others wait here for rank 0's upload.
                    group.barrier()
                    stop.acknowledge()  # after the upload: Azure may now evict early
                    return EXIT_STOPPED
                if outcome == "max_steps":
                    run.checkpoints.save_last(run.state(pos))
                    break
                if end_epoch(run, pos, out):
                    print(
                        f"early stop: no better val MAE for {pos.epochs_without_improvement} "
                        "epochs",
                        flush=True,
                    )
        finally:
            out.close()
    finally:
        stop.uninstall()
    finish(run, pos, out, time.monotonic() - started)
    return ending.finished()


@dataclass
class Position:
    """Where the loop is. Saved in every checkpoint: no loop state lives anywhere else."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # epochs completed (validated)
    step_in_epoch: int = 0  # micro-batch index of the next batch in this epoch's order
    best_val_mae: float = math.inf
    epochs_without_improvement: int = 0


def lr_lambda(
    total_steps: int, warmup_fraction: float, min_lr_fraction: float, steps_per_epoch: int = 1
) -> Callable[[int], float]:
    """Linear warmup to the peak, then cosine down to min_lr_fraction of it. A warm-up
    lasts at least one epoch (of all steps, at most): at the large batches a GPU takes,
    an epoch is ~200 steps and a share of a few epochs' steps would be a handful."""
    warmup = max(1, int(total_steps * warmup_fraction))
    if warmup_fraction > 0:
        warmup = max(warmup, min(steps_per_epoch, total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_lr_fraction + (1 - min_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class Run:
    """Everything built from the config: device, data, checkpoints; then, in `start`,
    the settings the run leaves to the trainer, the model and the optimizer."""

    def __init__(self, config: RunConfig, group: Group | None = None) -> None:
        tc = config.train
        self.config, self.run_dir = config, Path(tc.run_dir)
        self.group = group or Group()
        if self.group.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.choice = choose_device(tc.precision)
        if tc.deterministic:
            use_deterministic_kernels()
        self.say(f"device: {self.choice.description}; precision {self.choice.precision}")

        # Data: validated, split by case, normalised with train statistics only.
        self.dataset = load_dataset(config.data.data_dir)
        self.splits = split_cases(
            self.dataset.cases, tc.seed, config.data.val_fraction, config.data.test_fraction
        )
        self.norm = Normalisation.from_train(self.dataset, self.splits.train)
        self.train_windows = int(np.isin(self.dataset.case_id, self.splits.train).sum())
        self.checkpoints = (
            CheckpointManager(
                CheckpointConfig(
                    self.run_dir / "checkpoints",
                    config.checkpoint_every_seconds,
                    config.checkpoint_every_steps,
                    config.checkpoint_uri,
                )
            )
            if self.group.is_main
            else QuietCheckpoints()
        )

    def say(self, line: str) -> None:
        """A console line, once per run (rank 0's)."""
        if self.group.is_main:
            print(line, flush=True)

    def steps(self, config: RunConfig) -> tuple[int, int]:
        """(optimizer steps per epoch, in all) of this data under `config`."""
        micro_batches = math.ceil(self.train_windows / config.train.batch_size)
        per_epoch = math.ceil(micro_batches / config.optim.grad_accum)
        return per_epoch, per_epoch * config.train.epochs

    def start(self) -> Position | None:
        """Find the checkpoint to resume from (rank 0, locally or at --checkpoint-uri,
        handed to the other ranks, whose boxes may have no copy), settle the run's
        settings, build the model and optimizer, and load the checkpoint into them.
        The Position to go on from, or None for a fresh run."""
        state = self.group.broadcast_state(self.checkpoints.load_latest(self.resume_refusal))
        self._settle(state and state["config"])
        self._build()
        if state is None:
            return None
        self._say_world_size_change(state["config"]["train"])
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.choice.adopt(self.optimizer)
            self.scheduler.load_state_dict(state["scheduler"])
            if self.scaler is not None and state["scaler"] is not None:
                self.scaler.load_state_dict(state["scaler"])
            checkpoint_file.restore_rng(state["rng"])
        except (RuntimeError, ValueError, KeyError, TypeError) as error:
            detail = (str(error).strip().splitlines() or [""])[0][:200]
            raise UserError(
                f"resume: the checkpoint's state does not fit this run's model and optimizer "
                f"({type(error).__name__}: {detail}); use a new --run-dir"
            ) from None
        fields = {f.name for f in dataclasses.fields(Position)}
        return Position(**{key: value for key, value in state.items() if key in fields})

    def _settle(self, saved: dict[str, Any] | None) -> None:
        """The settings left to the trainer (`trainer.loop.defaults.settle`; `saved`: the
        resumed checkpoint's config), the default batch at most what the GPU's memory
        holds (said when that bites), and the formulation."""
        given = self.config.train.batch_size
        cap = self._memory_batch_cap()
        device = self.choice.device
        self.config = settle(self.config, device, saved, self.train_windows, cap and cap.per_rank)
        tc = self.config.train
        wanted = per_rank_batch(device.type, self.train_windows, tc.world_size)
        if cap and given is None and saved is None and tc.per_rank_batch_size < wanted:
            self.say(cap.said(tc.per_rank_batch_size, wanted))
        self.config = resolve_formulation(self.config, device, self._fastest)

    def _memory_batch_cap(self) -> BatchCap | None:
        """On a GPU, the largest per-rank batch whose steps fit beside the resident data
        (every rank takes the least of them); None on a CPU."""
        if self.choice.device.type != "cuda":
            return None
        free_bytes, _ = torch.cuda.mem_get_info(self.choice.device)
        # The pipelines keep a split on the host when it would take more than this.
        data_bytes = self.dataset.windows.size * FLOAT32_BYTES
        resident = min(data_bytes, GPU_RESIDENT_MAX_FRACTION * free_bytes)
        cap = memory_batch_cap(free_bytes, resident, self.choice.precision)
        return cap._replace(per_rank=self.group.least(cap.per_rank))

    def _build(self) -> None:
        """Pipelines, model, AdamW, warmup + cosine over every step of every epoch."""
        config, tc, oc = self.config, self.config.train, self.config.optim
        # Here, not earlier: the weights' init is a pure function of the seed, whatever
        # drew random numbers before (a formulation timing).
        torch.manual_seed(tc.seed)
        np.random.seed(tc.seed)
        random.seed(tc.seed)
        self.train_data = self.pipeline(self.splits.train, self.group.rank, self.group.world_size)
        self.val_data = self.pipeline(self.splits.val)
        self.model = build_model(config.model, self.choice.device, tc.formulation)
        gradients = self.group.gradients(self.model)  # under torchrun: the flat bucket
        self.trained = self._compiled(self.model) if tc.compile else self.model
        groups = parameter_groups(self.model, oc.weight_decay, oc.decay_norms_and_biases)
        self.optimizer = self.choice.optimizer(groups, oc.lr, oc.weight_decay, oc.beta2)
        self.steps_per_epoch, self.total_steps = self.steps(config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lr_lambda(
                self.total_steps, oc.warmup_fraction, oc.min_lr_fraction, self.steps_per_epoch
            ),
        )
        self.scaler = (
            torch.amp.GradScaler(self.choice.device.type) if self.choice.needs_grad_scaler else None
        )
        eager = self._eager_reason()
        self.step = TrainStep(
            self.trained,
            list(self.model.parameters()),
            self.optimizer,
            self.scaler,
            self.choice,
            oc.grad_clip_norm,
            capture=eager is None,
            say=self.say,
            uncompiled=self.model if tc.compile else None,
            gradients=gradients,
        )
        self.say(f"steps: {'eager (' + eager + ')' if eager else 'one CUDA graph, replayed'}")
        # One evaluation graph for the run, in the training graph's memory pool.
        self.eval_forward = eval_forward(self.model, self.choice, tc.graph, self.step.graph_pool)
        self.say(
            f"data: {len(self.train_data)} train / {len(self.val_data)} val windows, cases "
            f"{len(self.splits.train)}/{len(self.splits.val)}/{len(self.splits.test)}; "
            f"model: {config.model.arch} ({tc.formulation}), "
            f"{count_parameters(self.model):,} parameters; batch {tc.batch_size}, "
            f"lr {oc.lr:.3g}, beta2 {oc.beta2:g}; {self.steps_per_epoch} steps/epoch x "
            f"{tc.epochs} epochs"
        )
        if self.group.data_parallel:
            self.say(
                f"data parallel: world size {self.group.world_size} ({self.group.backend}), "
                f"per-rank batch {tc.per_rank_batch_size}, global batch {tc.batch_size}, "
                "gradients all-reduced in one bucket inside the step"
            )

    def _eager_reason(self) -> str | None:
        tc = self.config.train
        return eager_reason(self.choice, tc.graph, self.config.optim.grad_accum)

    def _compiled(self, module: torch.nn.Module) -> torch.nn.Module:
        """torch.compile in inductor's default mode (fused kernels, no CUDA graphs of its
        own: the step's capture records them, `trainer.loop.step`), its code cached in
        the run dir unless TORCHINDUCTOR_CACHE_DIR says where: a resumed or restarted run
        finds it there and does not compile again."""
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(self.run_dir / COMPILE_CACHE))
        return torch.compile(module)

    def _fastest(self) -> str:
        """The formulation that trains fastest here (timed; every rank takes rank 0's)."""
        tc = self.config.train
        name, seconds = fastest_formulation(
            self.config.model,
            self.choice,
            tc.per_rank_batch_size,
            self.dataset.windows.shape[1],
            timed_formulations(self.choice.device),
            graph=self._eager_reason() is None,
        )
        timed = ", ".join(
            f"{f} {s * 1e3:.1f}" if s is not None else f"{f} out of memory"
            for f, s in seconds.items()
        )
        self.say(f"formulation: {name} (ms per step at batch {tc.per_rank_batch_size}: {timed})")
        return self.group.broadcast_state({"formulation": name})["formulation"]

    def learning_rate(self) -> float:
        """The rate of the step just taken, from the schedule on the host: reading the
        optimizer's device tensor would wait for the GPU."""
        scheduler = self.scheduler
        return scheduler.base_lrs[0] * scheduler.lr_lambdas[0](scheduler.last_epoch)

    def pipeline(self, cases: list[int], rank: int = 0, world_size: int = 1) -> WindowPipeline:
        """A split's pipeline; `rank`'s part of each batch of `world_size` parts."""
        batch_size = self.config.train.batch_size
        return WindowPipeline(
            self.dataset, cases, self.norm, self.choice.device, batch_size, rank, world_size
        )

    def state(self, position: Position) -> dict[str, Any]:
        """The checkpoint dict (checkpoint_file.STATE_KEYS)."""
        label_norm, input_norm = norm_to_state(self.norm)
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            **dataclasses.asdict(position),
            "rng": checkpoint_file.capture_rng(),
            "config": self.config.to_dict(),
            "label_norm": label_norm,
            "input_norm": input_norm,
            "splits": self.splits.to_dict(),
            "dataset_fingerprint": self.dataset.fingerprint,
        }

    def report(self, pipeline: WindowPipeline) -> tuple[dict[str, Any], Any, Any]:
        """`split_report` of the current weights, every rank evaluating its share."""
        self.group.sync_buffers(self.model)  # rank 0's BatchNorm statistics, as saved
        forward = self.eval_forward
        return split_report(self.model, pipeline, self.choice, self.norm, self.group, forward)

    def resume_refusal(self, state: dict[str, Any]) -> str | None:
        """Why `state` cannot continue this run (`trainer.checkpoints.resume` skips it), or None."""
        config = settle(self.config, self.choice.device, state["config"], self.train_windows)
        _, total_steps = self.steps(config)
        return misfit(state, config, self.dataset.fingerprint, total_steps)

    def _say_world_size_change(self, saved: dict[str, Any]) -> None:
        was, now = saved.get("world_size", 1), self.group.world_size
        if was != now:
            tc = self.config.train
            self.say(
                f"resume: world size {was} -> {now}: per-rank batch "
                f"{saved['batch_size'] // was} -> {tc.per_rank_batch_size}, global batch "
                f"{tc.batch_size}, learning rate and steps per epoch unchanged"
            )


def train_epoch(run: Run, pos: Position, stop: StopSignal, out: RunOutputs) -> str | None:
    """Optimizer steps through the rest of epoch `pos.epoch`.

    Returns None when the epoch's batches are done, "stopped" on a stop request and
    "max_steps" at --max-steps; `pos` is then the exact place to resume from.
    """
    tc, accum, data, group = (
        run.config.train,
        run.config.optim.grad_accum,
        run.train_data,
        run.group,
    )
    run.model.train()
    order = data.permutation(tc.seed, pos.epoch)
    while pos.step_in_epoch < data.steps_per_epoch:
        micro = pos.step_in_epoch
        x, y = data.batch(order, micro)
        torch.manual_seed(micro_batch_seed(tc.seed, pos.epoch, micro, group.rank))
        # The epoch's last micro-batch always steps; the gradients are all-reduced then.
        steps = (micro + 1) % accum == 0 or micro + 1 == data.steps_per_epoch
        # A sum over this rank's windows scaled to the global batch's mean: the step's
        # average over ranks then gives one process's gradient, short batches too.
        scale = group.world_size / (data.windows_in_batch(micro) * accum)
        full = data.windows_in_batch(micro) == data.batch_size
        loss = run.step(x, y, scale, steps=steps, full=full)
        out.meter.add(loss, data.windows_in_batch(micro), run.step.grad_norm if steps else None)
        pos.step_in_epoch += 1
        if not steps:
            continue
        run.scheduler.step()  # fills the device-side learning rate on a GPU
        pos.step += 1
        if out.meter.due(pos.step):
            out.interval(
                pos.epoch + 1,  # `pos.epoch` counts the epochs done
                pos.step,
                run.learning_rate(),
                run.checkpoints.last_saved_at,
                run.choice.peak_memory_gib(),
            )
        # No device sync: an Event read and, with several ranks, a vote all act on at once.
        (stop_code,) = group.agree(stop.code)
        if stop_code:
            stop.adopt(stop_code)
            return "stopped"
        if tc.max_steps is not None and pos.step >= tc.max_steps:
            return "max_steps"
        # Rank 0's own call, as on one process: it alone saves, and no other rank takes
        # part. (Voted, the answer came a step late, after the next vote had asked
        # again: every checkpoint was written twice.)
        if run.checkpoints.due(pos.step):
            run.checkpoints.save_last(run.state(pos))
    return None


def end_epoch(run: Run, pos: Position, out: RunOutputs) -> bool:
    """Validate, keep best.pt and last.pt; True when patience ran out (early stop). Its
    time is not the steps': left out of the next log line's windows/s."""
    with out.meter.excluded():
        report, _, _ = run.report(run.val_data)
        pos.epoch, pos.step_in_epoch = pos.epoch + 1, 0
        improved = report["mae"] < pos.best_val_mae
        if improved:
            pos.best_val_mae, pos.epochs_without_improvement = report["mae"], 0
        else:
            pos.epochs_without_improvement += 1
        state = run.state(pos)
        if improved:
            run.checkpoints.save_best(state)
        run.checkpoints.save_last(state)
        out.epoch_end(pos.epoch, pos.step, report, pos.best_val_mae, run.checkpoints.last_saved_at)
    return pos.epochs_without_improvement >= run.config.train.patience


def _done(run: Run, pos: Position) -> bool:
    tc = run.config.train
    return (
        pos.epoch >= tc.epochs
        or pos.epochs_without_improvement >= tc.patience
        or (tc.max_steps is not None and pos.step >= tc.max_steps)
    )


def _cost(run_dir: Path) -> dict[str, Any]:
    """`cost_usd` and how it was counted, from the box's records (null off a box)."""
    cost = box_run_cost(run_dir, time.time())
    return {
        "cost_usd": round(cost.usd, 2) if cost else None,
        "cost": cost.as_dict() if cost else None,
    }


def finish(run: Run, pos: Position, out: RunOutputs, wall_s: float) -> dict[str, Any]:
    """Best weights on val and test -> summary.json, report.md, plots; status finished.
    `wall_s`: this process's time; a resumed run's is the sum over its processes."""
    best_state = run.group.broadcast_state(run.checkpoints.load_best())
    run.model.load_state_dict(best_state["model"])
    val, _, _ = run.report(run.val_data)
    tc = run.config.train
    # A sweep's trial leaves the test split alone: the sweep evaluates it once, for the
    # trial it chooses by validation MAE, so no trial is picked by its test score.
    test, test_ref, test_pred = (
        (None, None, None) if tc.skip_test else run.report(run.pipeline(run.splits.test))
    )
    # Rank 0's status.json counts the recoveries; the other ranks write no summary.
    counted = out.status.fields if run.group.is_main else {}
    summary = {
        "run_id": run.config.train.run_id,
        "name": tc.name,
        "best_epoch": int(best_state["epoch"]),
        "best_step": int(best_state["step"]),
        "steps": pos.step,
        "epochs": pos.epoch,
        "parameters": count_parameters(run.model),
        "device": run.choice.description,
        "precision": run.choice.precision,
        **_wall_time(run, wall_s),
        "data": data_identity(run.dataset),
        "world_size": tc.world_size,
        "per_rank_batch_size": tc.per_rank_batch_size,
        "global_batch_size": tc.batch_size,
        "lr": run.config.optim.lr,
        "formulation": tc.formulation,
        "gpu_memory_gib": run.choice.peak_memory_gib(),
        "recoveries": counted.get("recoveries") or 0,
        "time_lost_s": counted.get("time_lost_s") or 0.0,
        **_cost(run.run_dir),
        "val": val,
        "test": test,
    }
    if run.group.is_main:
        write_json_atomic(run.run_dir / "summary.json", summary)
        write_report(run.run_dir, summary, test_ref, test_pred)
    out.status.write(
        state="finished",
        epoch=pos.epoch,
        step=pos.step,
        val_mae=val["mae"],
        exit_code=EXIT_OK,
        eta_s=0,
        last_checkpoint_at=run.checkpoints.last_saved_at,
    )
    scored = test or val
    run.say(
        f"done: {'test' if test else 'validation'} MAE {scored['mae']:.2f} mg/dL vs "
        f"constant-median baseline {scored['baseline']['mae']:.2f}; report in "
        f"{run.run_dir / 'report.md'}"
    )
    return summary


def _wall_time(run: Run, this_process_s: float) -> dict[str, Any]:
    """`wall_s`, summed over the run's processes, and `processes`: what each start took
    (metrics.jsonl's start records; only rank 0 writes them)."""
    processes = process_spans(read_metrics(run.run_dir), time.time()) if run.group.is_main else []
    total_s = sum(span["wall_s"] for span in processes) if processes else this_process_s
    return {"wall_s": total_s, "processes": processes}
