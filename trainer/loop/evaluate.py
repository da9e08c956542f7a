"""Predictions and metrics for one split: used at the end of `train` and by `evaluate`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.checkpoints import checkpoint_file
from trainer.config import ModelConfig, UserError
from trainer.data.dataset import Splits, load_dataset
from trainer.data.pipeline import Normalisation, WindowPipeline, norm_from_state
from trainer.loop.device import DeviceChoice, choose_device
from trainer.loop.distributed import Group
from trainer.loop.step import EvalForward
from trainer.metrics import regression_report
from trainer.model import build_model

EVAL_BATCH_SIZE = 1024  # on the CPU
# On a GPU: large enough that an evaluation is a few replays of one graph, small
# enough for any GPU's memory next to the resident splits.
GPU_EVAL_BATCH_SIZE = 8192


def eval_batch_size(device: torch.device) -> int:
    return GPU_EVAL_BATCH_SIZE if device.type == "cuda" else EVAL_BATCH_SIZE


def predict(
    model: nn.Module,
    pipeline: WindowPipeline,
    choice: DeviceChoice,
    norm: Normalisation,
    group: Group | None = None,
    forward: EvalForward | None = None,
) -> np.ndarray:
    """Glucose predictions (mg/dL) for every window of `pipeline`, in stored order,
    through `forward` (default: a new `EvalForward`, captured on a GPU).

    With a `group` of several ranks (which must hold the same weights and buffers),
    each rank predicts its share of whole evaluation batches and all ranks gather the
    rest: every batch is one a single process forms too, so the predictions are a
    single-process evaluation's, in 1/world_size of its time.
    """
    group = group or Group()
    batch = eval_batch_size(choice.device)
    start, stop = group.shard(len(pipeline), batch)
    model.eval()
    forward = forward or eval_forward(model, choice)
    outputs = [torch.zeros(0, device=choice.device)]
    with torch.inference_mode(), choice.autocast(cache=not forward.capture):
        for x, _ in pipeline.in_order(batch, start, stop):
            outputs.append(forward(x, full=x.shape[0] == batch).float())
    mine = torch.cat(outputs).cpu().numpy()  # the one host sync
    normalised = group.all_gather_rows(mine).astype(np.float64)
    return normalised * norm.label_std + norm.label_mean


def eval_forward(
    model: nn.Module,
    choice: DeviceChoice,
    graph: bool = True,
    pool: Callable[[], tuple[int, int] | None] = lambda: None,
) -> EvalForward:
    """`model`'s evaluation forward: captured on a GPU unless `graph` is off."""
    capture = graph and choice.device.type == "cuda"
    return EvalForward(model, choice, capture, lambda line: print(line, flush=True), pool)


def split_report(
    model: nn.Module,
    pipeline: WindowPipeline,
    choice: DeviceChoice,
    norm: Normalisation,
    group: Group | None = None,
    forward: EvalForward | None = None,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """(metrics with the train-median baseline, reference mg/dL, predictions mg/dL)."""
    pred = predict(model, pipeline, choice, norm, group, forward)
    ref = pipeline.glucose_mg_dl.numpy().astype(np.float64)
    return regression_report(ref, pred, baseline_value=norm.label_median), ref, pred


def checkpoint_model(state: dict[str, Any], device: torch.device) -> nn.Module:
    """The model a checkpoint's `state` holds, its weights loaded, on `device`."""
    model = build_model(ModelConfig(**state["config"]["model"]), device)
    model.load_state_dict(state["model"])
    return model


def evaluate_checkpoint(
    data_dir: Path, checkpoint_arg: str, split: str, *, other_data: bool = False
) -> dict[str, Any]:
    """Metrics of a checkpoint on one split of a dataset, as a JSON-able dict.
    `other_data`: score it on a dataset other than the one it was trained on."""
    try:
        state = checkpoint_file.load(checkpoint_file.resolve_local(checkpoint_arg))
    except checkpoint_file.CheckpointError as error:
        raise UserError(f"--checkpoint: {error}") from None
    dataset = load_dataset(data_dir)
    if dataset.fingerprint != state["dataset_fingerprint"]:
        # The split's case ids would pick whatever windows carry them here.
        where = f"{data_dir} is not the dataset this checkpoint was trained on"
        if not other_data:
            raise UserError(
                f"--data {where} (its {split} cases are ids of that one); pass the "
                "training dataset, or --allow-other-data to score it here anyway"
            )
        print(f"warning: {where}", file=sys.stderr)
    splits = Splits(**state["splits"])
    cases = splits.cases(split)
    choice = choose_device("auto")
    model = checkpoint_model(state, choice.device)
    norm = norm_from_state(state["label_norm"], state["input_norm"])
    pipeline = WindowPipeline(dataset, cases, norm, choice.device, eval_batch_size(choice.device))
    report, _, _ = split_report(model, pipeline, choice, norm)
    return {
        "checkpoint": str(checkpoint_arg),
        "split": split,
        "cases": cases,
        "epoch": int(state["epoch"]),
        "step": int(state["step"]),
        **report,
    }
