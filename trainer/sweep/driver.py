"""`python -m trainer sweep --dir DIR`: the sweep's driver, in its own container on the box.

Reads top to bottom: the spec -> the Optuna study (its journal in the sweep's folder is
the queue) -> trials that were running when the sweep last stopped, started again
(each resumes from its checkpoint) -> the loop: collect finished trials, report each
epoch's validation MAE in order and judge it (prune), start new ones while there is
room -> choose, evaluate the test split once, report (`trainer.sweep.selection`).

Stop and resume, as a trainer does: SIGTERM (`docker stop`, a nightly stop, an
eviction) stops every running trial (each checkpoints and uploads, exit 75), leaves
them running in the study, writes `stopped` and exits 75; the box's resume unit starts
the container again and this picks up where it was. A trial that exits 75 on its own
saw a spot notice: the box is going, so the sweep stops the same way.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from itertools import product
from pathlib import Path
from typing import Any

from box.contract import (
    EXIT_FINISHED,
    EXIT_STOPPED,
    STATE_FAILED,
    STATE_FINISHED,
    STATE_RUNNING,
    STATE_STOPPED,
    STATUS_FILE,
    TRIAL_COMPLETE,
    RunRecord,
)
from trainer.atomic_write import write_json_atomic
from trainer.config import UserError
from trainer.sweep import journal, selection
from trainer.sweep.mirror import Mirror
from trainer.sweep.space import Param, parse_params
from trainer.sweep.spec import TRIALS_FILE, SweepSpec
from trainer.sweep.trials import TrialPool, TrialProcess, other_values

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
# Within docker's 120 s stop timeout (box contract), above the trainer's 100 s budget
# to checkpoint and upload: the trials stop in parallel.
STOP_WAIT_SECONDS = 110.0
# This many failed trials and none finished: the flags or the data are wrong, not the
# values; the sweep gives up instead of failing every trial of the queue.
MAX_FAILED_TRIALS = 3
# Median pruning: compare from the 2nd finished trial on, never before an epoch's end.
PRUNE_STARTUP_TRIALS = 2
PRUNE_WARMUP_EPOCHS = 1


class StopRequested(Exception):
    """SIGTERM while the chosen trial's test split is evaluated: that waits for the
    next start (result.json is written only once it is done)."""


def open_study(spec: SweepSpec, params: list[Param], sweep_dir: Path):
    """The sweep's study, created or loaded from its journal (made readable first:
    `trainer.sweep.journal`)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A grid is the study's queue, enqueued once when the study is made: Optuna's own
    # GridSampler calls `study.stop()` when the grid is used up, which the ask-and-tell
    # loop here cannot take (it raises outside `optimize`).
    samplers = {
        "grid": optuna.samplers.RandomSampler,
        "random": optuna.samplers.RandomSampler,
        "tpe": optuna.samplers.TPESampler,
    }
    pruner = (
        optuna.pruners.MedianPruner(PRUNE_STARTUP_TRIALS, PRUNE_WARMUP_EPOCHS)
        if spec.prune
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=spec.sweep_id,
        storage=JournalStorage(JournalFileBackend(str(journal.prepare(spec, sweep_dir)))),
        sampler=samplers[spec.method](seed=spec.seed),
        pruner=pruner,
        direction="minimize",
        load_if_exists=True,
    )
    if spec.method == "grid" and not study.get_trials(deepcopy=False):
        for values in grid_points(params)[: spec.trials]:
            study.enqueue_trial(values)
    return study


def grid_points(params: list[Param]) -> list[dict[str, Any]]:
    """Every combination of the listed values, the last flag varying fastest."""
    names = [param.name for param in params]
    return [dict(zip(names, combo, strict=True)) for combo in product(*(p.values for p in params))]


def distributions(params: list[Param]) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    found = {}
    for param in params:
        if not param.is_range:
            found[param.name] = CategoricalDistribution(list(param.values))
        elif param.kind is int:
            found[param.name] = IntDistribution(param.low, param.high, log=param.log)
        else:
            found[param.name] = FloatDistribution(param.low, param.high, log=param.log)
    return found


class Driver:
    """One life of the sweep's container."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path) -> None:
        self.spec, self.sweep_dir = spec, sweep_dir
        self.params = parse_params(spec.params)
        self.study = open_study(spec, self.params, sweep_dir)
        self.space = distributions(self.params)
        self.wake = threading.Event()
        self.pool = TrialPool(spec, on_exit=self.wake.set)
        self.asked: dict[int, Any] = {}  # number -> optuna Trial of each running trial
        self.pruned: set[int] = set()
        self.stop_reason = ""
        self.finishing = False
        self.mirror = Mirror(spec, sweep_dir)

    def run(self) -> int:
        for name in (signal.SIGTERM, signal.SIGINT):
            signal.signal(name, self._on_signal)
        self.write_status(STATE_RUNNING)
        self._resume_running()
        while True:
            self.look()
            if self.stop_reason:
                return self._stop()
            if not self.pool.running and not self._more():
                break
            self.write_status(STATE_RUNNING)
            journal.keep_verified(self.sweep_dir)
            self.mirror.sync()
            self.wake.wait(POLL_SECONDS)
            self.wake.clear()  # what woke it (a trial's exit, a signal) is seen by the look
        try:
            self.finishing = True  # a stop now ends the test evaluation at once
            code = selection.finish(self.spec, self.study, self.sweep_dir)
        except StopRequested:
            return self._stop()
        self.write_status(STATE_FINISHED if code == EXIT_FINISHED else STATE_FAILED, code)
        self.mirror.sync()
        return code

    def look(self) -> None:
        """One look at the trials: collect those that ended, judge every epoch each one
        finished since the last look, start new ones while there is room."""
        self._collect()
        if not self.stop_reason:
            self._report_epochs()
            self._fill()

    def _on_signal(self, number: int, _frame: Any) -> None:
        self.stop_reason = signal.Signals(number).name
        self.wake.set()
        if self.finishing:
            raise StopRequested(self.stop_reason)

    def _say(self, line: str) -> None:
        print(f"sweep {self.spec.sweep_id}: {line}", flush=True)

    def _resume_running(self) -> None:
        import optuna

        names = {param.name for param in self.params}
        for frozen in self.study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            trial = optuna.trial.Trial(self.study, frozen._trial_id)
            if set(frozen.params) != names:  # a journal append cut inside its values
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                lost = ", ".join(sorted(names - set(frozen.params)))
                self._say(
                    f"trial {frozen.number} failed: its values of {lost} were cut from the "
                    "journal (an append cut short); not run on the trainer's defaults"
                )
                continue
            started = self._start(trial, frozen.params)
            if started is not None:
                started.epochs_seen = max(frozen.intermediate_values, default=0)
                self._say(f"trial {frozen.number} again ({started.run_id}: resumes by itself)")

    def _start(self, trial: Any, values: dict[str, Any]) -> TrialProcess | None:
        """Start the trial; None (and the trial failed) where its run id holds an earlier
        trial's files made under other values (a journal lost, the study made anew)."""
        import optuna

        run_id = self.spec.trial_run_id(trial.number)
        other = other_values(self.spec, run_id, values)
        if other:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self._say(
                f"trial {trial.number} failed: {run_id} holds checkpoints trained with "
                f"{other}, not {values}; not resumed as this trial"
            )
            return None
        self.asked[trial.number] = trial
        return self.pool.start(trial.number, values)

    def _more(self) -> bool:
        """Whether to ask the study for another trial."""
        import optuna

        states = optuna.trial.TrialState
        trials = [t for t in self.study.get_trials(deepcopy=False) if t.state != states.WAITING]
        failed = sum(t.state == states.FAIL for t in trials)
        complete = any(t.state == states.COMPLETE for t in trials)
        if failed >= MAX_FAILED_TRIALS and not complete:
            return False
        return len(trials) < self.spec.trials

    def _fill(self) -> None:
        while self.pool.has_room() and self._more() and not self.stop_reason:
            trial = self.study.ask(self.space)
            started = self._start(trial, trial.params)
            if started is not None:
                self._say(f"trial {trial.number} started ({started.run_id}: {trial.params})")

    def _collect(self) -> None:
        import optuna

        for trial, code in self.pool.finished():
            asked = self.asked.pop(trial.number)
            # Epochs it finished since the last look, judged as if seen one by one: a
            # trial that ended between two looks is pruned as one seen at each epoch is.
            self._judge(trial, asked)
            if trial.number in self.pruned:
                # Asked to stop: 75 from the loop, SIGTERM's own death when the stop
                # reached it past the loop (writing its report), or it had ended before
                # the look that judged it; pruned either way.
                self.study.tell(asked, state=optuna.trial.TrialState.PRUNED)
                self._say(f"trial {trial.number} pruned (behind the median at its epoch)")
            elif code == EXIT_FINISHED:
                mae = selection.val_mae(trial.run_dir)
                state = optuna.trial.TrialState.COMPLETE if mae is not None else None
                self.study.tell(asked, mae, state=state or optuna.trial.TrialState.FAIL)
                self._say(selection.finished_line(self.spec, trial.number, mae))
            elif code == EXIT_STOPPED:
                # Not asked to stop: a spot notice reached it. Stay in the study as
                # running; the whole sweep stops and resumes with the box.
                self.asked[trial.number] = asked
                self.stop_reason = self.stop_reason or f"trial {trial.number} stopped by itself"
            else:
                self.study.tell(asked, state=optuna.trial.TrialState.FAIL)
                self._say(f"trial {trial.number} failed (exit {code}): {trial.last_line()}")

    def _report_epochs(self) -> None:
        for trial in self.pool.running.values():
            self._judge(trial, self.asked[trial.number])

    def _judge(self, trial: TrialProcess, asked: Any) -> None:
        """Report each epoch the trial finished since the last look to the study, in
        order, and ask the pruner after each: how many epochs passed between two looks
        changes nothing. A pruned trial stopped at that epoch in the study's eyes: the
        epochs it ran past it before the stop reached it are not reported."""
        for epoch, mae in trial.new_epochs():
            if trial.number in self.pruned:
                return
            asked.report(mae, epoch)
            if self.spec.prune and asked.should_prune():
                self.pruned.add(trial.number)
                trial.stop()

    def _stop(self) -> int:
        self._say(f"stopping ({self.stop_reason}): the running trials checkpoint")
        for trial, code in self.pool.stop_all(STOP_WAIT_SECONDS):
            if code not in (EXIT_FINISHED, EXIT_STOPPED):
                self._say(f"trial {trial.number} ended with exit {code} while stopping")
        self.write_status(STATE_STOPPED, EXIT_STOPPED)
        self.mirror.sync()
        self._say("stopped; starting the sweep's container again resumes it")
        return EXIT_STOPPED

    def write_status(self, state: str, exit_code: int | None = None) -> None:
        """status.json, read by the box as a run's (`step` moves while any trial trains),
        and trials.json."""
        trials = selection.trial_rows(self.spec, self.study, self.pruned)
        steps = sum(
            RunRecord.read(Path(self.spec.runs_dir) / row["run_id"]).step or 0 for row in trials
        )
        counts: dict[str, int] = {}
        for row in trials:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        # The best complete trial's, as a run's status carries its best epoch's: what the
        # box's end message and `fab status` say of the sweep.
        maes = [row["val_mae"] for row in trials if row["state"] == TRIAL_COMPLETE]
        write_json_atomic(self.sweep_dir / TRIALS_FILE, {"trials": trials})
        write_json_atomic(
            self.sweep_dir / STATUS_FILE,
            {
                "sweep_id": self.spec.sweep_id,
                "state": state,
                "step": steps,
                "updated_at": time.time(),
                "exit_code": exit_code,
                "val_mae": min((mae for mae in maes if mae is not None), default=None),
                "trials": {"of": self.spec.trials, **counts},
            },
        )


def run_sweep(sweep_dir: Path) -> int:
    """The sweep in `sweep_dir` to its end (0), its stop (75) or its failure (1)."""
    sweep_dir = Path(sweep_dir)
    spec = SweepSpec.read(sweep_dir)
    if not Path(spec.data_dir).is_dir():
        raise UserError(f"{spec.data_dir}: the sweep's dataset is not there; see `fab sweep`")
    return Driver(spec, sweep_dir).run()
