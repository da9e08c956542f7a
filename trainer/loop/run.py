"""The run a config describes, built: device, data, checkpoints, then (in `start`) the
settings left to the trainer, the model, the optimizer and the schedule, resumed from
the latest checkpoint that fits. `trainer.loop.train` drives it.

Exact resume rests here: the loop's place is one `Position`, saved in every checkpoint
with everything else the loop depends on (`Run.state`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from box.contract import CHECKPOINTS_DIR
from trainer.checkpoints import checkpoint_file
from trainer.checkpoints.manager import CheckpointConfig, CheckpointManager
from trainer.checkpoints.resume import misfit
from trainer.config import RunConfig, UserError
from trainer.data.dataset import load_dataset, split_cases
from trainer.data.pipeline import (
    FLOAT32_BYTES,
    GPU_RESIDENT_MAX_FRACTION,
    Normalisation,
    WindowPipeline,
    norm_to_state,
)
from trainer.loop.defaults import (
    BatchCap,
    memory_batch_cap,
    parameter_groups,
    per_rank_batch,
    settle,
    step_parts,
)
from trainer.loop.device import choose_device, use_deterministic_kernels
from trainer.loop.distributed import Group
from trainer.loop.evaluate import eval_forward, split_report
from trainer.loop.formulation import (
    fastest_formulation,
    resolve_formulation,
    timed_formulations,
)
from trainer.loop.rank_outputs import QuietCheckpoints
from trainer.loop.step import TrainStep, eager_reason
from trainer.model import build_model, count_parameters

COMPILE_CACHE = "compile-cache"  # in the run dir: torch.compile's code, kept for resumes


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
        # `config` as the flags gave it; `start` settles what they left to the trainer.
        self.asked = self.config = config
        self.run_dir = Path(tc.run_dir)
        self.group = group or Group()
        self.parts = 1  # parts a rank's share of a batch is computed in (`_settle`)
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
                    self.run_dir / CHECKPOINTS_DIR,
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
        # A batch given, or a resumed run's, that a GPU's memory would not hold at once.
        self.parts = step_parts(tc.per_rank_batch_size, cap and cap.per_rank)
        if self.parts > 1:
            self.say(cap.split(tc.per_rank_batch_size, tc.batch_size, self.parts))
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
        # Under torchrun: the flat bucket (in bf16 between boxes at bf16).
        gradients = self.group.gradients(self.model, self.choice.precision)
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
            parts=self.parts,
            agree=self.group.first_failure,
        )
        self.say(f"steps: {'eager (' + eager + ')' if eager else 'one CUDA graph, replayed'}")
        # One evaluation graph for the run, in the training graph's memory pool.
        self.eval_forward = eval_forward(self.model, self.choice, tc.graph, self.step.graph_pool)
        self._say_built()

    def _say_built(self) -> None:
        """What was built: the data, the model, the batch, the ranks."""
        config, tc, oc = self.config, self.config.train, self.config.optim
        self.say(
            f"data: {len(self.train_data)} train / {len(self.val_data)} val windows, cases "
            f"{len(self.splits.train)}/{len(self.splits.val)}/{len(self.splits.test)}; "
            f"model: {config.model.arch} ({tc.formulation}), "
            f"{count_parameters(self.model):,} parameters; batch {tc.batch_size}, "
            f"lr {oc.lr:.3g}, beta2 {oc.beta2:g}; {self.steps_per_epoch} steps/epoch x "
            f"{tc.epochs} epochs"
        )
        if self.group.data_parallel:
            bf16 = " (in bf16: between boxes)" if self.step.gradients.bf16 else ""
            self.say(
                f"data parallel: world size {self.group.world_size} ({self.group.backend}), "
                f"per-rank batch {tc.per_rank_batch_size}, global batch {tc.batch_size}, "
                f"gradients all-reduced in one bucket{bf16} inside the step"
            )

    def _eager_reason(self) -> str | None:
        return eager_reason(self.choice, self.config.train.graph)

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
