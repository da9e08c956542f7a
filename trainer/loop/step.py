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
step's stream, recorded into the graph (`trainer.loop.gradient_sync`).

`--compile` compiles the network without CUDA graphs of its own (inductor's default
mode: fused kernels) in the first warm-up step, and the capture records the compiled
kernels like any others: the step stays one graph.

Eager, and said once why: the CPU (no CUDA graphs), `--no-graph`, `--grad-accum` > 1
(an optimizer step spans several batches). The short
last batch of an epoch is always eager. The first `WARMUP_STEPS` full steps run
eagerly on a side stream (cuDNN's autotuning, AdamW's state and the allocator settle
first); every step, eager or replayed, is a real step of the run: a replay runs the
kernels the eager step ran, on the same tensors, so resume and `--deterministic` hold.
A capture that fails leaves the run eager, with one line naming the error.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.loop.device import DeviceChoice
from trainer.loop.gradient_sync import FlatGradients

WARMUP_STEPS = 3


def eager_reason(choice: DeviceChoice, graph: bool, grad_accum: int) -> str | None:
    """Why this run's steps are not captured, or None when they are."""
    reasons = (
        (choice.device.type != "cuda", "the CPU has no CUDA graphs"),
        (not graph, "--no-graph"),
        (grad_accum > 1, "--grad-accum > 1: an optimizer step spans several batches"),
    )
    return next((why for applies, why in reasons if applies), None)


class TrainStep:
    """Forward, backward, the gradients' all-reduce (several ranks), clip, AdamW (and
    GradScaler under fp16) for one batch.

    `trained` is what computes the loss (the model or its compiled wrapper);
    `parameters` are the model's own; `gradients`: their flat bucket when several ranks
    train (its views are the parameters' gradients). The scheduler stays with the
    caller: it steps after each optimizer step and fills the device-side learning rate.
    `grad_norm` is the last optimizer step's gradient norm (before clipping; a device
    tensor, overwritten by the next step).
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
    ) -> None:
        self.trained, self.parameters, self.optimizer = trained, parameters, optimizer
        self.gradients = gradients
        self.scaler, self.choice, self.grad_clip_norm = scaler, choice, grad_clip_norm
        self.capture, self.say = capture, say
        # `trained` compiled: the module to fall back to if compiling fails (at the
        # first forward, where torch.compile compiles).
        self.uncompiled = uncompiled
        self.full_steps = 0  # full steps taken on the static buffers before the capture
        for parameter in parameters:
            # Ours, not the first backward's: the capture needs their addresses fixed
            # before it, and a gradient allocated inside a compiled network's own CUDA
            # graphs would live in their pool, which the next step reclaims.
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        self._static: tuple[torch.Tensor, torch.Tensor] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_loss: torch.Tensor | None = None
        self.grad_norm = torch.zeros((), device=choice.device)

    @property
    def captured(self) -> bool:
        """Whether full batches now replay the graph."""
        return self._graph is not None

    def graph_pool(self) -> tuple[int, int] | None:
        """The captured step's memory pool (None before a capture), for the evaluation
        graph to share: the two are never replayed at once."""
        return self._graph.pool() if self._graph is not None else None

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, scale: float, steps: bool = True, full: bool = True
    ) -> torch.Tensor:
        """The summed smooth-L1 loss of batch (x, y) times `scale`, its gradient added;
        with `steps`, then the optimizer step and the gradients zeroed. `full`: a batch
        of the run's size (whose `scale` is every full batch's). Captured when possible:
        the returned loss is then valid until the next call."""
        if steps and full and self.capture:
            return self._static_step(x, y, scale)
        loss = self.forward_backward(x, y, scale)
        if steps:
            self.optimizer_step()
        return loss

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        with self.choice.autocast(cache=not self.capture):
            loss = F.smooth_l1_loss(self._forward(x).float(), y, reduction="sum") * scale
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return loss.detach()

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.uncompiled is None:
            return self.trained(x)
        try:
            out = self.trained(x)
        except Exception as error:  # compiling is an optimisation: the run goes on eager
            self.trained, self.uncompiled = self.uncompiled, None
            self.say(f"compile: failed, eager steps ({_first_line(error)})")
            return self.trained(x)
        self.uncompiled = None  # compiled; a later error is the run's own
        return out

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

    def _whole(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        loss = self.forward_backward(x, y, scale)
        self.optimizer_step()
        return loss

    def _static_step(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        """A full step through the static input buffers: (x, y) copied in, then the
        graph replayed; before the capture, the same step eagerly on the buffers."""
        if self._static is None:
            self._static = (torch.empty_like(x), torch.empty_like(y))
        static_x, static_y = self._static
        static_x.copy_(x)
        static_y.copy_(y)
        if self._graph is not None:
            self._graph.replay()
            return self._graph_loss
        if self.full_steps < WARMUP_STEPS:
            self.full_steps += 1
            return self._on_side_stream(static_x, static_y, scale)
        try:
            graph = torch.cuda.CUDAGraph()
            # thread_local: the other threads' CUDA calls (NCCL's watchdog querying its
            # events, a checkpoint copied to the host) must not void this capture.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss = self._whole(static_x, static_y, scale)
        except Exception as error:  # capture is an optimisation: any failure keeps the run
            self.fall_back(error)
            return self._whole(x, y, scale)
        self._graph, self._graph_loss = graph, loss
        graph.replay()  # recording ran nothing: this batch's step
        return loss

    def _on_side_stream(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        """An eager step before the capture, on a side stream as torch's CUDA graph
        recipe asks (what the warm-up allocates must not be the capture's)."""
        if self.choice.device.type != "cuda":  # no streams (nor graphs: the capture says so)
            return self._whole(x, y, scale)
        side = torch.cuda.Stream(self.choice.device)
        side.wait_stream(torch.cuda.current_stream(self.choice.device))
        with torch.cuda.stream(side):
            loss = self._whole(x, y, scale)
        torch.cuda.current_stream(self.choice.device).wait_stream(side)
        return loss

    def fall_back(self, error: BaseException) -> None:
        """Eager from here on, said in one line; the half-recorded step left no trace."""
        self.capture, self._graph, self._static = False, None, None
        if self.scaler is not None:
            # An unscale_ recorded before the failure marked the optimizer unscaled, and
            # GradScaler has no public reset of that mark (update() needs an inf check).
            self.scaler._per_optimizer_states.clear()
        self.optimizer.zero_grad(set_to_none=False)
        self.say(f"graph: capture failed, eager steps ({_first_line(error)})")


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
        self._graph: torch.cuda.CUDAGraph | None = None
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
        side = torch.cuda.Stream(self.choice.device)
        side.wait_stream(torch.cuda.current_stream(self.choice.device))
        with torch.cuda.stream(side):
            self.model(static_x)  # cuDNN's autotuning before the capture
        torch.cuda.current_stream(self.choice.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool()):
            static_out = self.model(static_x)
        self._graph, self._static = graph, (static_x, static_out)
