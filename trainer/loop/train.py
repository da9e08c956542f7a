"""Train ResNet-1D on a dataset dir. Reads top to bottom, like nanoGPT's train.py:

config -> the run built (`trainer.loop.run`: device, data, model, optimizer, resume) ->
epochs of steps -> final evaluation and summary (`trainer.reports.summary`).

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from box.contract import (
    CONFIG_FILE,
    EXIT_FINISHED,
    EXIT_STOPPED,
    REPORT_FILE,
    SPLITS_FILE,
    STATE_FINISHED,
    STATE_UPLOAD_PENDING,
    SUMMARY_FILE,
)
from trainer.atomic_write import write_json_atomic
from trainer.checkpoints.final_upload import finish_pending
from trainer.checkpoints.run_log import seal_run_log
from trainer.checkpoints.uploader_lock import uploader_lock
from trainer.config import RunConfig, UserError
from trainer.container_env import host_path
from trainer.data.pipeline import micro_batch_seed
from trainer.loop.distributed import Group, RankInfo
from trainer.loop.preemption import StopSignal, StopVote
from trainer.loop.rank_outputs import Heartbeat, QuietOutputs
from trainer.loop.run import Position, Run
from trainer.loop.run_ending import RunEnding
from trainer.loop.step_deadline import StepDeadline
from trainer.model import count_parameters
from trainer.reports.progress import RunOutputs
from trainer.reports.report import data_identity, write_report
from trainer.reports.settings import given_to_the_trainer
from trainer.reports.summary import Outcome, run_summary

# How an epoch's steps end before its batches do (None: they did not).
STOPPED, MAX_STEPS = "stopped", "max_steps"


@dataclass(frozen=True)
class Watch:
    """What watches the steps from outside them: stop requests (`stop`), the ranks' vote
    on them (`vote`), and a deadline on every step's end (`deadline`, a thread)."""

    stop: StopSignal
    vote: StopVote
    deadline: StepDeadline


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
    """Build and resume the run, train epochs until it is done or asked to stop, then
    finish it."""
    started, started_at = time.monotonic(), time.time()
    run = Run(config, group)
    ending.checkpoints = run.checkpoints
    resumed = run.start()  # from here on run.config is settled: what every record says
    ending.store_matched = True
    pos = resumed or Position()
    _record_start(run, pos, resumed is not None)

    stop = StopSignal(watch_notices=group.info.local_rank == 0).install()  # one poller a box
    watch = Watch(stop, StopVote(group), StepDeadline().start())
    try:
        out = _outputs(run, pos, resumed is not None, started_at, ending)
        ending.status = out.status
        try:
            code = _epochs(run, pos, watch, out)
        finally:
            out.close()
    finally:
        watch.deadline.stop()
        stop.uninstall()
    if code is not None:
        return code
    finish(run, pos, out, time.monotonic() - started)
    return ending.finished()


def _record_start(run: Run, pos: Position, resumed: bool) -> None:
    """splits.json and config.json (rank 0), and where a resume goes on from. Only now: a
    refused resume must leave the run's own config.json as it was."""
    if run.group.is_main:
        write_json_atomic(run.run_dir / SPLITS_FILE, run.splits.to_dict())
        write_json_atomic(run.run_dir / CONFIG_FILE, run.config.to_dict())
    if resumed:
        epoch = pos.epoch + 1  # the one in progress, as the step lines count it
        run.say(f"resume: step {pos.step}, epoch {epoch}, batch {pos.step_in_epoch}")


def _outputs(
    run: Run, pos: Position, resumed: bool, started_at: float, ending: RunEnding
) -> RunOutputs | QuietOutputs:
    """Rank 0's records (status.json, metrics.jsonl, TensorBoard, the log lines); on the
    other ranks, their box's heartbeat."""
    if not run.group.is_main:
        return QuietOutputs(ending.heartbeat)
    tc = run.config.train
    return RunOutputs(
        run.run_dir,
        tc.run_id,
        run.total_steps,
        pos.step,
        resumed=resumed,
        device=run.choice.device,
        log_every_steps=tc.log_every_steps,
        uploads=run.checkpoints.uploads,
        started_at=started_at,
    )


def _epochs(run: Run, pos: Position, watch: Watch, out: RunOutputs) -> int | None:
    """Epochs until the run is done (None), or EXIT_STOPPED when asked to stop: its
    checkpoint saved and uploaded."""
    while not _done(run, pos):
        outcome = train_epoch(run, pos, watch, out)
        if outcome == STOPPED:
            _stop(run, pos, watch.stop, out)
            return EXIT_STOPPED
        if outcome == MAX_STEPS:
            run.checkpoints.save_last(run.state(pos))
            return None
        if end_epoch(run, pos, out):
            print(
                f"early stop: no better val MAE for {pos.epochs_without_improvement} epochs",
                flush=True,
            )
    return None


def train_epoch(run: Run, pos: Position, watch: Watch, out: RunOutputs) -> str | None:
    """Optimizer steps through the rest of epoch `pos.epoch`.

    Returns None when the epoch's batches are done, STOPPED on a stop request and
    MAX_STEPS at --max-steps; `pos` is then the exact place to resume from.
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
        watch.deadline.begin(pos.step + 1, full)
        loss = run.step(x, y, scale, steps=steps, full=full)
        watch.deadline.end(pos.step + 1, run.choice.end_marker())
        out.meter.add(loss, data.windows_in_batch(micro), run.step.grad_norm if steps else None)
        pos.step_in_epoch += 1
        if not steps:
            continue
        run.scheduler.step()  # fills the device-side learning rate on a GPU
        pos.step += 1
        outcome = _after_step(run, pos, watch, out)
        if outcome is not None:
            return outcome
    return None


def _after_step(run: Run, pos: Position, watch: Watch, out: RunOutputs) -> str | None:
    """After optimizer step `pos.step`: its log line when due, the stop vote when due,
    --max-steps, and a checkpoint when due. STOPPED or MAX_STEPS to end the epoch there,
    else None."""
    if out.meter.due(pos.step):
        out.interval(
            pos.epoch + 1,  # `pos.epoch` counts the epochs done
            pos.step,
            run.learning_rate(),
            run.checkpoints.last_saved_at,
            run.choice.peak_memory_gib(),
        )
    # No device sync: an Event read and, with several ranks, a vote all act on at once.
    stop_code = watch.vote(pos.step, watch.stop.code)
    if stop_code:
        watch.stop.adopt(stop_code)
        return STOPPED
    max_steps = run.config.train.max_steps
    if max_steps is not None and pos.step >= max_steps:
        return MAX_STEPS
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


def _stop(run: Run, pos: Position, stop: StopSignal, out: RunOutputs) -> None:
    """Asked to stop: save the checkpoint, say so, upload it while the machine lasts.
    Its records are on disk and the run log sealed first: what is stored is the box's."""
    run.checkpoints.save_last(run.state(pos))
    out.stopped(stop.reason, stop.state, pos.step, run.checkpoints.last_saved_at)
    if run.group.is_main:
        seal_run_log()
    run.checkpoints.flush(stop.upload_seconds_left())
    # torchrun stops the whole group at the first rank's exit 75: the others wait here
    # for rank 0's upload.
    run.group.barrier()
    stop.acknowledge()  # after the upload: Azure may now evict early


def finish(run: Run, pos: Position, out: RunOutputs, wall_s: float) -> dict[str, Any]:
    """Best weights on val and test -> summary.json, report.md, plots; status finished.
    `wall_s`: this process's time; a resumed run's is the sum over its processes."""
    best_state = run.group.broadcast_state(run.checkpoints.load_best())
    run.model.load_state_dict(best_state["model"])
    val, _, _ = run.report(run.val_data)
    # A sweep's trial leaves the test split alone: the sweep evaluates it once, for the
    # trial it chooses by validation MAE, so no trial is picked by its test score.
    test, test_ref, test_pred = (
        (None, None, None)
        if run.config.train.skip_test
        else run.report(run.pipeline(run.splits.test))
    )
    outcome = _outcome(run, pos, best_state, val, test)
    # Rank 0's status.json counts the recoveries; the other ranks write no summary.
    counted = out.status.fields if run.group.is_main else {}
    summary = run_summary(run.config, outcome, counted, wall_s, run.group.is_main).to_json()
    if run.group.is_main:
        write_json_atomic(run.run_dir / SUMMARY_FILE, summary)
        given = given_to_the_trainer(run.asked)
        write_report(run.run_dir, summary, test_ref, test_pred, given)
    # `finished` once its last uploads landed (RunEnding.finished).
    uploads = run.checkpoints.store is not None
    out.status.write(
        state=STATE_UPLOAD_PENDING if uploads else STATE_FINISHED,
        epoch=pos.epoch,
        step=pos.step,
        val_mae=val["mae"],
        exit_code=EXIT_FINISHED,
        eta_s=0,
        last_checkpoint_at=run.checkpoints.last_saved_at,
    )
    scored = test or val
    run.say(
        f"done: {'test' if test else 'validation'} MAE {scored['mae']:.2f} mg/dL vs "
        f"constant-median baseline {scored['baseline']['mae']:.2f}; report in "
        f"{host_path(run.run_dir / REPORT_FILE)}"
    )
    return summary


def _outcome(
    run: Run, pos: Position, best_state: dict[str, Any], val: dict, test: dict | None
) -> Outcome:
    return Outcome(
        best_epoch=int(best_state["epoch"]),
        best_step=int(best_state["step"]),
        steps=pos.step,
        epochs=pos.epoch,
        parameters=count_parameters(run.model),
        device=run.choice.description,
        precision=run.choice.precision,
        gpu_memory_gib=run.choice.peak_memory_gib(),
        data=data_identity(run.dataset),
        val=val,
        test=test,
    )
