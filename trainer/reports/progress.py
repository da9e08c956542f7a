"""What a run shows and records per log interval: console, metrics.jsonl, TensorBoard.

On an interactive terminal a rich progress bar (loss, windows/s, ETA); otherwise one
plain line per interval, which is what `docker logs` and CI capture.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from box.contract import EXIT_STOPPED, METRICS_FILE, TB_DIR, RunRecord
from trainer.atomic_write import write_bytes_atomic
from trainer.config import UserError
from trainer.reports.status import StatusWriter

log = logging.getLogger(__name__)
# The record each process of a run writes first: a resumed run's time is their sum.
START_RECORD = "start"


def _eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ProgressDisplay:
    """A rich bar on a TTY, plain log lines elsewhere."""

    def __init__(self, total_steps: int, start_step: int, interactive: bool | None = None) -> None:
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self._bar: Progress | None = None
        if self.interactive:
            self._bar = Progress(
                TextColumn("epoch {task.fields[epoch]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    "loss {task.fields[loss]} | {task.fields[wps]} windows/s | "
                    "ETA {task.fields[eta]}"
                ),
            )
            self._task = self._bar.add_task(
                "train",
                total=total_steps,
                completed=start_step,
                epoch="-",
                loss="-",
                wps="-",
                eta="?",
            )
            self._bar.start()
        self.total_steps = total_steps

    def update(
        self, epoch: int, step: int, loss: float, windows_per_s: float, eta_s: float | None
    ) -> None:
        if self._bar is not None:
            self._bar.update(
                self._task,
                completed=step,
                epoch=epoch,
                loss=f"{loss:.4f}",
                wps=f"{windows_per_s:,.0f}",
                eta=_eta_text(eta_s),
            )
        else:
            print(
                f"epoch {epoch} step {step}/{self.total_steps} loss {loss:.4f} "
                f"{windows_per_s:,.0f} windows/s ETA {_eta_text(eta_s)}",
                flush=True,
            )

    def note(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


class MetricsLog:
    """metrics.jsonl (one object per log step / epoch) mirrored to TensorBoard in tb/.

    Opening it repairs what a crash left: records past the step the run starts from
    (None: a fresh run, step 0) go, the resumed run logs them again, and so does a
    torn last line (host killed mid-write, disk full), with a warning. The checkpoint
    writer fsyncs the file before each checkpoint (`trainer.checkpoints.manager`), so a
    resume finds every record up to its step.
    """

    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy import; only for training

        self.path = Path(run_dir) / METRICS_FILE
        self._keep_until(resume_step or 0)
        # purge_step hides events a killed run logged past the checkpoint we resume from.
        self.tb = SummaryWriter(str(Path(run_dir) / TB_DIR), purge_step=resume_step)
        self._file = self.path.open("a")

    def _keep_until(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = [record for record in read_metrics(self.path.parent) if record["step"] <= step]
        write_bytes_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode())

    def record(self, kind: str, step: int, **values: Any) -> None:
        self._file.write(json.dumps({"kind": kind, "step": step, **values}) + "\n")
        self._file.flush()
        for name, value in values.items():
            if isinstance(value, (int, float)) and name not in ("epoch", "time"):
                self.tb.add_scalar(f"{kind}/{name}", value, step)

    def flush(self) -> None:
        """Everything recorded on disk, TensorBoard's queued events too (it writes them
        every two minutes, or at close): a stop's upload then stores them whole."""
        self._file.flush()
        self.tb.flush()

    def close(self) -> None:
        self._file.close()
        self.tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of metrics.jsonl; lines that are not one (torn) are dropped, warned."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    records = [record for record in map(_record, lines) if record is not None]
    if torn := len(lines) - len(records):
        log.warning("%s: dropped %d torn line(s) (a crash or a full disk mid-write)", path, torn)
    return records


def process_spans(records: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Each process of a run (one `start` record each): when it started, from which
    step, and the seconds it ran: to its last record the run kept (a resume drops those
    past its checkpoint), `now` for the last one, this process."""
    spans: list[dict[str, Any]] = []
    for record in records:
        if record["kind"] == START_RECORD:
            spans.append({"started_at": record["time"], "from_step": record["step"]})
            spans[-1]["wall_s"] = 0.0
        elif spans and isinstance(record.get("time"), (int, float)):
            spans[-1]["wall_s"] = record["time"] - spans[-1]["started_at"]
    if spans:
        spans[-1]["wall_s"] = now - spans[-1]["started_at"]
    return spans


def _record(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


class IntervalMeter:
    """Loss, gradient norm and throughput between log lines, summed on the device: no
    per-step sync.

    windows/s counts the training steps' time only: an interval with a validation in it
    would otherwise read as a slow step (what `fab plan`'s figures are checked against).
    The ETA keeps the whole wall time, validations included.

    On a GPU an interval's sums reach the host one interval late (`late`): `flush`
    starts their copy and the log line is written at the next one, when the copy has
    long landed. Reading them at once would wait for every step queued behind them
    (3-8% of the steps' time at batch 1024 with a log line every 10 steps).
    """

    def __init__(self, device: torch.device, step: int, total_steps: int, every: int) -> None:
        self.device = device
        self.late = device.type == "cuda"
        # loss sum, finite gradient norms' sum, their count (fp16 skips inf/nan steps)
        self.sums = torch.zeros(3, device=device)
        self.total_steps, self.every = total_steps, every
        self._reset(step)

    def _reset(self, step: int) -> None:
        self.sums.zero_()
        self.windows, self.start_step, self.started = 0, step, time.monotonic()
        self.excluded_s = 0.0

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Time spent outside the training steps (a validation, its checkpoints): left out
        of windows/s. The device is synced first, so the steps queued before still count."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        began = time.monotonic()
        try:
            yield
        finally:
            self.excluded_s += time.monotonic() - began

    def add(self, loss: torch.Tensor, windows: int, grad_norm: torch.Tensor | None = None) -> None:
        """A micro-batch's loss and windows; `grad_norm`: its optimizer step's, if it stepped."""
        self.sums[0] += loss.detach()
        if grad_norm is not None:
            finite = torch.isfinite(grad_norm)
            self.sums[1] += torch.where(finite, grad_norm, 0.0)
            self.sums[2] += finite
        self.windows += windows

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def flush(self, step: int) -> Metered:
        """The interval since the last flush (its device sums on their way to the host)."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        steps = max(step - self.start_step, 1)
        sums = torch.empty(3, pin_memory=self.late)
        sums.copy_(self.sums, non_blocking=self.late)
        landed = None
        if self.late:
            landed = torch.cuda.Event()
            landed.record()
        metered = Metered(
            sums,
            landed,
            steps,
            windows_per_s=self.windows / max(elapsed - self.excluded_s, 1e-9),
            eta_s=(self.total_steps - step) * elapsed / steps,
        )
        self._reset(step)
        return metered


@dataclass(frozen=True)
class Metered:
    """One log interval: its host figures, and its device sums copied to the host."""

    sums: torch.Tensor
    landed: torch.cuda.Event | None  # None: copied already (the CPU)
    steps: int
    windows_per_s: float
    eta_s: float

    def values(self) -> dict[str, float | None]:
        """Mean loss and gradient norm per optimizer step, windows/s and ETA."""
        if self.landed is not None:
            self.landed.synchronize()
        loss_sum, norm_sum, norms = self.sums.tolist()
        return {
            "loss": loss_sum / self.steps,
            "grad_norm": norm_sum / norms if norms else None,
            "windows_per_s": self.windows_per_s,
            "eta_s": self.eta_s,
        }


@dataclass(frozen=True)
class LogLine:
    """A log interval waiting for its device figures (`Metered`)."""

    metered: Metered
    epoch: int
    step: int
    lr: float
    last_checkpoint_at: float | None
    gpu_memory_gib: float | None
    at: float  # when the interval ended (unix s)


class RunOutputs:
    """Everything the loop reports: console, metrics.jsonl + TensorBoard, status.json."""

    def __init__(
        self,
        run_dir: Path,
        run_id: str,
        total_steps: int,
        step: int,
        resumed: bool,
        device: torch.device,
        log_every_steps: int,
        uploads: Callable[[], dict[str, Any] | None] | None = None,
        started_at: float | None = None,
    ) -> None:
        """`started_at`: when this process began the run (unix s; default: now)."""
        self.meter = IntervalMeter(device, step, total_steps, log_every_steps)
        self.log = MetricsLog(run_dir, resume_step=step if resumed else None)
        self.log.record(START_RECORD, step, time=started_at or time.time())
        self.display = ProgressDisplay(total_steps, step)
        before = RunRecord.read(run_dir)
        carried = before.after_restart(time.time()) if resumed else {}
        # Every earlier process's span, resumed or not: each one's box hours were billed.
        carried["ran"] = before.ran or []
        self.status = StatusWriter(
            run_dir,
            run_id,
            total_steps,
            uploads,
            fields=carried,
            trains_since=started_at or time.time(),
        )
        self.status.write(step=step)
        self._val_mae: float | None = None
        self._pending: LogLine | None = None

    def interval(
        self,
        epoch: int,
        step: int,
        lr: float,
        last_checkpoint_at: float | None,
        gpu_memory_gib: float | None = None,
    ) -> None:
        """One log line (on a GPU the previous one: `IntervalMeter.late`). `epoch`: the
        one in progress, counted from 1 as the validation lines count it.
        `gpu_memory_gib`: the most GPU memory the run's tensors took so far (None: CPU)."""
        line = LogLine(
            self.meter.flush(step), epoch, step, lr, last_checkpoint_at, gpu_memory_gib, time.time()
        )
        self.drain()
        if self.meter.late:
            self._pending = line
        else:
            self._write(line)

    def drain(self) -> None:
        """Write the log line still waiting for its figures, if one is."""
        line, self._pending = self._pending, None
        if line is not None:
            self._write(line)

    def _write(self, line: LogLine) -> None:
        values = line.metered.values()
        if not math.isfinite(values["loss"]):
            raise UserError(
                f"training diverged: the loss is {values['loss']} at step {line.step} (lr "
                f"{line.lr:g}); lower --lr, or look for extreme values in the data"
            )
        self.log.record(
            "train",
            line.step,
            epoch=line.epoch,
            loss=values["loss"],
            lr=line.lr,
            grad_norm=values["grad_norm"],
            windows_per_s=values["windows_per_s"],
            gpu_memory_gib=line.gpu_memory_gib,
            time=line.at,
        )
        self.display.update(
            line.epoch, line.step, values["loss"], values["windows_per_s"], values["eta_s"]
        )
        self.status.write(
            epoch=line.epoch,
            step=line.step,
            train_loss=values["loss"],
            val_mae=self._val_mae,
            windows_per_s=values["windows_per_s"],
            eta_s=values["eta_s"],
            last_checkpoint_at=line.last_checkpoint_at,
            gpu_memory_gib=line.gpu_memory_gib,
        )

    def epoch_end(
        self,
        epoch: int,
        step: int,
        val: dict[str, Any],
        best_val_mae: float,
        last_checkpoint_at: float | None,
    ) -> None:
        self.drain()  # the epoch's last train line before its validation line
        self._val_mae = val["mae"]
        self.log.record(
            "epoch",
            step,
            epoch=epoch,
            val_mae=val["mae"],
            val_rmse=val["rmse"],
            val_baseline_mae=val["baseline"]["mae"],
            best_val_mae=best_val_mae,
            time=time.time(),
        )
        self.display.note(
            f"epoch {epoch}: val MAE {val['mae']:.2f} mg/dL (best "
            f"{best_val_mae:.2f}, constant baseline {val['baseline']['mae']:.2f})"
        )
        self.status.write(
            epoch=epoch, step=step, val_mae=val["mae"], last_checkpoint_at=last_checkpoint_at
        )

    def stopped(
        self, reason: str | None, state: str, step: int, last_checkpoint_at: float | None
    ) -> None:
        self.drain()
        self.display.note(
            f"stop requested ({reason}): checkpoint saved at step {step}; "
            f"exit {EXIT_STOPPED} (resume by running the same command)"
        )
        self.status.write(
            state=state, step=step, exit_code=EXIT_STOPPED, last_checkpoint_at=last_checkpoint_at
        )
        self.log.flush()  # before the stop's upload: nothing is written after it

    def close(self) -> None:
        try:
            self.drain()
        finally:
            self.display.close()
            self.log.close()
