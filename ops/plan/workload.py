"""What one training window asks of a GPU: ResNet34-1D's FLOPs and memory traffic, and
the most windows/s a GPU's datasheet allows for them (its roofline).

The counts follow the architecture as `trainer/model.py` builds it (checked against
torch's FLOP counter in the tests); the datasheet figures are `stack.catalog.GPUS`.
`ops.plan.throughput` plans every GPU under `roofline_windows_per_s`. Plain arithmetic:
`fab plan` must start without torch.
"""

from __future__ import annotations

from typing import Literal

from stack.catalog import GpuSpec

# ResNet34-1D as trainer/model.py builds it: the torchvision ResNet34 mapped to 1-D.
RESNET34_BLOCKS = (3, 4, 6, 3)
RESNET_WIDTHS = (64, 128, 256, 512)
BLOCK_KERNEL = 3
STEM_KERNEL = 7

# Backward costs about twice the forward (gradients w.r.t. activations and weights).
TRAIN_FLOPS_PER_FORWARD_FLOP = 3

# Memory traffic of one training window, an assumption the fitted factor scales: each
# convolution's output (bf16) is written and read about this many times in a step:
# forward (convolution, batch norm, ReLU, the residual add) and backward (about twice).
ACTIVATION_ACCESSES = 15
ACTIVATION_BYTES = 2

Precision = Literal["bf16", "fp16"]


def _conv_out(length: int, kernel: int, stride: int, padding: int) -> int:
    return (length + 2 * padding - kernel) // stride + 1


def _conv_outputs(window_length: int) -> list[tuple[int, int, int, int]]:
    """(in channels, out channels, kernel, output length) of each convolution of
    ResNet34-1D, the 1x1 projection shortcuts included, in order."""
    if window_length < 32:
        raise ValueError(f"window length {window_length} is below the model's minimum of 32")
    length = _conv_out(window_length, STEM_KERNEL, 2, STEM_KERNEL // 2)
    convs = [(1, RESNET_WIDTHS[0], STEM_KERNEL, length)]
    length = _conv_out(length, 3, 2, 1)  # max pool
    channels = RESNET_WIDTHS[0]
    for stage, (blocks, width) in enumerate(zip(RESNET34_BLOCKS, RESNET_WIDTHS, strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out = _conv_out(length, BLOCK_KERNEL, stride, BLOCK_KERNEL // 2)
            convs += [(channels, width, BLOCK_KERNEL, out), (width, width, BLOCK_KERNEL, out)]
            if stride != 1 or channels != width:
                convs.append((channels, width, 1, out))  # 1x1 projection shortcut
            channels, length = width, out
    return convs


def forward_flops_per_window(window_length: int) -> int:
    """Forward FLOPs (2 x multiply-accumulates) of ResNet34-1D for one window.

    Convolutions and the linear head only: batch norm, ReLU and pooling add well
    under 1% and are memory-bound work that the efficiency factor already covers.
    """
    convs = _conv_outputs(window_length)
    macs = sum(cin * cout * kernel * out for cin, cout, kernel, out in convs)
    macs += RESNET_WIDTHS[-1] * 1  # linear head to one glucose value
    return 2 * macs


def train_bytes_per_window(window_length: int) -> int:
    """Bytes of activation memory traffic in one training step, per window."""
    elements = sum(cout * out for _, cout, _, out in _conv_outputs(window_length))
    return elements * ACTIVATION_ACCESSES * ACTIVATION_BYTES


def train_flops_per_window(window_length: int) -> int:
    """FLOPs of one training pass (forward + backward) over one window."""
    return TRAIN_FLOPS_PER_FORWARD_FLOP * forward_flops_per_window(window_length)


def training_precision(gpu: GpuSpec) -> Precision:
    """What `--precision auto` picks: bf16 where the GPU has it, fp16 (V100, T4) otherwise."""
    return "bf16" if gpu.bf16_tflops > 0 else "fp16"


def peak_tflops(gpu: GpuSpec, precision: Precision) -> float:
    """The datasheet's dense tensor peak at `precision`."""
    return gpu.bf16_tflops if precision == "bf16" else gpu.fp16_tflops


def _compute_s(gpu: GpuSpec, window_length: int) -> float:
    peak = peak_tflops(gpu, training_precision(gpu)) * 1e12
    return train_flops_per_window(window_length) / peak


def _memory_s(gpu: GpuSpec, window_length: int) -> float:
    return train_bytes_per_window(window_length) / (gpu.memory_tb_s * 1e12)


def datasheet_window_s(gpu: GpuSpec, window_length: int) -> float:
    """A window's compute at the datasheet peak plus its memory traffic at the datasheet
    bandwidth, in seconds: the scale `ops.plan.throughput.StepModel.factor` multiplies
    (the measured GPUs' factor says how far from both a step really is)."""
    return _compute_s(gpu, window_length) + _memory_s(gpu, window_length)


def roofline_windows_per_s(gpu: GpuSpec, window_length: int) -> float:
    """The most windows/s one GPU can train, whatever the step: a window's FLOPs at
    the datasheet peak of its training precision, or its memory traffic at the
    datasheet bandwidth, whichever takes longer (the roofline: at best a GPU overlaps
    the two entirely, so the sum `datasheet_window_s` is no bound). The traffic is
    `ACTIVATION_ACCESSES`'s assumed count: a measured row above the bound says that
    count is too high for the step measured, and the planner caps the row and says so."""
    return 1 / max(_compute_s(gpu, window_length), _memory_s(gpu, window_length))
