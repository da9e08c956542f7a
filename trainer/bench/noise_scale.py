"""`python -m trainer bench --noise-scale RUN_DIR`: the gradient noise scale of a run at
its checkpoints, the measurement the default batch rule rests on.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", section 2 and
appendix A): a gradient of batch B is the true gradient G plus noise of covariance
Σ/B, so its squared norm is |G|² + tr(Σ)/B on average. The simple noise scale
B_simple = tr(Σ) / |G|² is the batch at which noise and signal are equal: training at
B well below it takes about S_min (1 + B_simple/B) steps, and more data per step
buys nearly proportionally fewer steps; well above it, a larger batch saves few steps
and spends its windows for little (the "critical batch", about B_simple). The rule
that sets the default global batch (`trainer.loop.defaults`) keeps it at or below what
this measures on the data the evidence came from (docs/trainer.md).

How: the checkpoint's weights in training mode (batch statistics, dropout, as a step
computes), `DRAWS` draws of `parts` batches of `small` windows from the run's training
split, each batch's gradient of the mean loss g_i; the big batch's gradient is their
mean (B_big = parts x small windows, as data-parallel ranks form it). With |G_small|² the
mean of |g_i|² and |G_big|² the squared norm of their mean, the paper's unbiased
estimates |G|² = (B_big |G_big|² - B_small |G_small|²) / (B_big - B_small) and
tr(Σ) = (|G_small|² - |G_big|²) / (1/B_small - 1/B_big) are averaged over the draws
before their ratio is taken (the paper's advice: the ratio of means is less biased).
The weights are not changed, nor the BatchNorm statistics a checkpoint holds.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from box.contract import CHECKPOINTS_DIR, LAST_CHECKPOINT
from trainer.checkpoints import checkpoint_file
from trainer.config import UserError
from trainer.data.dataset import Splits, load_dataset
from trainer.data.pipeline import WindowPipeline, norm_from_state
from trainer.loop.device import DeviceChoice, choose_device
from trainer.loop.evaluate import checkpoint_model


class Sizes(NamedTuple):
    """How many windows each estimate takes: `parts` batches of `small`, `draws` times,
    at up to `checkpoints` of the run's checkpoints."""

    small: int
    parts: int
    draws: int
    checkpoints: int


SIZES = {
    "gpu": Sizes(small=256, parts=16, draws=16, checkpoints=8),
    "cpu": Sizes(small=32, parts=16, draws=8, checkpoints=5),
    "quick": Sizes(small=4, parts=4, draws=2, checkpoints=2),
}
SEED = 0


@dataclass(frozen=True)
class NoiseScale:
    """One checkpoint's estimate."""

    step: int
    epoch: int
    gradient_sq: float  # |G|²
    trace_sigma: float  # tr(Σ), per window
    b_simple: float | None  # windows; None where |G|² came out at or below 0 (noise only)
    small_batch: int
    big_batch: int
    draws: int


def estimate(
    small_sq: list[float], big_sq: list[float], small: int, big: int
) -> tuple[float, float]:
    """(|G|², tr(Σ)) from each draw's mean |g_small|² and |g_big|² (McCandlish et al.
    2018, appendix A), averaged over the draws."""
    gradient_sq = [
        (big * b - small * s) / (big - small) for s, b in zip(small_sq, big_sq, strict=True)
    ]
    trace = [(s - b) / (1 / small - 1 / big) for s, b in zip(small_sq, big_sq, strict=True)]
    return float(np.mean(gradient_sq)), float(np.mean(trace))


def _draw(
    model: torch.nn.Module, pipeline: WindowPipeline, order: torch.Tensor, sizes: Sizes
) -> tuple[float, float]:
    """One draw's (mean |g_small|², |g_big|²) over `order`'s windows."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in parameters]
    small_sq = 0.0
    for part in order.split(sizes.small):
        x = pipeline.windows.index_select(0, part.to(pipeline.windows.device))
        y = pipeline.labels.index_select(0, part.to(pipeline.labels.device))
        loss = F.smooth_l1_loss(model(x.to(pipeline.device)).float(), y.to(pipeline.device))
        grads = torch.autograd.grad(loss, parameters)
        small_sq += float(sum(g.double().pow(2).sum() for g in grads))
        for accumulated, grad in zip(total, grads, strict=True):
            accumulated.add_(grad)
    big_sq = float(sum((g.double() / sizes.parts).pow(2).sum() for g in total))
    return small_sq / sizes.parts, big_sq


def measure(
    state: dict[str, Any], pipeline: WindowPipeline, choice: DeviceChoice, sizes: Sizes
) -> NoiseScale:
    """The noise scale of one checkpoint's weights on `pipeline`'s windows."""
    model = checkpoint_model(state, choice.device).train()
    big = sizes.small * sizes.parts
    generator = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)  # dropout
    small_sq, big_sq = [], []
    for _ in range(sizes.draws):
        order = torch.randperm(len(pipeline), generator=generator)[:big]
        s, b = _draw(model, pipeline, order, sizes)
        small_sq.append(s)
        big_sq.append(b)
    gradient_sq, trace = estimate(small_sq, big_sq, sizes.small, big)
    return NoiseScale(
        step=int(state["step"]),
        epoch=int(state["epoch"]),
        gradient_sq=gradient_sq,
        trace_sigma=trace,
        b_simple=trace / gradient_sq if gradient_sq > 0 else None,
        small_batch=sizes.small,
        big_batch=big,
        draws=sizes.draws,
    )


def checkpoints_of(run_dir: Path, most: int) -> list[Path]:
    """Up to `most` of the run's step files, evenly spread from its first to its last
    (its last.pt when it has none)."""
    directory = run_dir / CHECKPOINTS_DIR
    steps = sorted(directory.glob(checkpoint_file.STEP_FILE_GLOB))
    if not steps:
        last = directory / LAST_CHECKPOINT
        if not last.is_file():
            raise UserError(
                f"--noise-scale {run_dir}: no checkpoints under {directory}; expected a run dir "
                "`train` wrote (python -m trainer train --run-dir DIR ...)"
            )
        return [last]
    if len(steps) <= most:
        return steps
    picks = sorted({round(i * (len(steps) - 1) / (most - 1)) for i in range(most)})
    return [steps[i] for i in picks]


def _training_windows(run_dir: Path, state: dict[str, Any], choice: DeviceChoice) -> WindowPipeline:
    """The run's training split, normalised as the run normalised it."""
    data_dir = Path(state["config"]["data"]["data_dir"])
    if not (data_dir / "windows.npy").is_file():
        raise UserError(
            f"--noise-scale {run_dir}: its dataset {data_dir} is not on this machine; "
            "expected the directory the run trained on (fetch it there first)"
        )
    dataset = load_dataset(data_dir)
    if dataset.fingerprint != state["dataset_fingerprint"]:
        raise UserError(
            f"--noise-scale {run_dir}: {data_dir} is not the dataset the run trained on "
            "(its fingerprint differs); put the run's own dataset there"
        )
    norm = norm_from_state(state["label_norm"], state["input_norm"])
    cases = Splits(**state["splits"]).train
    return WindowPipeline(dataset, cases, norm, choice.device, batch_size=1)


def run_noise_scale(run_dir: Path, quick: bool, small: int | None, json_output: bool) -> int:
    """Measure and print the noise scale at the run's checkpoints; exit 0."""
    choice = choose_device("fp32")  # gradients as the optimizer sees them: fp32
    sizes = SIZES["quick" if quick else "gpu" if choice.device.type == "cuda" else "cpu"]
    if small is not None:
        sizes = sizes._replace(small=small)
    paths = checkpoints_of(run_dir, sizes.checkpoints)
    states = (checkpoint_file.load(path) for path in paths)  # one in memory at a time
    first = next(states)
    pipeline = _training_windows(run_dir, first, choice)
    if sizes.small * sizes.parts > len(pipeline):
        sizes = sizes._replace(parts=max(2, len(pipeline) // sizes.small))
    results = [
        measure(state, pipeline, choice, sizes) for state in itertools.chain([first], states)
    ]
    if json_output:
        print(json.dumps({"run_dir": str(run_dir), "estimates": [asdict(r) for r in results]}))
        return 0
    for r in results:
        said = (
            f"{r.b_simple:,.0f} windows" if r.b_simple is not None else "unmeasurable (|G|² <= 0)"
        )
        print(
            f"noise scale at step {r.step} (epoch {r.epoch}): B_simple {said} "
            f"(|G|² {r.gradient_sq:.4g}, tr Σ {r.trace_sigma:.4g}; batches of {r.small_batch} "
            f"and {r.big_batch}, {r.draws} draws)"
        )
    return 0
