"""One training step as `train`, `bench` and the formulation timing take it; on a GPU the
whole step is one CUDA graph, recorded once and replayed.

Eagerly, the step launches ~850 kernels at a batch of 1024 and on an H100 the host took
~20 ms to issue them while the GPU was busy 5-14 ms: the step cost the same at batch
256 as at 1024. Replayed as one graph, the host issues one launch. What makes the step
capturable:

- the learning rate is a device tensor the scheduler fills between steps (AdamW fused
  and capturable, `DeviceChoice.optimizer`), never a float baked into the graph;
- fp16's loss scale, its inf check and the skipped step stay on the device (GradScaler
  hands them to fused AdamW; no `.item()`);
- gradients are allocated before the first step and zeroed in place, never
  re-allocated, so the graph's addresses hold;
- each batch is copied into the graph's static input buffers;
- the batch's loss scale (1 / its windows) is the same for every full batch.

Several ranks are captured too: the gradients' all-reduce is one collective on the
step's stream, recorded into the graph (`trainer.loop.gradient_sync`). NCCL needs the
same collectives on every rank, so a capture is every rank's or none's: after each
capture the ranks agree (`agree`: a gloo all-reduce, `Group.first_failure`), and where
one rank's failed, every rank drops its graphs and steps eagerly, said in one line.

Gradient accumulation is captured as well: a micro-batch that only accumulates replays
its own graph (forward and backward into the gradients), the stepping one the whole
step's. Each shape of work (windows, whether it steps) has its static buffers, its
warm-up and its graph, all in one memory pool: `--grad-accum`, and a rank's share
split into `parts` where it would not fit in the GPU's memory at once (a resumed run's
batch on a smaller GPU, `trainer.loop.defaults.step_parts`), replay graphs too. On a
CPU the same path runs through the static buffers with a recorder that replays the
work eagerly (the tests' `record`), and trains the plain eager path's weights bitwise.

`--compile` compiles the network without CUDA graphs of its own (inductor's default
mode: fused kernels) in the first warm-up step, and the capture records the compiled
kernels like any others: the step stays one graph. A compile that fails on any rank
leaves every rank on the uncompiled network (agreed as a capture is).

Eager, and said once why: the CPU (no CUDA graphs), `--no-graph`. The short last
batch of an epoch is always eager. The first `WARMUP_STEPS` full steps of each shape
run eagerly on a side stream (cuDNN's autotuning, AdamW's state and the allocator
settle first); every step, eager or replayed, is a real step of the run: a replay runs
the kernels the eager step ran, on the same tensors, so resume and `--deterministic`
hold. A capture that fails leaves the run eager, with one line naming the error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from trainer.loop.device import DeviceChoice
from trainer.loop.gradient_sync import FlatGradients

WARMUP_STEPS = 3


class Replayable(Protocol):
    """A recorded piece of work (a CUDA graph): `replay` runs it again."""

    def replay(self) -> None: ...

    def pool(self) -> Any: ...


Record = Callable[[Callable[[], torch.Tensor], Any], tuple[Replayable, torch.Tensor]]
"""Records `work` (in the memory pool given, None: its own): the recording and the tensor
its replays write `work`'s result to. Recording runs nothing."""

Agree = Callable[[str | None], tuple[int, str] | None]
"""Every rank's outcome of one capture (this rank's error line, None: it captured): the
lowest rank whose failed and its line, or None where all captured."""


def cuda_graph(work: Callable[[], torch.Tensor], pool: Any) -> tuple[Replayable, torch.Tensor]:
    """`work` recorded as one CUDA graph in `pool`."""
    graph = torch.cuda.CUDAGraph()
    # thread_local: the other threads' CUDA calls (NCCL's watchdog querying its events,
    # the step watchdog's, a checkpoint copied to the host) must not void this capture.
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = work()
    return graph, out


def on_side_stream(device: torch.device, work: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Eager work before a capture, on a side stream as torch's CUDA graph recipe asks
    (what the warm-up allocates must not be the capture's)."""
    if device.type != "cuda":  # no streams
        return work()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        out = work()
    torch.cuda.current_stream(device).wait_stream(side)
    return out


def alone(error: str | None) -> tuple[int, str] | None:
    """One process's agreement: its own outcome."""
    return None if error is None else (0, error)


def eager_reason(choice: DeviceChoice, graph: bool) -> str | None:
    """Why this run's steps are not captured, or None when they are."""
    reasons = (
        (choice.device.type != "cuda", "the CPU has no CUDA graphs"),
        (not graph, "--no-graph"),
    )
    return next((why for applies, why in reasons if applies), None)


@dataclass
class _Shape:
    """One shape of work through static buffers: its warm-up steps, then its graph."""

    x: torch.Tensor
    y: torch.Tensor
    warm: int = 0
    graph: Replayable | None = None
    loss: torch.Tensor | None = None


class TrainStep:
    """Forward, backward, the gradients' all-reduce (several ranks), clip, AdamW (and
    GradScaler under fp16) for one batch.

    `trained` is what computes the loss (the model or its compiled wrapper);
    `parameters` are the model's own; `gradients`: their flat bucket when several ranks
    train (its views are the parameters' gradients). The scheduler stays with the
    caller: it steps after each optimizer step and fills the device-side learning rate.
    `grad_norm` is the last optimizer step's gradient norm (before clipping; a device
    tensor, overwritten by the next step). `parts`: how many parts each batch of this
    rank is computed in (their gradients accumulated); `record` and `agree`: how a
    capture is made and agreed on (`cuda_graph`, `Group.first_failure`).
    """

    def __init__(
        self,
        trained: nn.Module,
        parameters: list[nn.Parameter],
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None,
        choice: DeviceChoice,
        grad_clip_norm: float,
        capture: bool,
        say: Callable[[str], None] = print,
        uncompiled: nn.Module | None = None,
        gradients: FlatGradients | None = None,
        *,
        parts: int = 1,
        record: Record = cuda_graph,
        agree: Agree = alone,
    ) -> None:
        self.trained, self.parameters, self.optimizer = trained, parameters, optimizer
        self.gradients, self.parts, self.record, self.agree = gradients, parts, record, agree
        self.scaler, self.choice, self.grad_clip_norm = scaler, choice, grad_clip_norm
        self.capture, self.say = capture, say
        # `trained` compiled: the module to fall back to if compiling fails (at the
        # first forward, where torch.compile compiles).
        self.uncompiled = uncompiled
        for parameter in parameters:
            # Ours, not the first backward's: the capture needs their addresses fixed
            # before it, and a gradient allocated inside a compiled network's own CUDA
            # graphs would live in their pool, which the next step reclaims.
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        self._shapes: dict[tuple[int, bool], _Shape] = {}
        self._pool: Any = None
        self.grad_norm = torch.zeros((), device=choice.device)

    @property
    def captured(self) -> bool:
        """Whether full batches now replay graphs."""
        return any(shape.graph is not None for shape in self._shapes.values())

    def graph_pool(self) -> Any:
        """The captured steps' memory pool (None before a capture), for the evaluation
        graph to share: the two are never replayed at once."""
        return self._pool

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, scale: float, steps: bool = True, full: bool = True
    ) -> torch.Tensor:
        """The summed smooth-L1 loss of batch (x, y) times `scale`, its gradient added;
        with `steps`, then the optimizer step and the gradients zeroed. `full`: a batch
        of the run's size (whose `scale` is every full batch's). Captured when possible:
        the returned loss is then valid until the next call."""
        if self.parts == 1:  # nearly every run: no splitting on the step's host path
            return self._part(x, y, scale, steps, full)
        pieces = zip(x.tensor_split(self.parts), y.tensor_split(self.parts), strict=True)
        losses = []
        for index, (part_x, part_y) in enumerate(pieces):
            last = index == self.parts - 1
            losses.append(self._part(part_x, part_y, scale, steps and last, full))
        return torch.stack(losses).sum()

    def _part(
        self, x: torch.Tensor, y: torch.Tensor, scale: float, steps: bool, full: bool
    ) -> torch.Tensor:
        if full and self.capture:
            return self._static_step(x, y, scale, steps)
        return self._work(x, y, scale, steps)

    def _work(self, x: torch.Tensor, y: torch.Tensor, scale: float, steps: bool) -> torch.Tensor:
        loss = self.forward_backward(x, y, scale)
        if steps:
            self.optimizer_step()
        return loss

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        if x.shape[0] == 0:
            # A rank's empty share of a short last batch: nothing to add to the
            # gradients (and no empty batch through cuDNN); it still steps with the others.
            return torch.zeros((), device=self.choice.device)
        with self.choice.autocast(cache=not self.capture):
            loss = F.smooth_l1_loss(self._forward(x).float(), y, reduction="sum") * scale
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return loss.detach()

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.uncompiled is None:
            return self.trained(x)
        try:
            out, error = self.trained(x), None
        except Exception as failure:  # compiling is an optimisation: the run goes on eager
            out, error = None, _first_line(failure)
        failed = self.agree(error)  # every rank compiled, or every rank goes eager
        if failed is not None:
            self.trained = self.uncompiled
            self.say(f"compile: failed{self._where(failed)}, eager steps ({failed[1]})")
        self.uncompiled = None  # settled; a later error is the run's own
        return self.trained(x) if out is None else out

    def _where(self, failed: tuple[int, str]) -> str:
        """Which rank a failure was, where several ranks train."""
        return f" on rank {failed[0]} (every rank alike)" if self.gradients is not None else ""

    def optimizer_step(self) -> None:
        """All-reduce (several ranks), unscale (fp16), clip, step, zero the gradients in
        place; no host sync. The gradient norm is kept (`grad_norm`): what
        `clip_grad_norm_` computes anyway, and what the gradient noise scale is read from."""
        if self.gradients is not None:
            self.gradients.all_reduce()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.grad_clip_norm:
            norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.parameters])
        self.grad_norm.copy_(norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)

    def _static_step(
        self, x: torch.Tensor, y: torch.Tensor, scale: float, steps: bool
    ) -> torch.Tensor:
        """A full batch (or part) through its shape's static input buffers: (x, y)
        copied in, then its graph replayed; before the capture, the same work eagerly
        on the buffers."""
        key = (x.shape[0], steps)
        if key not in self._shapes:
            self._shapes[key] = _Shape(torch.empty_like(x), torch.empty_like(y))
        shape = self._shapes[key]
        shape.x.copy_(x)
        shape.y.copy_(y)
        if shape.graph is not None:
            shape.graph.replay()
            return shape.loss
        if shape.warm < WARMUP_STEPS:
            shape.warm += 1
            return on_side_stream(
                self.choice.device, lambda: self._work(shape.x, shape.y, scale, steps)
            )
        return self._capture(shape, scale, steps)

    def _capture(self, shape: _Shape, scale: float, steps: bool) -> torch.Tensor:
        """Record `shape`'s work, agree with every rank that all recorded it, and run
        this batch: by the replay, or eagerly where any rank's capture failed."""
        graph = loss = error = None
        try:
            graph, loss = self.record(
                lambda: self._work(shape.x, shape.y, scale, steps), self._pool
            )
        except Exception as failure:  # capture is an optimisation: any failure keeps the run
            error = _first_line(failure)
        failed = self.agree(error)
        if failed is not None:
            self.fall_back(failed)
            return self._work(shape.x, shape.y, scale, steps)
        shape.graph, shape.loss = graph, loss
        if self._pool is None:
            self._pool = graph.pool()
        graph.replay()  # recording ran nothing: this batch's work
        return loss

    def fall_back(self, failed: tuple[int, str]) -> None:
        """Eager from here on, every graph dropped, said in one line. A failed capture
        ran nothing, so the gradients accumulated so far stand (every rank's alike)."""
        self.capture, self._pool = False, None
        self._shapes.clear()
        if self.scaler is not None:
            # An unscale_ recorded before the failure marked the optimizer unscaled on the
            # host, and GradScaler has no public reset of that mark.
            self.scaler._per_optimizer_states.clear()
        self.say(f"graph: capture failed{self._where(failed)}, eager steps ({failed[1]})")


def _first_line(error: BaseException) -> str:
    detail = (str(error).strip().splitlines() or [""])[0][:160]
    return f"{type(error).__name__}: {detail}"


class EvalForward:
    """Evaluation's forward at a large batch: on a GPU recorded once as a CUDA graph over
    a static input (a run keeps one for all its evaluations), replayed for every full
    batch (the last, short one eager); eager where `capture` is off or the capture fails
    (one line). `pool`: the memory pool to record into (the training step's, when it has
    one: evaluation's activations then take no memory of their own)."""

    def __init__(
        self,
        model: nn.Module,
        choice: DeviceChoice,
        capture: bool,
        say: Callable[[str], None],
        pool: Callable[[], tuple[int, int] | None] = lambda: None,
    ) -> None:
        self.model, self.choice, self.capture, self.say = model, choice, capture, say
        self.pool = pool
        self._graph: Replayable | None = None
        self._static: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor, full: bool) -> torch.Tensor:
        """The model's output for `x` (under the caller's inference mode and autocast)."""
        if not (self.capture and full):
            return self.model(x)
        if self._graph is None:
            try:
                self._record(x)
            except Exception as error:  # an optimisation: evaluation goes on eager
                self.capture, self._graph = False, None
                self.say(f"graph: evaluation's capture failed, eager ({_first_line(error)})")
                return self.model(x)
        static_x, static_out = self._static
        static_x.copy_(x)
        self._graph.replay()
        return static_out.clone()  # the next replay overwrites it

    def _record(self, x: torch.Tensor) -> None:
        static_x = x.clone()
        on_side_stream(self.choice.device, lambda: self.model(static_x))  # cuDNN's autotuning
        graph, static_out = cuda_graph(lambda: self.model(static_x), self.pool())
        self._graph, self._static = graph, (static_x, static_out)
