"""ResNet-1D: torchvision's ResNet mapped to one-dimensional signals.

The layout follows torchvision's `resnet34`/`resnet18` layer for layer (stem conv k7
s2 + BN + ReLU + MaxPool(3, 2), BasicBlocks, projection shortcuts where the shape
changes, global average pool) with Conv2d(kxk) replaced by Conv1d(k), then dropout
and a linear head with one output: glucose in normalised units.

The same network comes in two formulations with identical parameters, names and
shapes, so a checkpoint written by one loads into the other:

- ``"gemm"`` (the CPU default): activations channels-last, (batch, length, channels);
  a convolution is an im2col copy and one matrix multiply, a batch norm normalises a
  (batch * length, channels) matrix. On CPU this is what runs fast: MKL's GEMM runs
  near the core's peak, while oneDNN's conv1d over (batch, channels, length) reorders
  every activation to its blocked layout and back, and batch norm over a short
  innermost length barely vectorises (`python -m trainer bench` measures the two).
- ``"torch"``: `nn.Conv1d` over (batch, channels, length), cuDNN on a GPU; also what
  the seeds' trainer ran, so the bench's baseline uses it.
- ``"nhwc"``: each convolution a Conv2d(1 x k) over (batch, channels, 1, length) in
  channels-last memory (NHWC), the layout cuDNN's tensor-core kernels take without
  transposing: in NCL layout cuDNN is likely to transpose around every convolution.
  Its weights are stored (out, k, in) in memory, so they too are channels-last.

Which one is fastest on a GPU is measured, not assumed: `--formulation auto` times
them at a run's first start (`trainer.loop.formulation`), `bench` reports each.

The linear head runs in fp32 even under autocast: in bf16 its single output, the
prediction, would be rounded to a step of 0.2-0.5 mg/dL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig

BLOCKS_PER_STAGE = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
STAGE_WIDTHS = (64, 128, 256, 512)
MIN_INPUT_LENGTH = 32  # stem (/2) + pool (/2) + three strided stages (/8) leave >= 1 sample


def default_formulation(device: torch.device) -> str:
    """The formulation used without a measurement: GEMM on CPU (measured faster or the
    same on Intel and AMD), cuDNN's conv1d on a GPU (what the seeds ran)."""
    return "torch" if device.type == "cuda" else "gemm"


class ConvGemm1d(nn.Module):
    """`nn.Conv1d` (no bias) over channels-last (batch, length, channels) input."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, padding: int = 0
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        # nn.Conv1d's shape (out, in, k), so state_dicts interchange with the torch
        # formulation, but stored k-major: the GEMM then reads the (k * in, out) matrix
        # in place instead of copying a permuted weight, and its gradient, every step.
        self.weight = nn.Parameter(torch.empty(kernel_size, in_ch, out_ch).permute(2, 1, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, stride = self.kernel_size, self.stride
        if self.padding:
            x = F.pad(x, (0, 0, self.padding, self.padding))
        out_len = (x.shape[1] - k) // stride + 1
        span = stride * (out_len - 1) + 1
        # im2col: row i holds input steps i*stride .. i*stride+k-1, tap-major.
        columns = torch.cat([x[:, tap : tap + span : stride] for tap in range(k)], dim=2)
        return columns @ self.weight.permute(2, 1, 0).flatten(0, 1)


class ConvNhwc1d(nn.Module):
    """`nn.Conv1d` (no bias) as a Conv2d(1 x k) over channels-last (batch, channels, 1,
    length) input."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, padding: int = 0
    ) -> None:
        super().__init__()
        self.stride, self.padding = (1, stride), (0, padding)
        # nn.Conv1d's shape (out, in, k) for the state_dict, stored (out, k, in): with
        # the height of 1 inserted it is a channels-last Conv2d weight, as cuDNN takes it.
        self.weight = nn.Parameter(torch.empty(out_ch, kernel_size, in_ch).permute(0, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight.unsqueeze(2), None, self.stride, self.padding)


class MaxPoolNhwc(nn.MaxPool2d):
    """MaxPool1d over (batch, channels, 1, length) input."""

    def __init__(self, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__((1, kernel_size), (1, stride), (0, padding))


class BatchNormLast(nn.BatchNorm1d):
    """BatchNorm1d over channels-last (batch, length, channels) input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.flatten(0, 1)).view_as(x)


class MaxPoolLast(nn.MaxPool1d):
    """MaxPool1d over channels-last (batch, length, channels) input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2).contiguous()


def _as_is(x: torch.Tensor) -> torch.Tensor:
    return x


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)  # (B, L, 1)


def _nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(2).contiguous(memory_format=torch.channels_last)  # (B, 1, 1, L)


class _Layers(NamedTuple):
    conv: Callable[..., nn.Module]
    norm: Callable[..., nn.Module]
    max_pool: Callable[..., nn.Module]
    length_dim: int
    enter: Callable[[torch.Tensor], torch.Tensor] = _as_is
    """(batch, 1, length) windows into the layout the layers take."""


def _torch_conv(
    in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, padding: int = 0
) -> nn.Conv1d:
    return nn.Conv1d(in_ch, out_ch, kernel_size, stride, padding, bias=False)


LAYERS = {
    "gemm": _Layers(ConvGemm1d, BatchNormLast, MaxPoolLast, length_dim=1, enter=_channels_last),
    "torch": _Layers(_torch_conv, nn.BatchNorm1d, nn.MaxPool1d, length_dim=2),
    "nhwc": _Layers(ConvNhwc1d, nn.BatchNorm2d, MaxPoolNhwc, length_dim=3, enter=_nhwc),
}
FORMULATIONS = tuple(LAYERS)


class BasicBlock1d(nn.Module):
    """Two k-wide convolutions with a residual; a 1x1 projection when the shape changes."""

    def __init__(
        self, in_ch: int, out_ch: int, stride: int, kernel_size: int, layers: _Layers
    ) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = layers.conv(in_ch, out_ch, kernel_size, stride, pad)
        self.bn1 = layers.norm(out_ch)
        self.conv2 = layers.conv(out_ch, out_ch, kernel_size, 1, pad)
        self.bn2 = layers.norm(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                layers.conv(in_ch, out_ch, 1, stride), layers.norm(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet1d(nn.Module):
    """ResNet over (batch, 1, length) windows, one regression output per window."""

    def __init__(self, config: ModelConfig, formulation: str = "gemm") -> None:
        super().__init__()
        if formulation not in LAYERS:
            raise ValueError(f"formulation {formulation!r}: expected one of {sorted(LAYERS)}")
        layers = LAYERS[formulation]
        self.formulation = formulation
        self.length_dim, self.enter = layers.length_dim, layers.enter
        self.stem = nn.Sequential(
            layers.conv(1, STAGE_WIDTHS[0], 7, 2, 3),
            layers.norm(STAGE_WIDTHS[0]),
            nn.ReLU(inplace=True),
            layers.max_pool(3, 2, 1),
        )
        stages = []
        in_ch = STAGE_WIDTHS[0]
        for index, (blocks, width) in enumerate(
            zip(BLOCKS_PER_STAGE[config.arch], STAGE_WIDTHS, strict=True)
        ):
            stride = 1 if index == 0 else 2
            blocks_of_stage = []
            for block in range(blocks):
                first_stride = stride if block == 0 else 1
                blocks_of_stage.append(
                    BasicBlock1d(in_ch, width, first_stride, config.kernel_size, layers)
                )
                in_ch = width
            stages.append(nn.Sequential(*blocks_of_stage))
        self.stages = nn.Sequential(*stages)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(in_ch, 1)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's init: He-normal convs, BN to identity.
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, ConvGemm1d, ConvNhwc1d)):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1, L) -> (B,) predictions in normalised label units, in fp32."""
        x = self.stages(self.stem(self.enter(x)))
        x = self.dropout(x.mean(self.length_dim).flatten(1))  # global average pool
        with torch.autocast(x.device.type, enabled=False):
            return self.head(x.to(self.head.weight.dtype)).squeeze(1)


def build_model(
    config: ModelConfig, device: torch.device | str = "cpu", formulation: str | None = None
) -> ResNet1d:
    """The network on `device`, in the formulation that is fastest there unless given."""
    device = torch.device(device)
    return ResNet1d(config, formulation or default_formulation(device)).to(device)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
