"""The training step (`trainer.loop.step`): what a CPU can prove of the captured GPU step.

The CUDA graph itself needs a GPU (tests/trainer/loop/test_gpu.py). Here: full steps
fed through the static input buffers train the weights the plain eager steps train,
accumulated ones too (an accumulate-only graph and a stepping one, replayed eagerly by
`tests.trainer.eager_graph`), a capture that cannot happen leaves the run eager with
one line, which runs are eager and why, a share split into parts, an empty share, and
the compiled step trains. Several ranks' agreement: test_capture_agreement.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.trainer.eager_graph import record_eagerly
from trainer.config import ModelConfig
from trainer.loop.device import DeviceChoice
from trainer.loop.step import WARMUP_STEPS, EvalForward, TrainStep, eager_reason
from trainer.model import build_model

CPU = DeviceChoice(torch.device("cpu"), "fp32", "CPU")
GPU = DeviceChoice(torch.device("cuda"), "bf16", "GPU")
BATCH, LENGTH = 8, 64


def _step(
    capture: bool, lines: list[str], model: nn.Module | None = None, uncompiled=None, **how
) -> TrainStep:
    torch.manual_seed(0)
    if model is None:
        model = build_model(ModelConfig("resnet18"), CPU.device, "gemm").train()
    optimizer = CPU.optimizer(model.parameters(), 1e-3, 1e-2)
    parameters = list(model.parameters())
    return TrainStep(
        model, parameters, optimizer, None, CPU, 1.0, capture, lines.append, uncompiled, **how
    )


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(BATCH, 1, LENGTH, generator=generator),
            torch.randn(BATCH, generator=generator),
        )
        for _ in range(count)
    ]


def _train(step: TrainStep, batches, short_last: bool = False) -> list[float]:
    losses = []
    for index, (x, y) in enumerate(batches):
        torch.manual_seed(index)  # the loop seeds each batch's dropout so
        full = not (short_last and index == len(batches) - 1)
        x, y = (x, y) if full else (x[:3], y[:3])
        losses.append(float(step(x, y, 1 / x.shape[0], full=full)))
    return losses


def test_steps_fed_through_the_static_buffers_train_the_eager_steps_weights():
    batches = _batches(WARMUP_STEPS + 3)
    fed, plain = _step(True, []), _step(False, [])
    assert _train(fed, batches, short_last=True) == _train(plain, batches, short_last=True)
    for a, b in zip(
        fed.trained.state_dict().values(), plain.trained.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)


def test_a_capture_that_cannot_happen_leaves_one_line_and_eager_steps():
    lines: list[str] = []
    step = _step(True, lines)
    _train(step, _batches(WARMUP_STEPS))
    assert lines == []  # the warm-up steps are eager on the static buffers
    _train(step, _batches(3))
    assert len(lines) == 1 and lines[0].startswith("graph: capture failed, eager steps (")
    assert not step.captured and not step.capture


def test_the_gradients_are_the_steps_own_zeroed_tensors_from_before_the_first_step():
    # Not the first backward's: under --compile on a GPU those live in the compiled
    # network's CUDA graph pool, which its next step overwrites (seen on an H100).
    step = _step(True, [])
    grads = [p.grad for p in step.parameters]
    assert all(g is not None and not g.any() for g in grads)
    _train(step, _batches(2))
    assert all(p.grad is g for p, g in zip(step.parameters, grads, strict=True))


@pytest.mark.parametrize(
    ("choice", "graph", "reason"),
    [
        (GPU, True, None),
        (CPU, True, "the CPU has no CUDA graphs"),
        (GPU, False, "--no-graph"),
    ],
)
def test_which_runs_step_eagerly_and_why(choice, graph, reason):
    # --grad-accum is no reason any more: its micro-batches replay graphs too.
    assert eager_reason(choice, graph) == reason


def _accumulate(step: TrainStep, batches, accum: int) -> list[float]:
    losses = []
    for index, (x, y) in enumerate(batches):
        torch.manual_seed(index)
        steps = (index + 1) % accum == 0
        losses.append(float(step(x, y, 1 / (x.shape[0] * accum), steps=steps)))
    return losses


def _same_weights(a: TrainStep, b: TrainStep) -> bool:
    pairs = zip(a.trained.state_dict().values(), b.trained.state_dict().values(), strict=True)
    return all(torch.equal(x, y) for x, y in pairs)


def test_accumulated_steps_replayed_as_two_graphs_train_the_eager_weights_bitwise():
    accum = 2
    batches = _batches(accum * (WARMUP_STEPS + 3))
    replayed = _step(True, [], record=record_eagerly)
    plain = _step(False, [])
    assert _accumulate(replayed, batches, accum) == _accumulate(plain, batches, accum)
    assert _same_weights(replayed, plain)
    # An accumulate-only graph and a stepping one, each replayed after its warm-up.
    graphs = [shape.graph for shape in replayed._shapes.values()]
    assert sorted(replayed._shapes) == [(BATCH, False), (BATCH, True)]
    assert [graph.replays for graph in graphs] == [3, 3]


def test_a_share_computed_in_parts_trains_the_whole_shares_weights():
    torch.manual_seed(0)
    whole_model, parts_model = _Small(), _Small()
    parts_model.load_state_dict(whole_model.state_dict())
    whole = _step(False, [], whole_model)
    in_parts = _step(True, [], parts_model, parts=2, record=record_eagerly)
    batches = _batches(WARMUP_STEPS + 3)
    losses = _train(in_parts, batches)
    assert losses == pytest.approx(_train(whole, batches), rel=1e-5)
    for a, b in zip(
        parts_model.state_dict().values(), whole_model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert sorted(in_parts._shapes) == [(BATCH // 2, False), (BATCH // 2, True)]


def test_an_empty_share_adds_nothing_and_still_steps():
    # A short last batch of fewer windows than ranks leaves the trailing ranks none.
    (x, y), *_ = _batches(1)
    empty, whole = _step(False, []), _step(False, [])
    torch.manual_seed(0)
    empty(x, y, 1 / BATCH, steps=False)
    loss = empty(x[:0], y[:0], 1 / BATCH, steps=True, full=False)
    torch.manual_seed(0)
    whole(x, y, 1 / BATCH, steps=True)
    assert float(loss) == 0.0 and _same_weights(empty, whole)


class _Small(nn.Module):
    """Small enough for inductor to compile in seconds on a shared CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv1d(1, 4, 3), nn.Linear(4 * (LENGTH - 2), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(1)).squeeze(1)


@pytest.mark.e2e  # inductor's first compile: about a minute on two shared cores
def test_the_compiled_step_trains_as_the_eager_one_does(monkeypatch, tmp_path):
    # Inductor writes its cache dir into os.environ when none is set: undone after the
    # test, or every trainer this pytest process starts later inherits it (and keeps
    # its compiled code there, not in its run dir).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch.manual_seed(0)
    eager_model = _Small()
    torch.manual_seed(0)
    model = _Small()
    lines: list[str] = []
    compiled = _step(False, lines, torch.compile(model), uncompiled=model)
    eager = _step(False, [], eager_model)
    batches = _batches(3)
    assert _train(compiled, batches) == pytest.approx(_train(eager, batches), rel=1e-4)
    assert lines == [] and compiled.uncompiled is None  # compiled, no fallback
    for a, b in zip(model.state_dict().values(), eager_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_an_evaluation_capture_that_cannot_happen_is_one_line_and_the_eager_outputs():
    lines: list[str] = []
    model = _step(False, []).trained.eval()
    forward = EvalForward(model, CPU, True, lines.append)
    x = _batches(1)[0][0]
    with torch.inference_mode():
        outputs = [forward(x, full=True), forward(x, full=True), forward(x[:3], full=False)]
        expected = model(x)
    assert torch.equal(outputs[0], expected) and torch.equal(outputs[1], expected)
    assert len(lines) == 1 and lines[0].startswith("graph: evaluation's capture failed, eager (")
