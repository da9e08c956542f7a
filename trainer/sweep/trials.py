"""A sweep's trials as `python -m trainer train` processes, each a run like any other.

A trial has its own run dir (`runs/<sweep_id>-tNNN`), checkpoints to its own
`<storageUri>/runs/<id>`, and resumes by itself when started again with the same
flags: the driver only starts, watches and stops processes. Its output goes to
`train.log` in its run dir (mirrored with the rest). On a GPU box each slot is pinned
to one GPU (`CUDA_VISIBLE_DEVICES`); on a CPU the cores are split between the slots
(at most the container's own OMP_NUM_THREADS each), since oversubscribed OpenMP
threads spin-wait each other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from box.contract import CONFIG_FILE, LAUNCH_FILE, METRICS_FILE, LaunchRecord, run_uri
from trainer.atomic_write import write_json_atomic
from trainer.container_env import cores
from trainer.sweep.space import recorded, trial_flags
from trainer.sweep.spec import TRIAL_LOG_FILE, SweepSpec


def _threads(concurrent: int) -> int:
    """A CPU slot's OpenMP threads: its share of the cores, at most the OMP_NUM_THREADS the
    sweep's container was given (containerEnv): a box shared with other work spins less."""
    share = max(1, cores() // concurrent)
    given = os.environ.get("OMP_NUM_THREADS", "")
    return min(share, int(given)) if given.isdigit() and int(given) > 0 else share


@dataclass
class TrialProcess:
    """One running trial: its Optuna number, run id, values, slot and process."""

    number: int
    run_id: str
    values: dict[str, Any]
    slot: int
    process: subprocess.Popen
    run_dir: Path
    stopping: bool = False
    """The driver asked it to stop (pruned, or the sweep stops)."""
    epochs_seen: int = 0
    """Epoch records of metrics.jsonl already reported to the study."""
    log: Any = field(default=None, repr=False)

    def exit_code(self) -> int | None:
        return self.process.poll()

    def new_epochs(self) -> list[tuple[int, float]]:
        """(epoch, validation MAE) of the epochs finished since the last look."""
        records = []
        try:
            lines = (self.run_dir / METRICS_FILE).read_text(errors="replace").splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the line being written
            if isinstance(record, dict) and record.get("kind") == "epoch":
                records.append((int(record["epoch"]), float(record["val_mae"])))
        fresh = [(epoch, mae) for epoch, mae in records if epoch > self.epochs_seen]
        if fresh:
            self.epochs_seen = max(epoch for epoch, _ in fresh)
        return fresh

    def last_line(self) -> str:
        """The last line the trial printed (a failure's one-line reason), and where the
        rest is."""
        path = self.run_dir / TRIAL_LOG_FILE
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return f"{lines[-1][:300] if lines else 'no output'} (all of it: {path})"

    def stop(self) -> None:
        """SIGTERM: the trainer checkpoints, uploads and exits 75."""
        if self.process.poll() is None:
            self.stopping = True
            self.process.send_signal(signal.SIGTERM)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def recorded_config(spec: SweepSpec, run_id: str) -> dict:
    """The config.json an earlier trial of this id left, on the box or else in storage
    (a replaced box); {} when there is none (or storage cannot say)."""
    from trainer.storage import open_store

    local = Path(spec.runs_dir) / run_id / CONFIG_FILE
    try:
        text = local.read_bytes() if local.exists() else None
        if text is None:
            store = open_store(run_uri(spec.storage_uri, run_id))
            text = store.read_bytes(CONFIG_FILE)
        config = json.loads(text)
    except Exception:  # none, torn, or storage down: the trainer's own resume checks stand
        return {}
    return config if isinstance(config, dict) else {}


def other_values(spec: SweepSpec, run_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """The swept values an earlier trial of this id trained with where they differ from
    `values`: its checkpoints are another trial's, never to be resumed as this one."""
    config = recorded_config(spec, run_id)
    if not config:
        return {}
    return {
        name: recorded(config, name)
        for name, value in values.items()
        if recorded(config, name) not in (None, value)
    }


class TrialPool:
    """At most `spec.concurrent` trials at once, each in a slot (a GPU, or a share of
    the cores)."""

    def __init__(self, spec: SweepSpec, on_exit: Callable[[], None] = lambda: None) -> None:
        self.spec = spec
        self.running: dict[int, TrialProcess] = {}
        self.threads = _threads(spec.concurrent)
        self.on_exit = on_exit
        """Called from a watcher thread as each trial's process exits: the driver looks
        then instead of at its next poll, so the next trial starts at once."""

    def has_room(self) -> bool:
        return len(self.running) < self.spec.concurrent

    def _free_slot(self) -> int:
        taken = {trial.slot for trial in self.running.values()}
        return min(set(range(self.spec.concurrent)) - taken)

    def command(self, run_id: str, values: dict[str, Any]) -> list[str]:
        spec = self.spec
        name = f"{spec.name or spec.sweep_id} {run_id[len(spec.sweep_id) + 1 :]}"[:64].rstrip()
        return [
            sys.executable, "-m", "trainer", "train",
            "--data", spec.data_dir,
            "--run-dir", f"{spec.runs_dir}/{run_id}",
            "--checkpoint-uri", spec.trial_checkpoint_uri(run_id),
            "--name", name,
            "--skip-test",
            *spec.trainer_args,
            *trial_flags(values),
        ]  # fmt: skip

    def _environment(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        if self.spec.gpus > 0:
            env["CUDA_VISIBLE_DEVICES"] = str(slot % self.spec.gpus)
        else:
            env["OMP_NUM_THREADS"] = str(self.threads)
        return env

    def start(self, number: int, values: dict[str, Any]) -> TrialProcess:
        """Start trial `number` (again: a trial the sweep was stopped in resumes)."""
        run_id = self.spec.trial_run_id(number)
        run_dir = Path(self.spec.runs_dir) / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        self._write_launch(run_dir, run_id, number, values)
        slot = self._free_slot()
        log = (run_dir / TRIAL_LOG_FILE).open("a")
        process = subprocess.Popen(
            self.command(run_id, values),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._environment(slot),
        )
        trial = TrialProcess(number, run_id, values, slot, process, run_dir, log=log)
        self.running[number] = trial
        threading.Thread(target=self._watch, args=(process,), daemon=True).start()
        return trial

    def _watch(self, process: subprocess.Popen) -> None:
        process.wait()
        self.on_exit()

    def _write_launch(self, run_dir: Path, run_id: str, number: int, values: dict) -> None:
        """launch.json as `fab train` writes one (ARCHITECTURE.md), plus the sweep's
        keys; the first start's is kept, so its time counts from the first start."""
        path = run_dir / LAUNCH_FILE
        if path.exists():
            return
        spec = self.spec
        launch = LaunchRecord(
            run_id=run_id,
            image=spec.image,
            dataset=spec.dataset,
            trainer_args=self.command(run_id, values)[4:],
            started_at=time.time(),
            hourly_price_usd=spec.hourly_price_usd,
            spot=spec.spot,
            boxes=1,
            world_size=1,
            name=spec.name,
            sweep=spec.sweep_id,
            trial=number,
            values=values,
            # The box's price is shared by the trials that run at once.
            concurrent_trials=spec.concurrent,
        )
        write_json_atomic(path, launch.to_json())

    def finished(self) -> list[tuple[TrialProcess, int]]:
        """The trials that exited since the last look, with their exit codes."""
        done = []
        for number, trial in list(self.running.items()):
            code = trial.exit_code()
            if code is not None:
                trial.close()
                del self.running[number]
                done.append((trial, code))
        return done

    def stop_all(self, wait_s: float) -> list[tuple[TrialProcess, int]]:
        """Stop every trial and wait for their checkpoints (killed past `wait_s`)."""
        for trial in self.running.values():
            trial.stop()
        deadline = time.monotonic() + wait_s
        for trial in self.running.values():
            try:
                trial.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                trial.process.kill()
                trial.process.wait()
        return self.finished()
