"""ResNet-1D: torchvision's ResNet mapped to one-dimensional signals.

The layout follows torchvision's `resnet34`/`resnet18` layer for layer (stem conv k7
s2 + BN + ReLU + MaxPool(3, 2), BasicBlocks, projection shortcuts where the shape
changes, global average pool) with Conv2d(kxk) replaced by Conv1d(k), then dropout
and a linear head with one output: glucose in normalised units.
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.config import ModelConfig

BLOCKS_PER_STAGE = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
STAGE_WIDTHS = (64, 128, 256, 512)
MIN_INPUT_LENGTH = 32  # stem (/2) + pool (/2) + three strided stages (/8) leave >= 1 sample


class BasicBlock1d(nn.Module):
    """Two k-wide convolutions with a residual; a 1x1 projection when the shape changes."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, kernel_size: int) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = nn.Conv1d(in_ch, out_ch, kernel_size, stride, pad, bias=False)
        self.bn1 = nn.BatchNorm1d(out_ch)
        self.conv2 = nn.Conv1d(out_ch, out_ch, kernel_size, 1, pad, bias=False)
        self.bn2 = nn.BatchNorm1d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv1d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm1d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet1d(nn.Module):
    """ResNet over (batch, 1, length) windows, one regression output per window."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv1d(1, STAGE_WIDTHS[0], 7, 2, 3, bias=False),
            nn.BatchNorm1d(STAGE_WIDTHS[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool1d(3, 2, 1),
        )
        stages = []
        in_ch = STAGE_WIDTHS[0]
        for index, (blocks, width) in enumerate(
            zip(BLOCKS_PER_STAGE[config.arch], STAGE_WIDTHS, strict=True)
        ):
            stride = 1 if index == 0 else 2
            layers = []
            for block in range(blocks):
                layers.append(
                    BasicBlock1d(in_ch, width, stride if block == 0 else 1, config.kernel_size)
                )
                in_ch = width
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(in_ch, 1)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's init: He-normal convs, BN to identity.
        for module in self.modules():
            if isinstance(module, nn.Conv1d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm1d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1, L) -> (B,) predictions in normalised label units."""
        x = self.stages(self.stem(x))
        x = self.dropout(torch.flatten(self.pool(x), 1))
        return self.head(x).squeeze(1)


def build_model(config: ModelConfig) -> ResNet1d:
    return ResNet1d(config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
